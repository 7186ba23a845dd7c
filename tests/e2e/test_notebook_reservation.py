"""The notebook reservation of docs/concepts.md#reservations, end to end with the typed client and
the CLI against a real server.

ACME asks for one 3g.40gb MIG instance for four hours in the demo's mig pool, with idempotency key
`notebook-ana-0924`. Before the pool is offered to it, ACME cannot see it (NOT_FOUND); offered whole
GPUs only, the request is QUOTA_EXCEEDED, since MIG instances need a `gpu.mig` row; after a `gpu.mig`
offer it books, and a retry with the same key returns the same reservation.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest

from better_compute.client import (
    Compute,
    ConflictError,
    InvalidStateError,
    NotFoundError,
    QuotaExceededError,
)
from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e

POOL = "h100-mig"
KEY = "notebook-ana-0924"
NOTEBOOK: list[dict[str, Any]] = [
    {
        "class": "gpu.mig",
        "count": 1,
        "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]},
    }
]


def test_notebook_reservation(server: Server) -> None:
    with Compute(server.url, server.admin_token) as admin:
        with contextlib.suppress(ConflictError):  # examples/demo-fleet.yaml may register acme already
            admin.tenants.create(id="acme", name="ACME")
        assert "acme" in {t.id for t in admin.tenants.list().items}
        token = admin.credentials.create(tenant_id="acme", name="ana").token

        with Compute(server.url, token) as acme:
            # A pool acme has no quota rows in is one it cannot see, answered like a missing pool.
            with pytest.raises(NotFoundError) as unseen:
                acme.reservations.create(pool_id=POOL, devices=NOTEBOOK, duration="4h", idempotency_key=KEY)
            assert unseen.value.status_code == 404
            # Offered whole GPUs only, it sees the pool; a MIG instance needs a gpu.mig row.
            admin.pools.offer(POOL, tenant_id="acme", quota={"gpu": 1})
            with pytest.raises(QuotaExceededError) as refused:
                acme.reservations.create(pool_id=POOL, devices=NOTEBOOK, duration="4h", idempotency_key=KEY)
            assert refused.value.status_code == 409
            assert refused.value.details["class"] == "gpu.mig"

            offered = admin.pools.offer(POOL, tenant_id="acme", quota={"gpu.mig": 2})
            assert {(q.cls, q.limit) for q in offered.quotas} == {("gpu", 1), ("gpu.mig", 2)}

            first = acme.reservations.create(
                pool_id=POOL, devices=NOTEBOOK, duration="4h", idempotency_key=KEY
            )
            assert first.tenant_id == "acme"
            assert first.pool_id == POOL
            assert first.status == "active"
            assert (first.end - first.start).total_seconds() == 4 * 3600
            assert (first.gpu_count, first.gpu_slices) == (0, 1)
            [atom] = first.atoms
            assert atom.cls == "gpu.mig"
            assert atom.attributes["migProfile"] == "3g.40gb"

            again = acme.reservations.create(
                pool_id=POOL, devices=NOTEBOOK, duration="4h", idempotency_key=KEY
            )
            assert again.id == first.id
            assert [a.id for a in again.atoms] == [atom.id]

            with pytest.raises(InvalidStateError, match="different request"):
                acme.reservations.create(pool_id=POOL, devices=NOTEBOOK, duration="2h", idempotency_key=KEY)

    shown = server.cli("api", "reservations.get", "--json", json.dumps({"id": first.id}), token=token)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["id"] == first.id

    missing = server.cli("api", "reservations.get", "--json", '{"id": "rsv-does-not-exist"}', token=token)
    assert missing.returncode == 1
    assert missing.stdout == ""
    error = json.loads(missing.stderr)["error"]
    assert error["code"] == "NOT_FOUND"
    assert set(error) >= {"code", "message", "details"}
