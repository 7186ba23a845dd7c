"""Racing processes for the workload race: clients of two projects creating, scaling and deleting
workloads across clusters at once. Each process has its own store, booking index and stock, as a
server process does."""

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


def run(url: str, worker: int, project: str, rounds: int, seed: int) -> Counter[str]:
    """Create workloads of 1 to 8 devices a replica and 1 to 3 replicas, pack or spread, and scale or
    delete them at random (a few kept at a time); returns outcome counts."""
    rng = random.Random(seed * 1000 + worker)
    store = Store.open(url, migrate_schema=False, pool_size=2)
    wiring = workloads.Wiring(store, BookingIndex(), Stock(), RandomIds())
    mine: list[str] = []
    outcomes: Counter[str] = Counter()
    try:
        for n in range(rounds):
            action = rng.random()
            try:
                if action < 0.5 or not mine:
                    raw = {
                        "tenantId": project,
                        "name": f"w{worker}-{n}",
                        "shape": {"deviceClass": DEVICE_CLASS, "deviceCount": rng.choice([1, 2, 4, 8])},
                        "replicas": rng.randint(1, 3),
                        "strategy": rng.choice(["pack", "spread"]),
                    }
                    view = workloads.create(wiring, ADMIN, raw, datetime.now(UTC))
                    mine.append(view.id)
                    outcomes["created"] += 1
                    outcomes["placed" if view.workload.unplaced == 0 else "short"] += 1
                elif action < 0.85:
                    workloads.scale(wiring, ADMIN, rng.choice(mine), rng.randint(0, 4), datetime.now(UTC))
                    outcomes["scaled"] += 1
                else:
                    workloads.delete(wiring, ADMIN, mine.pop(rng.randrange(len(mine))), datetime.now(UTC))
                    outcomes["deleted"] += 1
            except DomainError as refused:
                outcomes[f"refused:{refused.code}"] += 1
                outcomes[f"why:{refused.message[:80]}"] += 1
            while len(mine) > 4:
                workloads.delete(wiring, ADMIN, mine.pop(0), datetime.now(UTC))
                outcomes["deleted"] += 1
    finally:
        store.close()
    return outcomes
