"""The composition root: the app gets its clock and its ids from what the root was given."""

from __future__ import annotations

from datetime import timedelta

import pytest

from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from tests.builders import T0, CountingIds, admin_token, api_client, bearer, fleet_spec, tenant_token


@pytest.fixture
def fleet(store: Store) -> Store:
    load_fleet(store, fleet_spec(nodes=1, layout="all-1g.10gb"), T0)
    return store


def test_new_credentials_policies_and_reservations_are_named_by_the_injected_ids(fleet: Store) -> None:
    http = api_client(fleet, ids=CountingIds())
    admin, acme = bearer(admin_token(fleet)), bearer(tenant_token(fleet, "acme"))
    offer = {"poolId": "p1", "tenantId": "acme", "quota": {"gpu.mig": 4}}
    assert http.post("/v1/pools/p1/offers", headers=admin, json=offer).status_code in (200, 201)

    credential = http.post("/v1/credentials", headers=admin, json={"tenantId": "acme", "name": "ci"})
    policy = http.post(
        "/v1/policies", headers=admin, json={"name": "small", "tenantId": "acme", "limits": {"gpuSlices": 2}}
    )
    reserve = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"}
    first = http.post("/v1/reservations", headers=acme, json=reserve)
    second = http.post("/v1/reservations", headers=acme, json=reserve)

    assert credential.status_code == 201 and credential.json()["id"] == "cred-000001"
    assert policy.status_code == 201 and policy.json()["id"] == "pol-000001"
    assert [first.json()["id"], second.json()["id"]] == ["rsv-000001", "rsv-000002"]
    listed = http.get("/v1/reservations", headers=acme).json()["items"]
    assert [r["id"] for r in listed] == ["rsv-000002", "rsv-000001"]  # newest first


def test_the_app_tells_time_by_the_injected_clock(fleet: Store) -> None:
    later = T0 + timedelta(days=3)
    http = api_client(fleet, now=later)
    admin = bearer(admin_token(fleet))
    made = http.post("/v1/tenants", headers=admin, json={"id": "globex", "name": "Globex"})
    assert made.status_code == 201
    assert made.json()["createdAt"].startswith("2026-12-04T09:00:00")
