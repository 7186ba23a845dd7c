"""The index is never seen empty (issue: after two lost races a thread reset the index, and another
thread that had just caught up counted what its tenant held on the emptied index: the quota check
passed although the tenant held its whole quota).

Interleaving (one process, two admission threads A and B sharing one BookingIndex):
  A: prepare -> admission snapshot (tenant lock held) -> index.apply(read)   [index caught up]
  B: create() lost two races for an atom -> rebuilds the index from the ledger
  A: index.busy(window) -> held -> quota
Now B rebuilds under the index's lock, so A counts on a full index and is refused.
"""

from __future__ import annotations

import json
import threading

import pytest
from sqlalchemy import text

from better_compute.domain.kernel.errors import DomainError
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.storage.store import Store
from tests.builders import T0, small_fleet

ACME = Principal(tenant_id="acme", is_admin=False, credential_id="r-acme")


def _req(uuid: str, op: str) -> dict:
    sel = {"matchExpressions": [{"key": "migUuid", "op": op, "values": [uuid]}]}
    return {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1, "selector": sel}], "duration": "1h"}


@pytest.mark.postgres
def test_reset_between_apply_and_busy_lets_tenant_exceed_quota(pg_store: Store) -> None:
    store = pg_store
    fleet = small_fleet(nodes=1, layout="all-1g.10gb")
    load_fleet(store, parse_fleet(fleet), T0)
    with store.engine.begin() as conn:
        conn.execute(text("INSERT INTO quotas VALUES ('acme', 'p1', 'gpu.mig', 1, :at)"), {"at": T0})
        attrs = conn.execute(text("SELECT attributes FROM atoms WHERE class = 'gpu.mig' ORDER BY id")).all()
    last = attrs[-1][0]
    last_uuid = (last if isinstance(last, dict) else json.loads(last))["migUuid"]
    index = BookingIndex()
    ids = iter(f"rsv-{n:04d}" for n in range(100))
    reservations.create(
        store, index, ACME, _req(last_uuid, "In"), T0, lambda: next(ids)
    )  # acme now holds its quota

    applied, reset_done = threading.Event(), threading.Event()
    real_apply = index.apply

    def apply_then_let_b_reset(*a, **kw):  # type: ignore[no-untyped-def]
        real_apply(*a, **kw)
        applied.set()
        assert reset_done.wait(10)

    def thread_b() -> None:  # what create() does on its second Overlap: rebuild the index
        assert applied.wait(10)
        with store.read() as tx:
            index.reload(tx)
        reset_done.set()

    b = threading.Thread(target=thread_b)
    b.start()
    index.apply = apply_then_let_b_reset  # type: ignore[method-assign]
    outcome: object
    try:
        outcome = reservations.create(store, index, ACME, _req(last_uuid, "NotIn"), T0, lambda: next(ids)).id
    except DomainError as refused:
        outcome = refused.code
    finally:
        index.apply = real_apply  # type: ignore[method-assign]
        b.join(10)
    with store.engine.connect() as conn:
        held = conn.execute(
            text("SELECT count(*) FROM bookings WHERE tenant_id = 'acme' AND state = 'live'")
        ).scalar_one()
    assert outcome == "QUOTA_EXCEEDED" and held == 1, (outcome, held)
