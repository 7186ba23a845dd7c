"""Deleting a tenant and giving it something exclude each other on PostgreSQL: no reservation or live
credential is ever left to a deleted tenant.

The interleavings are made on purpose: the delete has locked and marked the tenant but not committed
when a reservation or a credential for it is made, or a credential is being made when the delete
starts. SQLite serialises writers, so these cannot happen there.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from better_compute.domain.kernel.errors import DomainError
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import pools
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.tenancy import credentials, tenants
from better_compute.storage.store import Store
from tests.builders import T0, small_fleet
from tests.processes import race_context
from tests.reliability import tenant_race_worker
from tests.reliability.interleave import until_blocked

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="race-admin")

BOOKERS = 3

pytestmark = pytest.mark.postgres


def _fleet(store: Store) -> None:
    load_fleet(store, parse_fleet(small_fleet(nodes=2, mode="exclusive")), T0)
    pools.offer(store, ADMIN, "p1", "acme", {"gpu": 4}, T0)  # one GPU for each booker, and to spare


def _while_deleting(store: Store, racer_body: Callable[[], Any]) -> dict[str, Any]:
    """Run `racer_body` in a thread while `tenants.delete_in` for acme is done but not committed."""
    outcome: dict[str, Any] = {}

    def race() -> None:
        try:
            outcome["made"] = racer_body()
        except DomainError as refused:
            outcome["refused"] = refused

    deleting = store.begin()
    tx = deleting.__enter__()
    racer = threading.Thread(target=race)
    try:
        tenants.delete_in(tx, "acme", T0)
        racer.start()
        until_blocked(store, racer)  # the racer either finished or waits on the delete's lock
    except BaseException:
        deleting.__exit__(*sys.exc_info())
        raise
    deleting.__exit__(None, None, None)
    racer.join(30)
    assert not racer.is_alive()
    return outcome


def test_a_reservation_made_while_its_tenant_is_deleted_is_refused(pg_store: Store) -> None:
    _fleet(pg_store)
    raw = {"tenantId": "acme", "poolId": "p1", "devices": [{"class": "gpu", "count": 1}], "duration": "1h"}
    outcome = _while_deleting(
        pg_store, lambda: reservations.create(pg_store, BookingIndex(), ADMIN, raw, T0, lambda: "rsv-race")
    )
    refused = outcome.get("refused")
    assert isinstance(refused, DomainError) and refused.code == "NOT_FOUND", outcome
    assert str(refused) == "tenant acme not found"
    with pg_store.engine.connect() as conn:
        assert (
            conn.execute(text("SELECT count(*) FROM reservations WHERE tenant_id = 'acme'")).scalar_one() == 0
        )


def test_racing_processes_never_leave_a_reservation_to_a_deleted_tenant(pg_store: Store) -> None:
    """Bookers book for acme and cancel again while another process deletes acme: the delete is
    refused while one is held, and once it succeeds nothing of acme's is live and every later booking
    is refused. No lock is ever taken out of order (a deadlock would end a worker with an error)."""
    _fleet(pg_store)
    url = pg_store.engine.url.render_as_string(hide_password=False)
    ctx = race_context()
    with ctx.Pool(BOOKERS + 1) as workers:
        deleter = workers.apply_async(tenant_race_worker.delete, (url, 10_000, 30))
        bookers = [workers.apply_async(tenant_race_worker.book, (url, w, 150)) for w in range(BOOKERS)]
        booked: Counter[str] = sum((b.get(timeout=240) for b in bookers), Counter())
        deleted = deleter.get(timeout=240)
    assert deleted["deleted"] == 1, deleted
    assert booked["booked"] > 0 and booked["refused:NOT_FOUND"] > 0, booked
    assert set(booked) <= {"booked", "refused:NOT_FOUND"}, booked
    assert set(deleted) <= {"deleted", "refused:INVALID_STATE"}, deleted
    with pg_store.engine.connect() as conn:
        live = conn.execute(
            text(
                "SELECT count(*) FROM reservations WHERE tenant_id = 'acme' AND status IN ('scheduled', 'active')"
            )
        ).scalar_one()
    assert live == 0


def test_a_credential_made_while_its_tenant_is_deleted_is_refused(pg_store: Store) -> None:
    _fleet(pg_store)
    outcome = _while_deleting(
        pg_store, lambda: credentials.create(pg_store, ADMIN, "acme", "late", T0, new_id=lambda: "crd-race")
    )
    refused = outcome.get("refused")
    assert isinstance(refused, DomainError) and refused.code == "NOT_FOUND", outcome
    with pg_store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM credentials WHERE id = 'crd-race'")).scalar_one() == 0


def test_a_delete_waits_for_a_credential_being_made_and_revokes_it(pg_store: Store) -> None:
    _fleet(pg_store)
    outcome: dict[str, Any] = {}

    def delete() -> None:
        outcome["deleted"] = tenants.delete(pg_store, ADMIN, "acme", T0)

    issuing = pg_store.begin()
    tx = issuing.__enter__()
    racer = threading.Thread(target=delete)
    try:
        assert tx.tenants.hold("acme") is not None
        credentials._issue(tx, "acme", "early", T0, "crd-early")
        racer.start()
        until_blocked(pg_store, racer)
    except BaseException:
        issuing.__exit__(*sys.exc_info())
        raise
    issuing.__exit__(None, None, None)
    racer.join(30)
    assert not racer.is_alive() and "deleted" in outcome
    with pg_store.engine.connect() as conn:
        revoked = conn.execute(text("SELECT revoked_at FROM credentials WHERE id = 'crd-early'")).scalar_one()
    assert revoked is not None
