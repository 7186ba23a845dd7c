"""A commit that stays invisible for a long time is still counted (the invisible-commit stall).

On PostgreSQL an event id is handed out before its transaction commits. Here a tenant's reservation
is held up inside its commit (another session keeps the tenant's row locked) while another tenant's
reservations commit with later event ids. However long the stall lasts, once the held reservation
commits the tenant's next reservation must see it: the quota (one MIG instance) refuses the second.
Before, an event id unseen for 30 s was taken as rolled back, and the stalled booking was never
counted: the tenant ended up holding more than its quota.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from better_compute.domain.kernel.errors import DomainError
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.ledger import booking_index, reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.storage.store import Store
from tests.builders import T0, small_fleet
from tests.reliability.interleave import libpq_url, until_blocked

ACME = Principal(tenant_id="acme", is_admin=False, credential_id="stall-acme")
BETA = Principal(tenant_id="beta", is_admin=False, credential_id="stall-beta")


def _request(mig_uuid: str | None = None, op: str = "In") -> dict[str, Any]:
    device: dict[str, Any] = {"class": "gpu.mig", "count": 1}
    if mig_uuid is not None:
        device["selector"] = {"matchExpressions": [{"key": "migUuid", "op": op, "values": [mig_uuid]}]}
    return {"poolId": "p1", "devices": [device], "duration": "1h"}


@pytest.mark.postgres
def test_invisible_commit_stall_still_counts_against_quota(
    pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where an older release forgot unseen event ids after a patience, make it forget at once: the
    # outcome must not depend on how long the stall lasts.
    monkeypatch.setattr(booking_index, "GAP_PATIENCE", 0.0, raising=False)
    store = pg_store
    fleet = small_fleet(nodes=1, layout="all-1g.10gb")
    fleet["tenants"] = [{"id": "platform"}, {"id": "acme"}, {"id": "beta"}]
    load_fleet(store, parse_fleet(fleet), T0)
    with store.engine.begin() as conn:
        for tenant, limit in (("acme", 1), ("beta", 10)):
            conn.execute(
                text("INSERT INTO quotas VALUES (:t, 'p1', 'gpu.mig', :n, :at)"),
                {"t": tenant, "n": limit, "at": T0},
            )
        atoms = conn.execute(text("SELECT attributes FROM atoms WHERE class = 'gpu.mig' ORDER BY id")).all()
    # The stalled reservation takes one atom and the next one any other, so that only the quota, not
    # a clash on the same atom, can tell that the index missed the first.
    last_atom = atoms[-1][0]
    last_uuid = (last_atom if isinstance(last_atom, dict) else json.loads(last_atom))["migUuid"]
    index = BookingIndex()
    ids = iter(f"rsv-{n:04d}" for n in range(100))
    reservations.create(store, index, BETA, _request(), T0, lambda: next(ids))  # the index is loaded

    outcome: dict[str, object] = {}

    def first_acme() -> None:
        try:
            outcome["view"] = reservations.create(
                store, index, ACME, _request(last_uuid), T0, lambda: next(ids)
            )
        except BaseException as exc:  # reported below
            outcome["error"] = exc

    with psycopg.connect(libpq_url(store)) as stall:
        # Another session holds acme's row: acme's commit waits on it after its events have ids.
        stall.execute("SELECT id FROM tenants WHERE id = 'acme' FOR UPDATE")
        held_up = threading.Thread(target=first_acme)
        held_up.start()
        until_blocked(store, held_up)
        assert held_up.is_alive(), outcome
        # Meanwhile other commits pass it in the event log, and the index reads past its ids.
        for _ in range(3):
            reservations.create(store, index, BETA, _request(), T0, lambda: next(ids))
        stall.rollback()
    held_up.join(30)
    assert "view" in outcome, outcome

    with pytest.raises(DomainError) as refused:
        reservations.create(store, index, ACME, _request(last_uuid, "NotIn"), T0, lambda: next(ids))
    assert refused.value.code == "QUOTA_EXCEEDED"
    with store.engine.connect() as conn:
        held = conn.execute(
            text("SELECT count(*) FROM bookings WHERE tenant_id = 'acme' AND state = 'live'")
        ).scalar_one()
    assert held == 1
