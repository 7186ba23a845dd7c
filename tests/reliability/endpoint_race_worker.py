"""Racing processes for the endpoint race: tenants booking MIG instances while endpoints take whole
nodes. Each process has its own store and booking index, as a server process does."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from typing import Any

from better_compute.domain.credentials import Principal
from better_compute.domain.errors import DomainError
from better_compute.service import endpoints, reservations
from better_compute.service.booking_index import BookingIndex
from better_compute.storage.store import Store
from tests.builders import T0

OWNER = Principal(tenant_id="platform", is_admin=False, credential_id="race-owner")


def book(url: str, worker: int, attempts: int) -> Counter[str]:
    """Reserve one MIG instance for an hour, `attempts` times, releasing about half at once."""
    rng = random.Random(worker)
    store = Store.open(url, migrate_schema=False, pool_size=2)
    index = BookingIndex()
    ids = (f"rsv-b{worker}-{n:05d}" for n in itertools.count())
    outcomes: Counter[str] = Counter()
    try:
        for _ in range(attempts):
            raw = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"}
            try:
                view = reservations.create(store, index, OWNER, raw, T0, lambda: next(ids))
            except DomainError as refused:
                outcomes[f"refused:{refused.code}"] += 1
                continue
            outcomes["booked"] += 1
            if rng.random() < 0.5:
                reservations.release(store, OWNER, view.id, T0)
                outcomes["released"] += 1
    finally:
        store.close()
    return outcomes


def create(url: str, worker: int, attempts: int) -> Counter[str]:
    """Create one-instance endpoints, `attempts` times; the outcomes by status or refusal code."""
    store = Store.open(url, migrate_schema=False, pool_size=2)
    outcomes: Counter[str] = Counter()
    try:
        for n in range(attempts):
            raw: dict[str, Any] = {
                "name": f"e-{worker}-{n}",
                "tenantId": "platform",
                "variants": [
                    {
                        "name": "AllTraffic",
                        "poolId": "p1",
                        "instanceCount": 1,
                        "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": ["mig-7g.80gb"]}],
                    }
                ],
            }
            try:
                outcomes[endpoints.create(store, OWNER, raw, T0).status] += 1
            except DomainError as refused:
                outcomes[f"refused:{refused.code}"] += 1
    finally:
        store.close()
    return outcomes
