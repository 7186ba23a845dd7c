"""The retrier's pass over waiting workloads, against a project writing at the same time. On
PostgreSQL: the project's delete runs on a second connection while the retrier's transaction is open."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.entrypoints.ids import RandomIds
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.placement import workloads
from better_compute.service.placement.placement_stock import Stock
from better_compute.service.tx import Tx
from better_compute.storage.store import Store

pytestmark = pytest.mark.postgres

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="test-admin")
NOW = datetime(2026, 12, 1, 9, tzinfo=UTC)


def fleet() -> dict[str, Any]:
    return {
        "tenants": [{"id": "acme"}],
        "deviceClasses": [
            {
                "name": "h100-80gb-sxm",
                "class": "gpu",
                "selector": {"matchExpressions": [{"key": "gpuModel", "op": "In", "values": ["H100-80GB"]}]},
            }
        ],
        "clusters": [
            {
                "name": "c1",
                "region": "r1",
                "nodes": [{"name": "n1", "gpus": {"model": "H100-80GB", "count": 1}}],
            }
        ],
        "pools": [{"name": "p", "cluster": "c1", "mode": "exclusive", "owner": "acme", "nodes": ["n1"]}],
    }


def test_a_workload_deleted_while_the_retrier_takes_its_lock_is_skipped_not_a_crash(
    pg_store: Store, monkeypatch: Any
) -> None:
    """A regression: the retrier read a waiting workload, its project deleted it before the retrier
    held the project's lock, and the pass stopped on an assertion (every workload after it waited)."""
    store = pg_store
    load_fleet(store, parse_fleet(fleet()), NOW)
    wiring = workloads.Wiring(store, BookingIndex(), Stock(), RandomIds())
    raw = {"tenantId": "acme", "shape": {"deviceClass": "h100-80gb-sxm"}, "replicas": 1}
    workloads.create(wiring, ADMIN, {**raw, "name": "holds"}, NOW)
    gone = workloads.create(wiring, ADMIN, {**raw, "name": "gone"}, NOW)
    assert gone.workload.unplaced == 1
    real = workloads._lock_and_catch_up
    deleted: list[str] = []

    def deleting_first(tx: Tx, w: workloads.Wiring, tenant_id: str, now: datetime) -> None:
        if not deleted:  # the project deletes it from another connection, before the lock
            deleted.append(workloads.delete(wiring, ADMIN, gone.id, NOW).id)
        real(tx, w, tenant_id, now)

    monkeypatch.setattr(workloads, "_lock_and_catch_up", deleting_first)
    assert workloads.retry(wiring, NOW) == 0
    assert deleted == [gone.id]
