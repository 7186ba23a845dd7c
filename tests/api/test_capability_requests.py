"""Capability requests through the real app on the demo fleet, on SQLite and PostgreSQL
(docs/scheduling.md#capability-requests): a shape that asks what each device must give resolves to the
cheapest kind of device that gives it, says why each cheaper kind was refused, and places like a named
class."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from better_compute.entrypoints.fleet import load_fleet, read_fleet
from better_compute.storage.store import Store
from tests.builders import T0, admin_token, bearer, real_app, tenant_token

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

DEMO = Path(__file__).parents[2] / "examples" / "demo-fleet.yaml"
PRICES = {"gpu.h100.hours": "7.00", "gpu.l40s.hours": "2.00", "gpu.a100.hours": "4.00"}


class World:
    def __init__(self, store: Store) -> None:
        load_fleet(store, read_fleet(DEMO), T0)
        self.store = store
        self.http = TestClient(real_app(store, clock=lambda: T0))
        self.admin = bearer(admin_token(store))
        for meter, per_hour in PRICES.items():
            got = self.http.put(
                "/v1/prices",
                json={"meter": meter, "perHour": per_hour, "currency": "USD"},
                headers=self.admin,
            )
            assert got.status_code == 200, got.text

    def post(self, path: str, body: dict[str, Any], status: int) -> dict[str, Any]:
        got = self.http.post(path, json={"project": "platform", **body}, headers=self.admin)
        assert got.status_code == status, got.text
        out: dict[str, Any] = got.json()
        return out


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


def test_a_capability_resolves_to_the_cheapest_kind_that_gives_it_and_says_why_cheaper_ones_did_not(
    world: World,
) -> None:
    shape = {"capability": {"memoryGiB": {"min": 16}, "computeSlices": {"min": 2}}, "deviceCount": 1}
    made = world.post("/v1/workloads", {"name": "small", "shape": shape, "replicas": 2}, 201)
    resolved = made["resolution"]
    # a 2g.20gb of an H100 (19.62 GiB, as the catalog has it) is 2/7 of 7.00 an hour: the
    # cheapest with 16 GiB and 2 slices
    assert resolved["kind"] == "H100-80GB 2g.20gb"
    assert resolved["deviceClass"] == "capability/gpu.mig/H100-80GB/mig=2g.20gb"
    assert (resolved["memoryGiB"], resolved["computeSlices"], resolved["pricePerHour"]) == (19.62, 2, "2.00")
    # every cheaper kind, cheapest first, and why not
    assert [(r["kind"], r["pricePerHour"], r["reason"]) for r in resolved["refused"]] == [
        ("L40S-48GB timeslice slot (1 of 4)", "0.50", "12 GiB of memory, under the 16 asked"),
        ("H100-80GB 1g.10gb", "1.00", "9.75 GiB of memory, under the 16 asked"),
        ("H100-80GB timeslice slot (1 of 4)", "1.75", "0 compute slice(s), under the 2 asked"),
    ]
    # the workload keeps the kind it resolved to, and is placed like any named class
    assert made["shape"]["deviceClass"] == "capability/gpu.mig/H100-80GB/mig=2g.20gb"
    assert made["shape"]["capability"] == {"memoryGiB": {"min": 16.0}, "computeSlices": {"min": 2}}
    assert made["placedReplicas"] == 2
    again = world.http.get(f"/v1/workloads/{made['id']}", headers=world.admin).json()
    assert again["shape"]["deviceClass"] == resolved["deviceClass"] and "resolution" not in again
    scaled = world.http.post(f"/v1/workloads/{made['id']}/scale", json={"replicas": 3}, headers=world.admin)
    assert scaled.status_code == 200 and scaled.json()["placedReplicas"] == 3


def test_an_nvlink_peer_or_more_memory_resolves_to_whole_gpus(world: World) -> None:
    big = world.post(
        "/v1/placement/preview",
        {"shape": {"capability": {"memoryGiB": {"min": 60}}}, "replicas": 1},
        200,
    )
    # a whole A100 (4.00) is cheaper than a whole H100 (7.00); both give 80 GiB
    assert big["resolution"]["kind"] == "A100-80GB (NVLink)"
    assert big["shares"] == {"us-east": 1}
    peer = world.post(
        "/v1/placement/preview",
        {"shape": {"capability": {"nvlink_peer": True, "memory_gib": {"min": 1}}}, "replicas": 1},
        200,
    )
    assert "NVLink" in peer["resolution"]["kind"]
    assert all(r["reason"] == "no NVLink peer" for r in peer["resolution"]["refused"])


def test_a_capability_nothing_gives_is_not_found_with_the_reasons_and_bad_ones_are_invalid(
    world: World,
) -> None:
    none = world.http.post(
        "/v1/workloads",
        json={"project": "platform", "name": "huge", "shape": {"capability": {"memoryGiB": {"min": 500}}}},
        headers=world.admin,
    )
    assert none.status_code == 404, none.text
    error = none.json()["error"]
    assert error["code"] == "NOT_FOUND" and "no kind of device the project may use gives" in error["message"]
    assert error["details"]["refused"]
    preview = world.post(
        "/v1/placement/preview", {"shape": {"capability": {"memoryGiB": {"min": 500}}}, "replicas": 2}, 200
    )
    assert preview["resolution"]["deviceClass"] is None and preview["unplacedReplicas"] == 2
    for shape, field in (
        ({"capability": {"memoryGiB": {"min": 0}}}, "min"),
        ({"capability": {"memoryGiB": 20}}, "memoryGiB"),
        ({"capability": {"tensorCores": {"min": 1}}}, "tensorCores"),
        ({"capability": {"computeSlices": {"min": 1.5}}}, "computeSlices"),
        ({"capability": {}, "deviceClass": "h100-80gb-sxm"}, "capability"),
        ({"deviceCount": 1}, "deviceClass"),
    ):
        got = world.http.post(
            "/v1/workloads", json={"project": "platform", "name": "bad", "shape": shape}, headers=world.admin
        )
        assert got.status_code == 400, (shape, got.text)
        assert got.json()["error"]["code"] == "INVALID_INPUT"
        assert field in got.text, (shape, got.text)


def test_a_kind_a_quota_row_names_by_class_is_refused_so_capability_never_slips_past_quota(
    world: World,
) -> None:
    """A regression: a class row of 0 for a100-80gb refused it by name, while a capability of
    60 GiB placed on the same A100s under an implicit class no row names."""
    got = world.http.put(
        "/v1/quotas",
        json={"project": "platform", "device_class": "a100-80gb", "scope": "fleet", "guaranteed_devices": 0},
        headers=world.admin,
    )
    assert got.status_code == 200, got.text
    # the A100s are the only devices with 60 GiB the project may use: nothing is left
    none = world.http.post(
        "/v1/workloads",
        json={"project": "platform", "name": "big", "shape": {"capability": {"memoryGiB": {"min": 60}}}},
        headers=world.admin,
    )
    assert none.status_code == 404, none.text
    refused = {r["kind"]: r["reason"] for r in none.json()["error"]["details"]["refused"]}
    assert refused["A100-80GB (NVLink)"] == (
        "device class a100-80gb, which it is, limits the project by quota: ask for a100-80gb by name"
    )
    # by name, the row decides as it always did
    named = world.post(
        "/v1/workloads", {"name": "named", "shape": {"device_class": "a100-80gb", "device_count": 1}}, 201
    )
    assert named["placedReplicas"] == 0 and named["reason"] == "insufficient_quota"


def test_the_kind_chosen_is_one_a_cluster_takes_now_policies_counted(world: World) -> None:
    """A regression: the cheapest kind was chosen even where every cluster holding it was denied
    by a policy, and the workload waited while a dearer kind elsewhere would have placed."""
    got = world.http.post(
        "/v1/policies",
        json={"name": "no-eu", "tenantId": "platform", "deniedClusters": ["eu-west"]},
        headers=world.admin,
    )
    assert got.status_code == 201, got.text
    made = world.post(
        "/v1/workloads", {"name": "w", "shape": {"capability": {"memoryGiB": {"min": 30}}}}, 201
    )
    assert made["resolution"]["kind"] == "A100-80GB (NVLink)"
    assert made["placedReplicas"] == 1
    refused = {r["kind"]: r["reason"] for r in made["resolution"]["refused"]}
    assert refused["H100-80GB 3g.40gb"] == (
        "no cluster would take a replica of it now (eu-west: policy_denied, us-east: insufficient_capacity)"
    )


def test_a_policy_allowing_only_some_classes_refuses_capability_kinds_with_a_way_out(world: World) -> None:
    got = world.http.post(
        "/v1/policies",
        json={"name": "classes", "tenantId": "platform", "allowedDeviceClasses": ["h100-80gb-sxm"]},
        headers=world.admin,
    )
    assert got.status_code == 201, got.text
    none = world.http.post(
        "/v1/workloads",
        json={"project": "platform", "name": "w", "shape": {"capability": {"memoryGiB": {"min": 30}}}},
        headers=world.admin,
    )
    assert none.status_code == 404, none.text
    assert "policy classes allows only device classes h100-80gb-sxm: ask for one of them by name" in none.text


def test_a_reservation_may_ask_by_capability_and_books_the_pools_cheapest_kind_that_gives_it(
    world: World,
) -> None:
    pools = {p["name"]: p["id"] for p in world.http.get("/v1/pools", headers=world.admin).json()["items"]}
    body = {
        "tenantId": "platform",
        "poolId": pools["h100-mig"],
        "devices": [{"capability": {"memoryGiB": {"min": 16}}, "count": 2}],
        "duration": "1h",
    }
    made = world.http.post("/v1/reservations", json=body, headers=world.admin)
    assert made.status_code == 201, made.text
    answer = made.json()
    (line,) = answer["devices"]
    assert line["class"] == "gpu.mig" and line["count"] == 2
    assert {"key": "migProfile", "op": "In", "values": ["2g.20gb"]} in line["selector"]["matchExpressions"]
    assert len(answer["atoms"]) == 2
    assert all(a["attributes"]["migProfile"] == "2g.20gb" for a in answer["atoms"])
    # the same key again: the first reservation, as it was resolved
    again = world.http.post("/v1/reservations", json={**body, "idempotencyKey": "k1"}, headers=world.admin)
    replay = world.http.post("/v1/reservations", json={**body, "idempotencyKey": "k1"}, headers=world.admin)
    assert (again.status_code, replay.status_code) == (201, 200) and again.json()["id"] == replay.json()["id"]
    # nothing in this pool gives 100 GiB; a class beside a capability is refused
    none = world.http.post(
        "/v1/reservations",
        json={**body, "devices": [{"capability": {"memoryGiB": {"min": 100}}, "count": 1}]},
        headers=world.admin,
    )
    assert none.status_code == 404 and none.json()["error"]["code"] == "NOT_FOUND", none.text
    both = world.http.post(
        "/v1/reservations",
        json={**body, "devices": [{"class": "gpu.mig", "capability": {"memoryGiB": {"min": 1}}, "count": 1}]},
        headers=world.admin,
    )
    assert both.status_code == 400 and "devices[0].class" in both.text, both.text
    # a pool the tenant may not see answers as one that does not exist, capability or not: the
    # kinds it holds are never told
    acme = bearer(tenant_token(world.store, "acme"))
    hidden = world.http.post(
        "/v1/reservations", json={k: v for k, v in body.items() if k != "tenantId"}, headers=acme
    )
    assert hidden.status_code == 404 and f"pool {pools['h100-mig']} not found" in hidden.text, hidden.text
