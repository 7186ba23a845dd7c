"""Which context hears which hook: the one place a lower context's news reaches the higher ones.

Fleet and the gate sit below the contexts that must react to what they change inside the same
transaction (ADR 0014): a node's report that brings new atoms must hold them for a layout change
under way (the gate) or for the endpoint its node serves (endpoints), and a pool's new shape starts
the gate. They declare what they tell in their ports (`service.fleet.ports.FleetHooks`,
`service.gate.ports.GateHooks`) and call it through the transaction (`tx.hooks`); `Hooks` answers
each with the higher contexts' handlers, in the order the change needs them.

The storage's unit of work binds a `Hooks` to itself (storage/uow.py), so every transaction of every
store carries the same wiring, whoever opened the store (the server, the CLI's in-process paths, a
test, a benchmark): there is no registry to set, and nothing to forget. It imports every context it
wires, so it lives at the layer's root beside `tx.py`; no context imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.gate.node_spec import NodeWork
from better_compute.service.endpoints import copy_work, endpoint_holds, endpoint_relayout
from better_compute.service.gate import mig_gate, partition_holds
from better_compute.service.tx import Tx


@dataclass(frozen=True, slots=True)
class Hooks:
    """Fleet's and the gate's hooks, answered in `tx` (the transaction that made the change)."""

    tx: Tx

    def atoms_lost(self, lost: Sequence[Atom], now: datetime) -> None:
        # Copies of an endpoint's components on them wait again, and move if they can.
        endpoint_holds.replan_lost_in(self.tx, lost, now)

    def atoms_found(self, found: Sequence[Atom], now: datetime) -> None:
        # A node under a layout change holds its new atoms too, until the change is applied; one
        # serving an endpoint (and under no change) holds them for it.
        partition_holds.hold_new_atoms_in(self.tx, found, now)
        endpoint_holds.hold_new_atoms_in(self.tx, found, now)

    def nodes_leaving(self, node_ids: Sequence[str], now: datetime) -> None:
        # A leaving node's layout change ends: its holds go before its atoms are re-derived.
        mig_gate.leave_in(self.tx, node_ids, now)

    def pool_reshaped(
        self, pool_id: str, node_ids: Sequence[str], old_shape: str | None, new_shape: str, now: datetime
    ) -> None:
        mig_gate.request_in(self.tx, pool_id, node_ids, old_shape, new_shape, now)

    def nodes_joined(self, pool_id: str, node_ids: Sequence[str], layout: str, now: datetime) -> None:
        mig_gate.join_in(self.tx, pool_id, node_ids, layout, now)

    def layout_applied(self, node_id: str, now: datetime) -> None:
        endpoint_relayout.layout_applied_in(self.tx, node_id, now)

    def atom_of_unbooked(self, allocation_id: str) -> str | None:
        # A node reports on the endpoint copies it runs, which the ledger books for no tenant.
        return copy_work.atom_of_in(self.tx, allocation_id)

    def work_on(self, atom_ids: Sequence[str], allocation_ids: Sequence[str]) -> NodeWork:
        # A workload replica runs its workload's container; an endpoint copy its component's.
        return NodeWork(
            containers=self.tx.workloads.containers_of(allocation_ids),
            copies=copy_work.placed_on_in(self.tx, atom_ids),
        )


__all__ = ["Hooks"]
