"""The MIG torture run: placer processes race to reserve and release atoms of one mig pool while its
layout is changed again and again through the gate, a reconciler process drives the gate, and a
process plays every node's `bcd` host converger over the fake backend. All on PostgreSQL, with the
production clock (every process on this machine reads the same one).

The invariant checker (`violations`) reads the ledger and what the nodes reported:
- no parent and child live at once (a tenant's booking of a GPU's `gpu` atom overlapping one of its
  `gpu.mig` atoms);
- no atoms of two layouts live at once (two tenant bookings overlapping in time on one GPU whose
  atoms never existed side by side in any inventory the node reported);
- no booked atom's instance destroyed while its booking was live;
- every placer request ended booked or refused with a reason (an error code).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from better_compute.bcd.fake import FakeNode
from better_compute.bcd.host import HostConverger
from better_compute.bcd.inventory import mig_instances
from better_compute.bcd.logs import Log
from better_compute.domain.fleet.atoms import atom_id_for, mig_atom_key
from better_compute.domain.kernel.errors import DomainError
from better_compute.domain.ops.fleet import FleetSpec, parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.service.fleet import inventory, pools
from better_compute.service.gate import node_spec
from better_compute.service.gate.mig_gate import Reconciler
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.storage.store import Store
from better_compute.wire.nodes import NodeSpecPublic
from tests.builders import small_fleet

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="torture-admin")
LAYOUTS = ("mixed:3g.40gb+2x2g.20gb", "all-2g.20gb", "all-1g.10gb", "mixed:4g.40gb+3x1g.10gb", "all-3g.40gb")
TENANTS = ("platform", "acme")


def now() -> datetime:
    return datetime.now(UTC)


def fleet(nodes: int) -> FleetSpec:
    return parse_fleet(small_fleet(nodes=nodes))  # type: ignore[arg-type]


@dataclass
class NodesRecord:
    """What the node process saw: each instance set (atom ids) each GPU reported, and every instance
    it destroyed, with when (Unix seconds)."""

    sets: dict[str, list[frozenset[str]]] = field(default_factory=dict)
    destroyed: list[tuple[str, str, float]] = field(default_factory=list)
    passes: int = 0


def _mig_atoms(fake: FakeNode) -> dict[str, frozenset[str]]:
    return {
        g.uuid: frozenset(
            atom_id_for(g.uuid, mig_atom_key(m)) for gi in g.instances for m in mig_instances(gi)
        )
        for g in fake.list_gpus()
    }


def placer(url: str, worker: int, attempts: int, seed: int, seconds: float | None = None) -> Counter[str]:
    """Reserve one `gpu.mig` atom now for 1 to 4 s, `attempts` times (or for `seconds`, if that
    ends first), releasing some at once; the outcomes, `booked` or `refused:<code>`."""
    rng = random.Random(seed)
    store = Store.open(url, migrate_schema=False, pool_size=2)
    index = BookingIndex()
    ids = (f"rsv-t{worker}-{n:07d}" for n in itertools.count())
    outcomes: Counter[str] = Counter()
    until = None if seconds is None else time.monotonic() + seconds
    try:
        for n in range(attempts):
            if n and n % PROGRESS == 0:  # a long run says how far it is
                print(json.dumps({"placer": worker, "attempts": n, **outcomes}), flush=True)
            if until is not None and time.monotonic() >= until:
                break
            raw: dict[str, Any] = {
                "tenantId": rng.choice(TENANTS),
                "poolId": "p1",
                "devices": [{"class": "gpu.mig", "count": 1}],
                "duration": f"{rng.randint(1, 4)}s",
            }
            try:
                view = reservations.create(store, index, ADMIN, raw, now(), lambda: next(ids))
            except DomainError as refused:
                outcomes[f"refused:{refused.code}"] += 1
                continue
            outcomes["booked"] += 1
            if rng.random() < 0.5:
                try:
                    reservations.release(store, ADMIN, view.id, now())
                except DomainError as refused:  # it ended by itself meanwhile
                    outcomes[f"release-refused:{refused.code}"] += 1
    finally:
        store.close()
    return outcomes


def changer(url: str, changes: int, pause: float, placed: str, seed: int = 7) -> int:
    """Change the pool's layout to one of LAYOUTS at random (so a change often goes back to the
    layout a node is frozen at, or was just granted), `pause` seconds apart, at least `changes`
    times and until the file `placed` exists (the placers are done), so the layout keeps changing
    under them however long they take; returns the changes made."""
    rng = random.Random(seed)
    store = Store.open(url, migrate_schema=False, pool_size=2)
    made = 0
    try:
        while made < changes or not os.path.exists(placed):
            try:
                pools.update(store, ADMIN, "p1", policy={"migLayout": rng.choice(LAYOUTS)}, now=now())
                made += 1
            except DomainError:
                pass  # a concurrent change: the next one comes
            time.sleep(pause)
    finally:
        store.close()
    return made


PROGRESS = 20_000
"""A placer prints its counts every this many attempts."""

NODE_PAUSE = 0.05
"""Seconds the node process waits between its passes over the nodes (a daemon waits longer)."""

SETTLE = 6.0
"""Seconds the gate and the nodes go on after the stop file appears, for the last change to apply."""


class _Until:
    """True until `SETTLE` seconds after the file `stop` exists."""

    def __init__(self, stop: str) -> None:
        self.stop = stop
        self.deadline: float | None = None

    def __call__(self) -> bool:
        if self.deadline is None and os.path.exists(self.stop):
            self.deadline = time.monotonic() + SETTLE
        return self.deadline is None or time.monotonic() < self.deadline


def reconciler(url: str, stop: str) -> int:
    """Drive the gate until a little after `stop` exists; returns the passes made."""
    store = Store.open(url, migrate_schema=False, pool_size=2)
    gate = Reconciler(store, now, "torture", timedelta(seconds=30))
    passes = 0
    going = _Until(stop)
    try:
        while going():
            gate.tick()
            passes += 1
            time.sleep(0.02)
    finally:
        store.close()
    return passes


def node_process(url: str, node_count: int, stop: str) -> NodesRecord:
    """Play every node's daemon until a little after `stop` exists: read the spec, let the host
    converger repartition the GPUs no assignment holds, send the inventory and report the generation
    observed."""
    store = Store.open(url, migrate_schema=False, pool_size=2)
    spec = fleet(node_count)
    fakes = {n.name: FakeNode.for_node(spec, n) for n in spec.nodes}
    record = NodesRecord()
    for fake in fakes.values():
        original = fake.destroy_instance

        def destroying(gpu: str, gi_id: int, _fake: FakeNode = fake, _original: Any = original) -> None:
            g = next(x for x in _fake.list_gpus() if x.uuid == gpu)
            gi = next(i for i in g.instances if i.gi_id == gi_id)
            for m in mig_instances(gi):
                record.destroyed.append((gpu, atom_id_for(gpu, mig_atom_key(m)), time.time()))
            _original(gpu, gi_id)

        fake.destroy_instance = destroying  # type: ignore[method-assign]
        for gpu, atoms in _mig_atoms(fake).items():
            record.sets.setdefault(gpu, []).append(atoms)
    hosts = {name: HostConverger(fake, Log(_Null())) for name, fake in fakes.items()}
    observed: dict[str, int] = {}
    going = _Until(stop)
    try:
        while going():
            time.sleep(NODE_PAUSE)
            for name, fake in fakes.items():
                served = node_spec.read(store, name, now())
                public = NodeSpecPublic.model_validate(_spec_json(served.generation, served.spec.content()))
                by_atom = {a: g for g, atoms in _all_atoms(fake).items() for a in atoms}
                held = {by_atom[a] for x in public.assignments for a in x.atoms if a in by_atom}
                if hosts[name].converge(public, held):
                    for gpu, atoms in _mig_atoms(fake).items():
                        record.sets.setdefault(gpu, []).append(atoms)
                    inventory.ingest(store, [fake.report()], now())
                if observed.get(name) != served.generation and not hosts[name].unconverged(public):
                    with store.begin() as tx:
                        tx.nodes.mark_observed(name, served.generation, now())
                    observed[name] = served.generation
            record.passes += 1
    finally:
        store.close()
    return record


def _all_atoms(fake: FakeNode) -> dict[str, set[str]]:
    found = {g: set(atoms) for g, atoms in _mig_atoms(fake).items()}
    for g in fake.list_gpus():
        found[g.uuid].add(atom_id_for(g.uuid, "gpu"))
    return found


def _spec_json(generation: int, content: dict[str, Any]) -> dict[str, Any]:
    return {**content, "generation": generation}


class _Null:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


@dataclass(frozen=True)
class TenantBooking:
    atom: str
    gpu: str
    cls: str
    start: float
    end: float


def tenant_bookings(store: Store) -> list[TenantBooking]:
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT atom_id, gpu_id, class, starts_at, ends_at FROM bookings"
                " WHERE tenant_id IS NOT NULL AND state = 'live' ORDER BY gpu_id, starts_at"
            )
        )
        return [
            TenantBooking(r[0], r[1], r[2], r[3].timestamp(), r[4].timestamp() if r[4] else float("inf"))
            for r in rows
        ]


def violations(store: Store, record: NodesRecord | None, outcomes: Iterable[str]) -> list[str]:
    """Every breach of the invariants the module names (empty: none)."""
    found: list[str] = []
    bookings = tenant_bookings(store)
    by_gpu: dict[str, list[TenantBooking]] = {}
    for b in bookings:
        by_gpu.setdefault(b.gpu, []).append(b)
    for gpu, mine in by_gpu.items():
        active: list[TenantBooking] = []
        for b in mine:  # sorted by start: a sweep over the bookings live together
            active = [a for a in active if a.end > b.start]
            for a in active:
                if a.atom == b.atom:
                    found.append(f"ledger.overlap: {a} and {b}")
                elif "gpu" in (a.cls, b.cls):
                    found.append(f"parent and child live at once on {gpu}: {a} and {b}")
                elif record is not None and not any(
                    a.atom in s and b.atom in s for s in record.sets.get(gpu, [])
                ):
                    found.append(f"atoms of two layouts live at once on {gpu}: {a} and {b}")
            active.append(b)
    if record is not None:
        by_atom: dict[str, list[TenantBooking]] = {}
        for b in bookings:
            by_atom.setdefault(b.atom, []).append(b)
        found.extend(
            f"instance of {atom} on {gpu} destroyed at {at} while {b} was live"
            for gpu, atom, at in record.destroyed
            for b in by_atom.get(atom, [])
            if b.start <= at < b.end
        )
    unknown = [o for o in outcomes if o != "booked" and not o.startswith(("refused:", "release-refused:"))]
    found.extend(f"a request ended neither booked nor refused: {o}" for o in unknown)
    return found


__all__ = [
    "LAYOUTS",
    "NodesRecord",
    "changer",
    "fleet",
    "node_process",
    "placer",
    "reconciler",
    "tenant_bookings",
    "violations",
]
