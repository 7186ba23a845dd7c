"""Device-class quota rows through the real app, on SQLite and PostgreSQL: the admin sets them in the
same quotas resource as pool rows, `quotas.list` shows both kinds with what the tenant holds, each
refusal names its field, and deleting the tenant removes them."""

from __future__ import annotations

import warnings
from datetime import datetime
from typing import Any

import pytest

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from tests.builders import T0, admin_token, bearer, real_app, stored_events, tenant_token

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

FLEET: dict[str, Any] = {
    "tenants": [{"id": "platform"}, {"id": "acme"}],
    "deviceClasses": [
        {
            "name": "h100-80gb",
            "class": "gpu",
            "selector": {"matchExpressions": [{"key": "gpuModel", "op": "In", "values": ["H100-80GB"]}]},
        }
    ],
    "clusters": [
        {
            "name": name,
            "region": "r1",
            "nodes": [{"name": f"{name}-n", "gpus": {"model": "H100-80GB", "count": 4}}],
        }
        for name in ("iad-1", "fra-1")
    ],
    "pools": [
        {
            "name": f"p-{name}",
            "cluster": name,
            "mode": "exclusive",
            "owner": "platform",
            "nodes": [f"{name}-n"],
        }
        for name in ("iad-1", "fra-1")
    ],
}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class World:
    def __init__(self, store: Store) -> None:
        load_fleet(store, parse_fleet(FLEET), T0)
        self.store = store
        self.clock = Clock()
        self.http = TestClient(real_app(store, clock=self.clock))
        self.admin = bearer(admin_token(store))
        self.acme = bearer(tenant_token(store, "acme"))

    def put(self, body: dict[str, Any], who: dict[str, str] | None = None) -> Any:
        return self.http.put("/v1/quotas", json=body, headers=who or self.admin)

    def rows(self, **params: Any) -> list[dict[str, Any]]:
        answer = self.http.get("/v1/quotas", params=params, headers=self.admin)
        assert answer.status_code == 200, answer.text
        items: list[dict[str, Any]] = answer.json()["items"]
        return items


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


def error(r: Any) -> dict[str, Any]:
    return dict(r.json()["error"])


CLUSTER_ROW = {
    "tenantId": "acme",
    "deviceClass": "h100-80gb",
    "scope": "cluster",
    "clusterId": "iad-1",
    "guaranteedDevices": 16,
}


def test_a_cluster_row_is_set_in_camel_case_and_answered_with_its_defaults(world: World) -> None:
    made = world.put({**CLUSTER_ROW, "floorDevices": 4})
    assert made.status_code == 200, made.text
    assert made.json() == {
        "tenantId": "acme",
        "scope": "cluster",
        "deviceClass": "h100-80gb",
        "clusterId": "iad-1",
        "guaranteedDevices": 16,
        "floorDevices": 4,
        "overQuotaWeight": 1.0,
    }
    [event] = stored_events(world.store, "quota.set")
    assert event["subject"] == "h100-80gb"
    assert event["payload"] == {
        "tenantId": "acme",
        "quota": {"h100-80gb": 16},
        "deviceClass": "h100-80gb",
        "scope": "cluster",
        "clusterId": "iad-1",
        "guaranteedDevices": 16,
        "floorDevices": 4,
        "overQuotaWeight": 1.0,
    }


def test_a_fleet_row_takes_the_seed_s_snake_case_and_setting_it_again_replaces_it(world: World) -> None:
    seed = {
        "project": "acme",
        "device_class": "h100-80gb",
        "scope": "fleet",
        "guaranteed_devices": 32,
        "floor_devices": 8,
        "over_quota_weight": 2.5,
    }
    first = world.put(seed)
    assert first.status_code == 200, first.text
    assert first.json() == {
        "tenantId": "acme",
        "scope": "fleet",
        "deviceClass": "h100-80gb",
        "guaranteedDevices": 32,
        "floorDevices": 8,
        "overQuotaWeight": 2.5,
    }
    again = world.put({**seed, "guaranteed_devices": 40, "floor_devices": 0})
    assert again.status_code == 200, again.text
    assert world.rows(scope="fleet") == [
        {
            "tenantId": "acme",
            "scope": "fleet",
            "deviceClass": "h100-80gb",
            "guaranteedDevices": 40,
            "floorDevices": 0,
            "overQuotaWeight": 2.5,
            "used": 0,
        }
    ]


def test_pool_rows_answer_as_before_with_scope_pool(world: World) -> None:
    body = {"tenantId": "acme", "poolId": "p-iad-1", "class": "gpu", "limit": 2}
    made = world.put(body)
    assert made.status_code == 200, made.text
    assert made.json() == {**body, "scope": "pool"}
    [event] = stored_events(world.store, "quota.set")
    assert event["subject"] == "p-iad-1" and event["payload"] == {"tenantId": "acme", "quota": {"gpu": 2}}


def test_list_shows_both_kinds_with_what_the_tenant_holds_and_filters_and_pages(world: World) -> None:
    for body in (
        {"tenantId": "acme", "poolId": "p-iad-1", "class": "gpu", "limit": 4},
        {"tenantId": "acme", "poolId": "p-fra-1", "class": "gpu", "limit": 4},
        CLUSTER_ROW,
        {**CLUSTER_ROW, "clusterId": "fra-1", "guaranteedDevices": 8},
        {"tenantId": "acme", "deviceClass": "h100-80gb", "scope": "fleet", "guaranteedDevices": 32},
    ):
        assert world.put(body).status_code == 200, body
    for pool, count in (("p-iad-1", 3), ("p-fra-1", 1)):
        booked = world.http.post(
            "/v1/reservations",
            json={"poolId": pool, "devices": [{"class": "gpu", "count": count}], "duration": "1h"},
            headers=world.acme,
        )
        assert booked.status_code == 201, booked.text
    rows = world.rows(tenantId="acme")
    assert [(r["scope"], r.get("poolId") or r.get("clusterId"), r["used"]) for r in rows] == [
        ("pool", "p-fra-1", 1),
        ("pool", "p-iad-1", 3),
        ("cluster", "fra-1", 1),
        ("cluster", "iad-1", 3),
        ("fleet", None, 4),
    ]
    assert [r["scope"] for r in world.rows(deviceClass="h100-80gb")] == ["cluster", "cluster", "fleet"]
    assert [r["clusterId"] for r in world.rows(clusterId="iad-1")] == ["iad-1"]
    assert [r["poolId"] for r in world.rows(scope="pool")] == ["p-fra-1", "p-iad-1"]
    assert [r["poolId"] for r in world.rows(poolId="p-iad-1")] == ["p-iad-1"]
    # A tenant sees its own rows of both kinds.
    mine = world.http.get("/v1/quotas", headers=world.acme).json()["items"]
    assert len(mine) == 5
    # One cursor pages through both kinds, pool rows first.
    seen: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = world.http.get("/v1/quotas", params=params, headers=world.admin).json()
        seen.extend(page["items"])
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == rows
    # An hour later the reservations are over: nothing is held.
    world.clock.now = T0.replace(hour=T0.hour + 1)
    assert [r["used"] for r in world.rows(scope="cluster")] == [0, 0]


@pytest.mark.parametrize(
    ("change", "field", "code"),
    [
        ({"deviceClass": "b200"}, "deviceClass", "NOT_FOUND"),
        ({"clusterId": "nowhere"}, "clusterId", "NOT_FOUND"),
        ({"tenantId": "nobody"}, "tenantId", "NOT_FOUND"),
        ({"clusterId": None}, "clusterId", "INVALID_INPUT"),
        ({"scope": "fleet"}, "clusterId", "INVALID_INPUT"),
        ({"guaranteedDevices": -1}, "guaranteedDevices", "INVALID_INPUT"),
        ({"guaranteedDevices": 2**40}, "guaranteedDevices", "INVALID_INPUT"),
        ({"guaranteedDevices": None}, "guaranteedDevices", "INVALID_INPUT"),
        ({"floorDevices": -1}, "floorDevices", "INVALID_INPUT"),
        ({"floorDevices": 17}, "floorDevices", "INVALID_INPUT"),
        ({"overQuotaWeight": 0}, "overQuotaWeight", "INVALID_INPUT"),
        ({"overQuotaWeight": -2}, "overQuotaWeight", "INVALID_INPUT"),
        ({"overQuotaWeight": 1000.5}, "overQuotaWeight", "INVALID_INPUT"),
        ({"deviceClass": None}, "deviceClass", "INVALID_INPUT"),
        ({"deviceClass": "Not A Name"}, "deviceClass", "INVALID_INPUT"),
        ({"scope": "region"}, "scope", "INVALID_INPUT"),
        ({"poolId": "p-iad-1"}, "poolId", "INVALID_INPUT"),
        ({"limit": 3}, "limit", "INVALID_INPUT"),
    ],
)
def test_each_refusal_names_its_field(world: World, change: dict[str, Any], field: str, code: str) -> None:
    body = {k: v for k, v in {**CLUSTER_ROW, **change}.items() if v is not None}
    refused = world.put(body)
    assert error(refused)["code"] == code, refused.text
    details = error(refused)["details"]
    named = details.get("field") == field or field in details
    assert named or error(refused)["message"].startswith(f"{field}:"), refused.text
    assert world.rows(scope="cluster") == []


def test_a_pool_row_missing_a_field_or_with_a_device_class_field_is_refused_naming_it(world: World) -> None:
    missing = world.put({"tenantId": "acme", "poolId": "p-iad-1", "class": "gpu"})
    assert error(missing)["code"] == "INVALID_INPUT" and error(missing)["details"]["field"] == "limit"
    mixed = world.put(
        {"tenantId": "acme", "poolId": "p-iad-1", "class": "gpu", "limit": 1, "floorDevices": 1}
    )
    assert error(mixed)["code"] == "INVALID_INPUT" and "poolId" in error(mixed)["message"]


def test_only_the_admin_sets_a_device_class_row(world: World) -> None:
    refused = world.put(CLUSTER_ROW, who=world.acme)
    assert refused.status_code == 403 and error(refused)["code"] == "FORBIDDEN"


def test_deleting_the_tenant_removes_its_device_class_rows_and_counts_them(world: World) -> None:
    assert world.put({"tenantId": "acme", "poolId": "p-iad-1", "class": "gpu", "limit": 1}).status_code == 200
    assert world.put(CLUSTER_ROW).status_code == 200
    assert world.put({**CLUSTER_ROW, "scope": "fleet", "clusterId": None}).status_code == 200
    gone = world.http.delete("/v1/tenants/acme", headers=world.admin)
    assert gone.status_code == 200, gone.text
    assert world.rows(tenantId="acme") == []
    [deleted] = stored_events(world.store, "tenant.deleted")
    assert deleted["payload"]["removedQuotas"] == 3  # type: ignore[index]


@pytest.mark.both_stores
def test_a_write_queued_behind_another_with_an_earlier_now_counts_that_ones_devices_against_the_quota(
    world: World,
) -> None:
    """Regression: a write's `now` is read before it waits for the tenant's lock, so a write queued
    behind another acme write placed at a later instant counted only what acme held at its own
    earlier `now` and left the other's devices out: both were placed and acme held 4 devices of
    a cluster row of 3. What the tenant holds is now every booking not ended by `now`, started or not."""
    from datetime import timedelta

    for pool in ("p-iad-1", "p-fra-1"):
        offer = {"tenantId": "acme", "poolId": pool, "class": "gpu", "limit": 4}
        assert world.put(offer).status_code == 200
    assert world.put({**CLUSTER_ROW, "guaranteedDevices": 3}).status_code == 200
    assert world.put({**CLUSTER_ROW, "clusterId": "fra-1", "guaranteedDevices": 0}).status_code == 200
    body = {"tenantId": "acme", "shape": {"device_class": "h100-80gb", "device_count": 1}, "replicas": 2}
    world.clock.now = T0 + timedelta(seconds=10)
    first = world.http.post("/v1/workloads", json={**body, "name": "first"}, headers=world.admin)
    assert first.status_code == 201, first.text
    world.clock.now = T0  # the second write read its `now` before the first committed
    second = world.http.post("/v1/workloads", json={**body, "name": "second"}, headers=world.admin)
    assert second.status_code in (201, 409), second.text
    world.clock.now = T0 + timedelta(seconds=20)
    held = {r["clusterId"]: r["used"] for r in world.rows(tenantId="acme", scope="cluster")}
    assert held.get("iad-1", 0) <= 3, held
