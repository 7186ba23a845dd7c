"""Racing processes for the tenant-delete race: an admin booking for a tenant an hour ahead and
cancelling again, and an admin deleting that tenant. Each process has its own store and booking
index, as a server process does."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from datetime import timedelta
from typing import Any

from sqlalchemy import text

from better_compute.domain.kernel.errors import DomainError
from better_compute.domain.tenancy.credentials import Principal
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.tenancy import tenants
from better_compute.storage.store import Store
from tests.builders import T0

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="race-admin")


def book(url: str, worker: int, attempts: int, linger: int = 20_000) -> Counter[str]:
    """Book one GPU for acme an hour ahead and cancel it at once, `attempts` times at full speed,
    then on, with a pause between tries, until a booking is refused because acme is gone (at most
    `linger` more tries). The pauses leave the deleter moments when no booking is held, so how the
    processes happen to be scheduled cannot decide whether the race is seen from both sides."""
    store = Store.open(url, migrate_schema=False, pool_size=2)
    index = BookingIndex()
    ids = (f"rsv-w{worker}-{n:05d}" for n in itertools.count())
    outcomes: Counter[str] = Counter()
    raw: dict[str, Any] = {
        "tenantId": "acme",
        "poolId": "p1",
        "devices": [{"class": "gpu", "count": 1}],
        "start": (T0 + timedelta(hours=1)).isoformat(),
        "duration": "1h",
    }
    try:
        for tried in range(attempts + linger):
            if tried >= attempts:
                if outcomes["refused:NOT_FOUND"]:
                    break
                time.sleep(0.005)
            try:
                view = reservations.create(store, index, ADMIN, raw, T0, lambda: next(ids))
            except DomainError as refused:
                outcomes[f"refused:{refused.code}"] += 1
                continue
            outcomes["booked"] += 1
            reservations.cancel(store, ADMIN, view.id, T0)
    finally:
        store.close()
    return outcomes


def _made(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(
            conn.execute(text("SELECT count(*) FROM reservations WHERE tenant_id = 'acme'")).scalar_one()
        )


def delete(url: str, attempts: int, after: int) -> Counter[str]:
    """Once `after` reservations of acme were made, try to delete acme until it is deleted, at most
    `attempts` times (the wait only lines the race up: the bookers are under way when it starts)."""
    store = Store.open(url, migrate_schema=False, pool_size=2)
    outcomes: Counter[str] = Counter()
    try:
        while _made(store) < after:
            time.sleep(0.01)
        for _ in range(attempts):
            try:
                tenants.delete(store, ADMIN, "acme", T0)
            except DomainError as refused:
                outcomes[f"refused:{refused.code}"] += 1
                continue
            outcomes["deleted"] += 1
            break
    finally:
        store.close()
    return outcomes
