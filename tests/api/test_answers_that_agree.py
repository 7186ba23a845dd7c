"""Answers that agree: where two ways of asking the same thing once got different answers (issue 39,
item 11), through the real app on both stores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.ops.placement_retry import Retrier
from better_compute.service.placement.placement_stock import Stock
from better_compute.service.placement.workloads import Wiring
from better_compute.storage.store import Store
from tests.api.test_endpoints import endpoint
from tests.api.test_tenancy import Api, code, load
from tests.api.test_workloads import World, shape, verdicts
from tests.builders import CountingIds, bearer
from tests.node_world import NodeWorld

pytestmark = pytest.mark.both_stores


def _patch(api: Api, path: str, body: dict[str, Any]) -> Any:
    return api.client.patch(path, json=body, headers=bearer(api.tokens["admin"]))


def test_pools_update_takes_the_id_from_the_path_and_refuses_a_body_id_that_differs(store: Store) -> None:
    api = load(store)
    pool = api.call("admin", "pools.get", {"id": "p1"}).json()
    without_id = _patch(api, f"/v1/pools/{pool['id']}", {"policy": {"migLayout": "all-3g.40gb"}})
    assert without_id.status_code == 200, without_id.text
    assert without_id.json()["policy"]["migLayout"] == "all-3g.40gb"
    same = _patch(api, f"/v1/pools/{pool['id']}", {"id": pool["id"], "policy": {"maxDuration": "PT1H"}})
    assert same.status_code == 200, same.text
    other = _patch(api, f"/v1/pools/{pool['id']}", {"id": "p2", "policy": {"migLayout": "all-1g.10gb"}})
    assert other.status_code == 400 and code(other) == "INVALID_INPUT"
    error = other.json()["error"]
    assert "'p2'" in error["message"] and "path" in error["message"]
    assert error["details"]["field"] == "id"
    after = api.call("admin", "pools.get", {"id": "p1"}).json()
    assert after["policy"]["migLayout"] == "all-3g.40gb" and after["generation"] == 3


def test_policies_update_takes_the_id_from_the_path_and_refuses_a_body_id_that_differs(store: Store) -> None:
    api = load(store)
    made = api.call("admin", "policies.create", {"name": "r", "tenantId": "acme", "allowedRegions": ["r1"]})
    assert made.status_code == 201, made.text
    pid = made.json()["id"]
    without_id = _patch(api, f"/v1/policies/{pid}", {"allowedRegions": ["r2"]})
    assert without_id.status_code == 200, without_id.text
    assert without_id.json()["allowedRegions"] == ["r2"]
    other = _patch(api, f"/v1/policies/{pid}", {"id": "pol-other", "allowedRegions": ["r3"]})
    assert other.status_code == 400 and code(other) == "INVALID_INPUT"
    assert "'pol-other'" in other.json()["error"]["message"]
    assert api.call("admin", "policies.get", {"id": pid}).json()["allowedRegions"] == ["r2"]


def test_placement_preview_takes_the_workloads_own_allowed_regions_and_clusters(store: Store) -> None:
    world = World(store)
    asked = {"project": "acme", "shape": shape(), "replicas": 1, "allowedRegions": ["eu-central"]}
    preview = world.preview(**asked)
    assert verdicts(preview)["iad-1"] == "policy_denied" and verdicts(preview)["fra-1"] is None
    assert preview["shares"] == {"fra-1": 1}
    made = world.create({**asked, "name": "eu"})
    assert world.shares(made) == {"fra-1": 1} and verdicts(made) == verdicts(preview)
    only = world.preview(project="acme", shape=shape(), replicas=1, allowedClusters=["sjc-1"])
    assert [c for c, reason in verdicts(only).items() if reason is None] == ["sjc-1"]


def test_placement_preview_refuses_an_unknown_cluster_in_cluster_floors_as_create_does(store: Store) -> None:
    world = World(store)
    asked = {"project": "acme", "shape": shape(), "replicas": 1, "clusterFloors": {"nowhere-1": 1}}
    created = world.http.post("/v1/workloads", json={**asked, "name": "w"}, headers=world.admin)
    previewed = world.http.post("/v1/placement/preview", json=asked, headers=world.admin)
    assert (created.status_code, previewed.status_code) == (404, 404), previewed.text
    assert previewed.json()["error"] == created.json()["error"]
    assert previewed.json()["error"]["details"] == {"field": "clusterFloors", "cluster": "nowhere-1"}


def test_the_admin_cannot_create_an_endpoint_for_a_tenant_on_a_pool_that_tenant_cannot_use(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    world.join("n-1")
    for_acme = endpoint(["mig-7g.80gb"], name="acme-chat", tenantId="acme")
    refused = world.http.post("/v1/endpoints", json=for_acme, headers=world.admin)
    assert refused.status_code == 400 and code(refused) == "INVALID_INPUT", refused.text
    error = refused.json()["error"]
    assert error["message"].startswith("tenant acme cannot use pool p1")
    assert error["details"] == {"field": "poolId", "poolId": "p1", "tenantId": "acme"}
    assert world.http.get("/v1/endpoints", headers=world.admin).json()["items"] == []
    zero = {"tenantId": "acme", "poolId": "p1", "class": "gpu", "limit": 0}
    assert world.http.put("/v1/quotas", json=zero, headers=world.admin).status_code == 200
    still = world.http.post("/v1/endpoints", json=for_acme, headers=world.admin)
    assert still.status_code == 400, still.text  # a row of 0 offers nothing
    offered = {**zero, "limit": 8}
    assert world.http.put("/v1/quotas", json=offered, headers=world.admin).status_code == 200
    made = world.http.post("/v1/endpoints", json=for_acme, headers=world.admin)
    assert made.status_code == 201, made.text
    assert made.json()["tenantId"] == "acme"


def test_a_pinned_pending_deployments_message_is_current(store: Store) -> None:
    world = World(store)
    retrier = Retrier(Wiring(world.store, BookingIndex(), Stock(), CountingIds()), world.clock)
    first = world.create({"name": "first", "shape": shape(), "replicas": 1, "cluster": "sjc-1"})
    waiting = world.create({"name": "waiting", "shape": shape(), "replicas": 1, "cluster": "sjc-1"})
    (before,) = waiting["deployments"]
    assert (before["phase"], before["reason"]) == ("pending", "insufficient_capacity")
    pools = world.http.get("/v1/pools", headers=world.admin).json()["items"]
    sjc = next(p["id"] for p in pools if p["clusterId"] == "sjc-1")
    assert world.http.delete(f"/v1/workloads/{first['id']}", headers=world.admin).status_code == 200
    half = {"tenantId": "acme", "poolId": sjc, "devices": [{"class": "gpu", "count": 4}], "duration": "1h"}
    assert world.http.post("/v1/reservations", json=half, headers=world.admin).status_code == 201
    retrier.tick()
    (after,) = world.http.get(f"/v1/workloads/{waiting['id']}", headers=world.admin).json()["deployments"]
    preview = world.preview(workloadId=waiting["id"])
    (verdict,) = preview["verdicts"]
    assert (after["phase"], after["reason"]) == ("pending", "insufficient_capacity")
    assert after["message"] == verdict["message"] != before["message"]


def _floor(world: World, cluster: str | None) -> None:
    row = {"project": "globex", "device_class": "h100-80gb-sxm", "floor_devices": 8, "guaranteed_devices": 8}
    where = {"scope": "cluster", "cluster_id": cluster} if cluster else {"scope": "fleet"}
    got = world.http.put("/v1/quotas", json={**row, **where}, headers=world.admin)
    assert got.status_code == 200, got.text


def test_one_projects_floor_in_one_cluster_does_not_stop_other_projects_capability_requests_elsewhere(
    store: Store,
) -> None:
    world = World(store)
    _floor(world, "iad-1")
    asked = {"shape": {"capability": {"memoryGiB": {"min": 40}}}, "replicas": 4, "strategy": "spread"}
    preview = world.preview(project="acme", **asked)
    assert preview["resolution"]["kind"].startswith("H100-80GB"), preview
    assert sorted(preview["shares"]) == ["fra-1", "sjc-1"]
    made = world.create({**asked, "name": "by-memory"})
    assert made["shape"]["deviceClass"].startswith("capability/")
    assert "iad-1" not in world.shares(made) and sum(world.shares(made).values()) == 4
    (iad,) = [v for v in made["verdicts"] if v["clusterId"] == "iad-1"]
    assert iad["reason"] == "policy_denied"
    assert iad["message"] == (
        "device class h100-80gb-sxm, which it is, carries other projects' floors in iad-1:"
        " ask for h100-80gb-sxm by name"
    )
    _floor(world, None)  # a fleet-wide floor holds every cluster: the kind is refused, as before
    refused = world.http.post("/v1/placement/preview", json={"project": "acme", **asked}, headers=world.admin)
    assert refused.status_code == 200, refused.text
    assert refused.json()["resolution"]["deviceClass"] is None
    (why,) = {r["reason"] for r in refused.json()["resolution"]["refused"]}
    assert (
        why
        == "device class h100-80gb-sxm, which it is, carries other projects' floors: ask for h100-80gb-sxm by name"
    )
