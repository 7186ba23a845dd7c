"""Device classes and priority classes through the real app, on SQLite and PostgreSQL: the admin
defines them, every token reads them, and each refusal says what is wrong."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from better_compute.bcd.fleet_file import read_fleet
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from tests.builders import T0, admin_token, bearer, real_app, stored_events, tenant_token

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

DEMO = Path(__file__).parents[2] / "examples" / "demo-fleet.yaml"

H100_3G: dict[str, Any] = {
    "name": "h100-3g.40gb",
    "class": "gpu.mig",
    "selector": {
        "matchExpressions": [
            {"key": "gpuModel", "op": "In", "values": ["H100-80GB"]},
            {"key": "migProfile", "op": "In", "values": ["3g.40gb"]},
        ]
    },
}


class World:
    def __init__(self, store: Store) -> None:
        load_fleet(store, parse_fleet({"tenants": [{"id": "acme"}]}), T0)
        self.store = store
        self.http = TestClient(real_app(store))
        self.admin = bearer(admin_token(store))
        self.acme = bearer(tenant_token(store, "acme"))


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


def test_the_admin_creates_a_device_class_and_every_token_reads_it(world: World) -> None:
    created = world.http.post("/v1/device-classes", json=H100_3G, headers=world.admin)
    assert created.status_code == 201, created.text
    expected = {
        "id": "h100-3g.40gb",
        "name": "h100-3g.40gb",
        "class": "gpu.mig",
        "selector": H100_3G["selector"],
        "createdAt": "2026-12-01T09:00:00Z",
    }
    assert created.json() == expected
    for who in (world.admin, world.acme):
        assert world.http.get("/v1/device-classes/h100-3g.40gb", headers=who).json() == expected
        assert world.http.get("/v1/device-classes", headers=who).json() == {
            "items": [expected],
            "nextCursor": None,
        }
    [event] = stored_events(world.store, "device_class.created")
    assert event["subject"] == "h100-3g.40gb"
    assert event["payload"] == {"class": "gpu.mig", "selector": H100_3G["selector"]}


def test_a_device_class_takes_snake_case_names_and_no_selector(world: World) -> None:
    body = {
        "name": "any-slot",
        "class": "gpu.slot",
        "selector": {"match_expressions": [{"key": "sharing", "op": "Exists"}]},
    }
    created = world.http.post("/v1/device-classes", json=body, headers=world.admin)
    assert created.status_code == 201, created.text
    assert created.json()["selector"] == {
        "matchExpressions": [{"key": "sharing", "op": "Exists", "values": None}]
    }
    bare = world.http.post(
        "/v1/device-classes", json={"name": "all-gpus", "class": "gpu"}, headers=world.admin
    )
    assert bare.status_code == 201 and bare.json()["selector"] == {"matchExpressions": []}


def test_a_tenant_may_not_create_a_device_class(world: World) -> None:
    refused = world.http.post("/v1/device-classes", json=H100_3G, headers=world.acme)
    assert refused.status_code == 403
    assert refused.json()["error"]["message"] == "deviceClasses.create needs a fleet-admin token"
    assert world.http.get("/v1/device-classes", headers=world.admin).json()["items"] == []


def test_a_device_class_name_is_taken_once(world: World) -> None:
    assert world.http.post("/v1/device-classes", json=H100_3G, headers=world.admin).status_code == 201
    again = world.http.post("/v1/device-classes", json={**H100_3G, "class": "gpu"}, headers=world.admin)
    assert again.status_code == 409
    assert again.json()["error"] == {
        "code": "CONFLICT",
        "message": "device class h100-3g.40gb already exists; a device class is never changed, so choose another name",
        "details": {"deviceClass": "h100-3g.40gb", "reason": "already_exists"},
    }
    assert world.http.get("/v1/device-classes/h100-3g.40gb", headers=world.admin).json()["class"] == "gpu.mig"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"class": "gpu.fraction"}, "class"),
        ({"name": "H100_3G"}, "name"),
        ({"name": "x" * 64}, "name"),
        (
            {"selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": []}]}},
            "selector.matchExpressions[0].values",
        ),
        (
            {"selector": {"matchExpressions": [{"key": "migProfile", "op": "Near"}]}},
            "selector.matchExpressions[0].op",
        ),
        (
            {"selector": {"matchExpressions": [{"key": f"k{i}", "op": "Exists"} for i in range(33)]}},
            "selector.matchExpressions",
        ),
    ],
)
def test_a_bad_device_class_is_invalid_input_naming_the_field(
    world: World, change: dict[str, Any], field: str
) -> None:
    refused = world.http.post("/v1/device-classes", json={**H100_3G, **change}, headers=world.admin)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "INVALID_INPUT"
    assert error["message"].startswith(f"{field}")
    assert world.http.get("/v1/device-classes", headers=world.admin).json()["items"] == []


def test_an_unknown_device_class_is_not_found(world: World) -> None:
    missing = world.http.get("/v1/device-classes/h200", headers=world.acme)
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "device class h200 not found"


def test_standard_always_exists_and_cannot_be_created(world: World) -> None:
    standard = {"id": "standard", "name": "standard", "priority": 0, "preemptible": False}
    listed = world.http.get("/v1/priority-classes", headers=world.acme).json()["items"]
    assert [{k: v for k, v in p.items() if k != "createdAt"} for p in listed] == [standard]
    again = world.http.post(
        "/v1/priority-classes", json={"name": "standard", "priority": 5}, headers=world.admin
    )
    assert again.status_code == 409
    assert (
        again.json()["error"]["message"]
        == "priority class standard already exists (it always exists); choose another name"
    )
    assert world.http.get("/v1/priority-classes/standard", headers=world.acme).json()["priority"] == 0


def test_the_admin_creates_priority_classes_and_every_token_reads_them(world: World) -> None:
    high = world.http.post(
        "/v1/priority-classes", json={"name": "high", "priority": 1000}, headers=world.admin
    )
    assert high.status_code == 201, high.text
    assert high.json() == {
        "id": "high",
        "name": "high",
        "priority": 1000,
        "preemptible": False,
        "createdAt": "2026-12-01T09:00:00Z",
    }
    low = {"name": "low", "priority": -1_000_000, "preemptible": True}
    assert world.http.post("/v1/priority-classes", json=low, headers=world.admin).status_code == 201
    names = [p["name"] for p in world.http.get("/v1/priority-classes", headers=world.acme).json()["items"]]
    assert names == ["high", "low", "standard"]
    assert world.http.get("/v1/priority-classes/low", headers=world.acme).json()["preemptible"] is True
    events = stored_events(world.store, "priority_class.created")
    assert [(e["subject"], e["payload"]) for e in events] == [
        ("high", {"priority": 1000, "preemptible": False}),
        ("low", {"priority": -1_000_000, "preemptible": True}),
    ]
    page = world.http.get("/v1/priority-classes", params={"limit": 2}, headers=world.acme).json()
    assert [p["name"] for p in page["items"]] == ["high", "low"] and page["nextCursor"] == "low"


@pytest.mark.parametrize(
    ("body", "status", "start"),
    [
        (
            {"name": "huge", "priority": 1_000_001},
            400,
            "priority must be an integer from -1,000,000 to 1,000,000",
        ),
        ({"name": "half", "priority": 1.5}, 400, "priority:"),
        ({"name": "yes", "priority": 1, "preemptible": "yes"}, 400, "preemptible:"),
        ({"name": "Bad Name", "priority": 1}, 400, "name must be 1-63"),
    ],
)
def test_a_bad_priority_class_is_invalid_input(
    world: World, body: dict[str, Any], status: int, start: str
) -> None:
    refused = world.http.post("/v1/priority-classes", json=body, headers=world.admin)
    assert refused.status_code == status, refused.text
    assert refused.json()["error"]["message"].startswith(start)


def test_priority_classes_are_the_admins_to_create_and_unknown_ones_are_not_found(world: World) -> None:
    refused = world.http.post(
        "/v1/priority-classes", json={"name": "mine", "priority": 9}, headers=world.acme
    )
    assert refused.status_code == 403
    assert world.http.get("/v1/priority-classes/mine", headers=world.admin).status_code == 404


def test_the_demo_fleet_defines_device_classes_and_loads_twice_alike(store: Store) -> None:
    spec = read_fleet(DEMO)
    load_fleet(store, spec, T0)
    http = TestClient(real_app(store))
    admin = bearer(admin_token(store))
    first = http.get("/v1/device-classes", headers=admin).json()["items"]
    load_fleet(store, spec, T0.replace(hour=10))
    assert http.get("/v1/device-classes", headers=admin).json()["items"] == first
    by_name = {d["name"]: d for d in first}
    assert {"h100-80gb-sxm", "h100-3g.40gb", "h100-1g.10gb", "l40s-slot"} <= set(by_name)
    assert by_name["h100-80gb-sxm"]["class"] == "gpu" and by_name["l40s-slot"]["class"] == "gpu.slot"
    assert len(stored_events(store, "device_class.created")) == len(first)


def test_a_fleet_file_may_not_redefine_a_device_class(store: Store) -> None:
    fleet: dict[str, Any] = {"deviceClasses": [{"name": "h100", "class": "gpu"}]}
    load_fleet(store, parse_fleet(fleet), T0)
    with pytest.raises(InvalidInput, match="device class h100 exists with another class or selector"):
        load_fleet(store, parse_fleet({"deviceClasses": [{"name": "h100", "class": "gpu.mig"}]}), T0)
    with store.read() as tx:
        assert [d.cls for d in tx.device_classes.all()] == ["gpu"]


def test_a_fleet_file_names_its_bad_device_class() -> None:
    with pytest.raises(InvalidInput) as err:
        parse_fleet(
            {"deviceClasses": [{"name": "ok", "class": "gpu"}, {"name": "ok", "class": "gpu", "selectr": {}}]}
        )
    assert err.value.details["field"] == "deviceClasses[1].selectr"
    with pytest.raises(InvalidInput, match="device class ok is named twice"):
        parse_fleet({"deviceClasses": [{"name": "ok", "class": "gpu"}, {"name": "ok", "class": "gpu.mig"}]})
