"""Racing processes for the pool-change race: tenants booking and cancelling slots, an admin changing
the pool under them. Each process has its own store and booking index, as a server process does."""

from __future__ import annotations

import itertools
import os
import random
import time
from collections import Counter
from datetime import timedelta
from typing import Any

from better_compute.domain.kernel.errors import DomainError
from better_compute.domain.tenancy.credentials import Principal
from better_compute.service.fleet import pools
from better_compute.service.gate.mig_gate import Reconciler
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.storage.store import Store
from tests.builders import T0

OWNER = Principal(tenant_id="platform", is_admin=False, credential_id="race-tenant")
ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="race-admin")


def _selector(rng: random.Random) -> dict[str, Any]:
    """Half the requests ask for the slots a shrink to two replicas removes, so the two collide."""
    if rng.random() < 0.5:
        return {"matchExpressions": [{"key": "slot", "op": "Gt", "values": ["1"]}]}
    return {}


def book(url: str, worker: int, attempts: int, seed: int) -> Counter[str]:
    """Book slots an hour ahead and cancel them again soon (one held at a time); returns outcome counts."""
    rng = random.Random(seed * 1000 + worker)
    store = Store.open(url, migrate_schema=False, pool_size=2)
    index = BookingIndex()
    ids = (f"rsv-w{worker}-{n:05d}" for n in itertools.count())
    outcomes: Counter[str] = Counter()
    held: list[str] = []
    try:
        for _ in range(attempts):
            start = T0 + timedelta(hours=1)
            raw: dict[str, Any] = {
                "poolId": "p1",
                "devices": [
                    {"class": "gpu.slot", "count": rng.choice([1, 1, 2]), "selector": _selector(rng)}
                ],
                "start": start.isoformat(),
                "duration": "1h",
            }
            try:
                view = reservations.create(store, index, OWNER, raw, T0, lambda: next(ids))
                held.append(view.id)
                outcomes["booked"] += 1
            except DomainError as refused:
                outcomes[f"refused:{refused.code}"] += 1
            while len(held) > 1 or (held and rng.random() < 0.5):
                # At most one held at a time, so that the shrinks are not all refused.
                reservations.cancel(store, OWNER, held.pop(0), T0)
                outcomes["cancelled"] += 1
        for rid in held:  # the pool ends with no slot booked, so a last change goes all the way
            reservations.cancel(store, OWNER, rid, T0)
            outcomes["cancelled"] += 1
    finally:
        store.close()
    return outcomes


def change(url: str, kind: str, changes: int) -> Counter[str]:
    """Flip the pool between two shapes `changes` times: `replicas` 4 <-> 2, or a node out and back."""
    store = Store.open(url, migrate_schema=False, pool_size=2)
    outcomes: Counter[str] = Counter()
    try:
        for n in range(changes):
            shrink = n % 2 == 0
            try:
                if kind == "replicas":
                    pools.update(store, ADMIN, "p1", policy={"replicas": 2 if shrink else 4}, now=T0)
                    time.sleep(0.02)  # the reconciler's turn: each count has a chance to be granted
                else:
                    nodes = ["n-1"] if shrink else ["n-1", "n-2"]
                    pools.update(store, ADMIN, "p1", nodes=nodes, now=T0)
                outcomes["shrunk" if shrink else "grown"] += 1
            except DomainError as refused:
                outcomes[f"refused:{refused.code}"] += 1
    finally:
        store.close()
    return outcomes


def reconcile(url: str, stop: str) -> int:
    """Drive the layout gate at T0 (every process's clock) until the file `stop` exists, then until
    no node is gated, three hours later (the bookers' slots, booked an hour ahead for an hour, are
    all cancelled by then: a node scheduled for the end of one it had gets there, and the caller's
    last change goes all the way); returns the passes made. A node whose slots are all free when it
    is scheduled is granted the new count at once, its slots re-derived while the bookers race it."""
    store = Store.open(url, migrate_schema=False, pool_size=2)
    passes = 0
    try:
        gate = Reconciler(store, lambda: T0, "race", timedelta(seconds=30))
        while not os.path.exists(stop):
            gate.tick()
            passes += 1
            time.sleep(0.005)
        later = Reconciler(store, lambda: T0 + timedelta(hours=3), "race", timedelta(seconds=30))
        for _ in range(100):
            later.tick()
            passes += 1
            with store.read() as tx:
                if not tx.mig_layouts.all_rows():
                    break
    finally:
        store.close()
    return passes
