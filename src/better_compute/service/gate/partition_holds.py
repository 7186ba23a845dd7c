"""A layout change's own bookings (docs/concepts.md#the-atom-rule): every atom of a GPU, parent included,
booked open-ended from the end of the node's last live booking under that GPU's partition allocation
(`partition:<gpuId>:<start>`), so nothing new lands on an atom about to disappear while idle time
before it still books. The layout gate (`service.gate.mig_gate`) makes and releases them; ingestion adds
the atoms a change brings (`hold_new_atoms_in`), which is why they live apart from the gate, which
re-derives atoms through ingestion at a grant."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.gate.records import MigLayoutGate
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.events import PartitionReleased
from better_compute.domain.ledger.ledger import partition_allocation_id
from better_compute.service.gate.ports import GateTx


def hold(tx: GateTx, families: dict[str, list[str]], start: datetime, now: datetime) -> None:
    """Book every GPU's `families` atoms from `start` on, open-ended, under that GPU's partition
    allocation."""
    groups = {partition_allocation_id(gpu_id, start): family for gpu_id, family in families.items()}
    tx.ledger.book_holds(groups, Window(start, None), now)


def hold_new_atoms_in(tx: GateTx, fresh: Sequence[Atom], now: datetime) -> None:
    """Atoms that just appeared on nodes under a layout change (the repartition's instances, a
    slot count's new slots, a joining node's first report) join their GPU's partition hold, so no
    tenant books them before the change is applied (the holds were made on the atoms there were).
    Called by ingestion under the nodes' locks. An atom a live booking already holds (an instance
    back under its holder) is left as it is."""
    gates = tx.mig_layouts.of_nodes(sorted({a.node for a in fresh}))
    mine = [a for a in fresh if (g := gates.get(a.node)) is not None and g.scheduled_from is not None]
    if not mine:
        return
    live = {b.atom_id for b in tx.ledger.live_on([a.id for a in mine], now)}
    by_gpu: dict[str, list[Atom]] = {}
    for atom in mine:
        if atom.id not in live:
            by_gpu.setdefault(atom.gpu_id, []).append(atom)
    for gpu_id, atoms in sorted(by_gpu.items()):
        start = gates[atoms[0].node].scheduled_from
        assert start is not None
        allocation = partition_allocation_id(gpu_id, start)
        ids = sorted(a.id for a in atoms)
        tx.ledger.book(ids, Window(start, None), allocation, None, now, require_bookable=False)


def release(tx: GateTx, gate: MigLayoutGate, now: datetime) -> None:
    """End the partition bookings a node's gate holds (none before it was scheduled)."""
    if gate.scheduled_from is None:
        return
    for gpu in tx.gpus.of_nodes([gate.node_id]):
        allocation = partition_allocation_id(gpu.id, gate.scheduled_from)
        tx.ledger.end_allocation(allocation, now, PartitionReleased(allocation, now))


__all__ = ["hold", "hold_new_atoms_in", "release"]
