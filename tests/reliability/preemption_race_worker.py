"""Racing processes for the preemption race: projects placing high-priority work that evicts
preemptible work while preemptible work keeps coming back. Each process has its own store, booking
index and stock, as a server process does."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime

from better_compute.domain.kernel.errors import DomainError
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.ids import RandomIds
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.placement import workloads
from better_compute.service.placement.placement_stock import Stock
from better_compute.storage.store import Store

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="race-admin")
DEVICE_CLASS = "h100-80gb-sxm"


def run(
    url: str, worker: int, project: str, classes: tuple[str, ...], rounds: int, seed: int
) -> Counter[str]:
    """Create workloads of 1 to 4 devices a replica of one of `classes`, scale or delete them at
    random, and now and then place again what waits (as the retrier does); returns outcome counts."""
    rng = random.Random(seed * 1000 + worker)
    store = Store.open(url, migrate_schema=False, pool_size=2)
    wiring = workloads.Wiring(store, BookingIndex(), Stock(), RandomIds())
    mine: list[str] = []
    outcomes: Counter[str] = Counter()
    try:
        for n in range(rounds):
            action = rng.random()
            try:
                if action < 0.55 or not mine:
                    raw = {
                        "tenantId": project,
                        "name": f"w{worker}-{n}",
                        "shape": {"deviceClass": DEVICE_CLASS, "deviceCount": rng.choice([1, 2, 4])},
                        "replicas": rng.randint(1, 3),
                        "priorityClass": rng.choice(classes),
                    }
                    view = workloads.create(wiring, ADMIN, raw, datetime.now(UTC))
                    mine.append(view.id)
                    outcomes["created"] += 1
                    if view.placement is not None and view.placement.evictions:
                        outcomes["preempted"] += 1
                elif action < 0.75:
                    workloads.scale(wiring, ADMIN, rng.choice(mine), rng.randint(0, 4), datetime.now(UTC))
                    outcomes["scaled"] += 1
                elif action < 0.9:
                    workloads.retry(wiring, datetime.now(UTC))
                    outcomes["retried"] += 1
                else:
                    workloads.delete(wiring, ADMIN, mine.pop(rng.randrange(len(mine))), datetime.now(UTC))
                    outcomes["deleted"] += 1
            except DomainError as refused:
                outcomes[f"refused:{refused.code}"] += 1
            while len(mine) > 4:
                try:
                    workloads.delete(wiring, ADMIN, mine.pop(0), datetime.now(UTC))
                    outcomes["deleted"] += 1
                except DomainError as refused:
                    outcomes[f"refused:{refused.code}"] += 1
    finally:
        store.close()
    return outcomes
