"""Racing processes for the endpoint race: tenants booking MIG instances while endpoints take whole
nodes. Each process has its own store and booking index, as a server process does."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from better_compute.domain.kernel.errors import DomainError
from better_compute.domain.tenancy.credentials import Principal
from better_compute.service.endpoints import endpoints
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.storage.store import Store
from tests.builders import T0

OWNER = Principal(tenant_id="platform", is_admin=False, credential_id="race-owner")


def book(url: str, worker: int, attempts: int) -> Counter[str]:
    """Reserve one MIG instance for an hour, `attempts` times, holding one booking at a time: each
    new booking is made after the last is released, so a booker keeps at most one node busy and the
    race's outcome cannot hinge on which process starts first."""
    store = Store.open(url, migrate_schema=False, pool_size=2)
    index = BookingIndex()
    ids = (f"rsv-b{worker}-{n:05d}" for n in itertools.count())
    outcomes: Counter[str] = Counter()
    held: str | None = None
    try:
        for _ in range(attempts):
            if held is not None:
                reservations.release(store, OWNER, held, T0)
                outcomes["released"] += 1
                held = None
            raw = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"}
            try:
                held = reservations.create(store, index, OWNER, raw, T0, lambda: next(ids)).id
            except DomainError as refused:
                outcomes[f"refused:{refused.code}"] += 1
                continue
            outcomes["booked"] += 1
    finally:
        store.close()
    return outcomes


def create(url: str, worker: int, attempts: int) -> Counter[str]:
    """Create a one-instance endpoint, trying up to `attempts` times until one is taken; the outcomes
    by status or refusal code. One endpoint per creator leaves nodes for the bookers whatever the
    order in which the processes start."""
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
                status = endpoints.create(store, OWNER, raw, T0).status
            except DomainError as refused:
                outcomes[f"refused:{refused.code}"] += 1
                continue
            outcomes[status] += 1
            if status == "Creating":
                break
    finally:
        store.close()
    return outcomes


def retry(url: str, passes: int) -> int:
    """Take the `Failed` endpoints again, `passes` times, as each server's placement retrier does;
    how many this process took."""
    store = Store.open(url, migrate_schema=False, pool_size=2)
    took = 0
    try:
        for _ in range(passes):
            took += endpoints.retry(store, T0)
    finally:
        store.close()
    return took
