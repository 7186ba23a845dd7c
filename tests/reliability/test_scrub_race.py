"""A rebook by another tenant racing a release never ends with that tenant on an unscrubbed atom.

In a pool that scrubs between tenants, an atom one tenant released is owed a scrub (domain.ledger.scrub).
Admission looks that up in its own transaction, and its booking statement re-checks it under the
atoms' locks: a release that commits while the booking waits for those locks marks the atom's row,
which the booking then re-reads. The exact interleaving is forced on PostgreSQL (SQLite serialises
writers, so it cannot happen there), and a soak of two tenants booking and releasing each other's
atoms, each with its own booking index as separate servers have, is checked by SQL on the ledger.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections import Counter
from datetime import datetime, timedelta

import pytest
from sqlalchemy import text

from better_compute.domain.kernel.errors import DomainError
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import pools as pools_service
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.tenancy import quotas
from better_compute.storage.store import Store
from tests.builders import T0, fleet_spec
from tests.reliability.interleave import until_blocked

pytestmark = pytest.mark.postgres

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="scrub-admin")
PLATFORM = Principal(tenant_id="platform", is_admin=False, credential_id="scrub-platform")
ACME = Principal(tenant_id="acme", is_admin=False, credential_id="scrub-acme")

CROSS_TENANT_SQL = (
    "SELECT count(*) FROM bookings later JOIN bookings earlier ON earlier.atom_id = later.atom_id"
    " JOIN atoms a ON a.id = later.atom_id"
    " WHERE later.state = 'live' AND earlier.state = 'live'"
    " AND later.tenant_id IS NOT NULL AND earlier.tenant_id IS NOT NULL"
    " AND later.tenant_id <> earlier.tenant_id"
    " AND earlier.ends_at IS NOT NULL AND earlier.ends_at <= later.starts_at"
    " AND (a.scrubbed_at IS NULL OR a.scrubbed_at < earlier.ends_at)"
)
"""Bookings of an atom that start after another tenant's booking of it ended, with no scrub
reported in between: a tenant handed another's data."""


def scrubbing_pool(store: Store) -> None:
    load_fleet(store, fleet_spec(nodes=2, mode="exclusive"), T0)
    pools_service.update(store, ADMIN, "p1", policy={"scrub": "reset"}, now=T0)
    quotas.set_quota(store, ADMIN, "acme", "p1", "gpu", 64, T0)


def request(count: int, start: datetime | None = None, duration: str = "1h") -> dict[str, object]:
    body: dict[str, object] = {
        "poolId": "p1",
        "devices": [{"class": "gpu", "count": count}],
        "duration": duration,
    }
    if start is not None:
        body["start"] = start.isoformat()
    return body


def test_a_rebook_waiting_on_the_release_is_refused_the_atom_it_released(pg_store: Store) -> None:
    """The release has marked the atom and ended its booking but not committed when another
    tenant's booking of the atom, right after the release's end, reaches the atom's lock."""
    store = pg_store
    scrubbing_pool(store)
    ids = (f"rsv-{n:04d}" for n in itertools.count())
    held = reservations.create(store, BookingIndex(), PLATFORM, request(1), T0, lambda: next(ids))
    (atom,) = [a.id for a in held.atoms]
    # The other three GPUs are booked for all the time that matters: only `atom` could be chosen.
    reservations.create(store, BookingIndex(), PLATFORM, request(3, duration="4h"), T0, lambda: next(ids))
    released_at = T0 + timedelta(minutes=10)
    index = BookingIndex()  # acme's server: it has not seen the release
    with store.read() as tx:
        index.sync(tx)
    outcome: dict[str, object] = {}

    def rebook() -> None:
        try:
            # From the hour's end on, so the atom looks free to acme's index whatever it has seen.
            raw = request(1, start=T0 + timedelta(hours=1))
            outcome["view"] = reservations.create(store, index, ACME, raw, released_at, lambda: next(ids))
        except DomainError as refused:
            outcome["refused"] = refused

    racer = threading.Thread(target=rebook)
    release = store.begin()
    tx = release.__enter__()
    try:
        tx.ledger.end_allocation(held.id, released_at, _released(held.id, released_at))
        racer.start()
        until_blocked(store, racer)  # the booking either finished or waits on the release's lock
    except BaseException:
        release.__exit__(*sys.exc_info())
        raise
    release.__exit__(None, None, None)
    racer.join(30)
    assert not racer.is_alive()

    refused = outcome.get("refused")
    assert isinstance(refused, DomainError) and refused.code == "INSUFFICIENT_CAPACITY", outcome
    with store.engine.connect() as conn:
        acme_on_atom = conn.execute(
            text(
                "SELECT count(*) FROM bookings WHERE atom_id = :a AND tenant_id = 'acme' AND state = 'live'"
            ),
            {"a": atom},
        ).scalar_one()
    assert acme_on_atom == 0


def _released(allocation_id: str, at: datetime) -> object:
    from better_compute.domain.ledger.events import LedgerReleased

    return LedgerReleased(allocation_id, at)


ROUNDS = 40


def test_two_tenants_booking_and_releasing_never_get_each_others_unscrubbed_atoms(pg_store: Store) -> None:
    store = pg_store
    scrubbing_pool(store)
    clock_lock = threading.Lock()
    ticks = itertools.count(1)

    def now() -> datetime:
        with clock_lock:
            return T0 + timedelta(milliseconds=next(ticks))

    def tenant(principal: Principal, outcomes: Counter[str]) -> None:
        index = BookingIndex()  # one per tenant: as two servers
        ids = (f"rsv-{principal.tenant_id}-{n:04d}" for n in itertools.count())
        for _ in range(ROUNDS):
            try:
                view = reservations.create(store, index, principal, request(2), now(), lambda: next(ids))
            except DomainError as refused:
                outcomes[f"refused:{refused.code}"] += 1
                continue
            outcomes["booked"] += 1
            reservations.release(store, principal, view.id, now())
            outcomes["released"] += 1

    counts = {"platform": Counter[str](), "acme": Counter[str]()}
    threads = [
        threading.Thread(target=tenant, args=(PLATFORM, counts["platform"])),
        threading.Thread(target=tenant, args=(ACME, counts["acme"])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
        assert not t.is_alive()

    with store.engine.connect() as conn:
        crossed = conn.execute(text(CROSS_TENANT_SQL)).scalar_one()
    # Both tenants booked and released; neither ever landed on an atom the other had left.
    assert counts["platform"]["booked"] > 0 and counts["acme"]["booked"] > 0
    assert crossed == 0, counts
