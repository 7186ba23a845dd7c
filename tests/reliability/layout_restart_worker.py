"""Processes for the race of placers with nodes restarting whole: placers reserve whole GPUs and MIG
instances for windows later on, while a node process restarts every node again and again (a daemon
killed and started over a GPU that lost its instances: a whole-GPU inventory) and then plays its
`bcd` (reads its spec, lets the host converger bring the GPUs to it, reports). Each has its own
store and the production clock."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from better_compute.bcd.fake import FakeNode
from better_compute.bcd.host import HostConverger
from better_compute.bcd.inventory import mig_instances
from better_compute.bcd.logs import Log
from better_compute.domain.fleet.atoms import atom_id_for, mig_atom_key
from better_compute.domain.kernel.errors import DomainError
from better_compute.domain.tenancy.credentials import Principal
from better_compute.service.fleet import inventory
from better_compute.service.gate import node_spec
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.storage.store import Store
from better_compute.wire.nodes import NodeSpecPublic

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="restart-admin")
MODEL = "H100-80GB"


def now() -> datetime:
    return datetime.now(UTC)


def placer(url: str, worker: int, cls: str, attempts: int, base: float) -> Counter[str]:
    """Reserve one `cls` atom for 2 hours from one or two hours after `base` (Unix seconds), so
    that every placer's windows meet, `attempts` times; the outcomes, `booked` or
    `refused:<code>`."""
    rng = random.Random(worker)
    store = Store.open(url, migrate_schema=False, pool_size=2)
    index = BookingIndex()
    ids = (f"rsv-r{worker}-{n:06d}" for n in itertools.count())
    outcomes: Counter[str] = Counter()
    try:
        for _ in range(attempts):
            start = datetime.fromtimestamp(base, UTC) + timedelta(hours=rng.choice((1, 2)))
            raw: dict[str, Any] = {
                "tenantId": "platform",
                "poolId": "p1",
                "devices": [{"class": cls, "count": 1}],
                "start": start.isoformat(),
                "duration": "2h",
            }
            try:
                reservations.create(store, index, ADMIN, raw, now(), lambda: next(ids))
            except DomainError as refused:
                outcomes[f"refused:{refused.code}"] += 1
                continue
            outcomes["booked"] += 1
    finally:
        store.close()
    return outcomes


class _Null:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def _converge(store: Store, fake: FakeNode) -> None:
    """One pass of the node's `bcd`: read its spec, bring the GPUs no assignment holds to it,
    report the inventory and, once converged, the generation observed."""
    served = node_spec.read(store, fake.name, now())
    public = NodeSpecPublic.model_validate({**served.spec.content(), "generation": served.generation})
    by_atom = {atom_id_for(g.uuid, "gpu"): g.uuid for g in fake.list_gpus()}
    for g in fake.list_gpus():
        for gi in g.instances:
            for m in mig_instances(gi):
                by_atom[atom_id_for(g.uuid, mig_atom_key(m))] = g.uuid
    held = {by_atom[a] for x in public.assignments for a in x.atoms if a in by_atom}
    host = HostConverger(fake, Log(_Null()))
    host.converge(public, held)
    inventory.ingest(store, [fake.report()], now())
    if not host.unconverged(public):
        with store.begin() as tx:
            tx.nodes.mark_observed(fake.name, served.generation, now())


def restarter(url: str, nodes: list[str], gpus: int, rounds: int) -> int:
    """Restart every node whole, then let each converge its spec, `rounds` times, and once more at
    the end; returns the rounds made."""
    store = Store.open(url, migrate_schema=False, pool_size=2)
    try:
        for _ in range(rounds):
            fakes = [FakeNode.build(name, MODEL, gpus) for name in nodes]  # their instances lost
            inventory.ingest(store, [f.report() for f in fakes], now())
            for fake in fakes:
                _converge(store, fake)
        for fake in fakes:  # settled: every node at its spec
            _converge(store, fake)
    finally:
        store.close()
    return rounds
