"""Workloads across clusters through the real app, on SQLite and PostgreSQL: one test per sentence of
the placement seed (quotas, pinning, verdicts, pack and spread, floors, max_clusters, scaling,
drain), each named after it."""

from __future__ import annotations

import warnings
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet.rederive import rederive_nodes
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.ops.placement_retry import Retrier
from better_compute.service.placement.placement_stock import Stock
from better_compute.service.placement.workloads import Wiring
from better_compute.storage.kernel.tables import gpus
from better_compute.storage.store import Store
from tests.builders import T0, CountingIds, admin_token, bearer, real_app, tenant_token

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

H100 = {"model": "H100-80GB", "count": 8}
CLUSTERS = {"iad-1": ("us-east", 3), "fra-1": ("eu-central", 2), "sjc-1": ("us-west", 1)}


def fleet() -> dict[str, Any]:
    return {
        "tenants": [{"id": "platform"}, {"id": "acme"}, {"id": "globex"}],
        "deviceClasses": [
            {
                "name": "h100-80gb-sxm",
                "class": "gpu",
                "selector": {"matchExpressions": [{"key": "gpuModel", "op": "In", "values": ["H100-80GB"]}]},
            }
        ],
        "clusters": [
            {
                "name": name,
                "region": region,
                "nodes": [{"name": f"{name}-n{i}", "gpus": H100} for i in range(nodes)],
            }
            for name, (region, nodes) in CLUSTERS.items()
        ],
        "pools": [
            {
                "name": f"p-{name}",
                "cluster": name,
                "mode": "exclusive",
                "owner": "acme",
                "nodes": [f"{name}-n{i}" for i in range(nodes)],
            }
            for name, (_, nodes) in CLUSTERS.items()
        ],
    }


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class World:
    def __init__(self, store: Store) -> None:
        load_fleet(store, parse_fleet(fleet()), T0)
        self.store = store
        self.clock = Clock()
        self.http = TestClient(real_app(store, clock=self.clock))
        self.admin = bearer(admin_token(store))
        self.acme = bearer(tenant_token(store, "acme"))

    def create(self, body: dict[str, Any], status: int = 201) -> dict[str, Any]:
        got = self.http.post("/v1/workloads", json={"project": "acme", **body}, headers=self.admin)
        assert got.status_code == status, got.text
        out: dict[str, Any] = got.json()
        return out

    def quota(self, **row: Any) -> None:
        got = self.http.put(
            "/v1/quotas", json={"project": "acme", "device_class": "h100-80gb-sxm", **row}, headers=self.admin
        )
        assert got.status_code == 200, got.text

    def shares(self, workload: dict[str, Any]) -> dict[str, int]:
        return {d["clusterId"]: d["placedReplicas"] for d in workload["deployments"]}

    def preview(self, **body: Any) -> dict[str, Any]:
        got = self.http.post("/v1/placement/preview", json=body, headers=self.admin)
        assert got.status_code == 200, got.text
        out: dict[str, Any] = got.json()
        return out


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


def shape(count: int = 8) -> dict[str, Any]:
    return {"device_class": "h100-80gb-sxm", "device_count": count}


def verdicts(answer: dict[str, Any]) -> dict[str, str | None]:
    return {v["clusterId"]: v["reason"] for v in answer["verdicts"]}


def test_a_project_holding_16_of_16_h100s_in_iad_1_cannot_deploy_more_there_but_can_use_fra_1(
    world: World,
) -> None:
    world.quota(scope="cluster", cluster_id="iad-1", guaranteed_devices=16)
    first = world.create({"name": "big", "shape": shape(), "replicas": 2, "cluster": "iad-1"})
    assert world.shares(first) == {"iad-1": 2}
    more = world.create({"name": "more", "shape": shape(), "replicas": 1})
    assert verdicts(more)["iad-1"] == "insufficient_quota"
    assert world.shares(more) == {"fra-1": 1}


def test_a_fleet_quota_of_32_with_16_held_in_iad_1_and_16_in_fra_1_is_at_the_limit_everywhere(
    world: World,
) -> None:
    world.quota(scope="fleet", guaranteed_devices=32)
    world.create({"name": "east", "shape": shape(), "replicas": 2, "cluster": "iad-1"})
    world.create({"name": "west", "shape": shape(), "replicas": 2, "cluster": "fra-1"})
    more = world.create({"name": "more", "shape": shape(), "replicas": 1})
    # iad-1 and sjc-1 have free H100s, but the fleet row is spent; fra-1 is full as well
    assert verdicts(more) == {
        "iad-1": "insufficient_quota",
        "sjc-1": "insufficient_quota",
        "fra-1": "insufficient_capacity",
    }
    assert more["deployments"] == []
    assert more["unplacedReplicas"] == 1
    assert more["reason"] == "insufficient_quota"


def test_the_cluster_quota_takes_precedence_over_the_fleet_quota_in_its_cluster(world: World) -> None:
    world.quota(scope="fleet", guaranteed_devices=8)
    world.quota(scope="cluster", cluster_id="iad-1", guaranteed_devices=24)
    got = world.create({"name": "w", "shape": shape(), "replicas": 3})
    assert world.shares(got) == {"iad-1": 3}


def test_pinning_to_a_full_cluster_stays_pending_with_a_reason(world: World) -> None:
    got = world.create({"name": "pinned", "shape": shape(), "replicas": 2, "cluster": "sjc-1"})
    (dep,) = got["deployments"]
    assert dep["clusterId"] == "sjc-1"
    assert dep["phase"] == "pending"
    assert dep["placedReplicas"] == 1
    assert dep["reason"] == "insufficient_capacity"
    assert dep["shortfall"] == 1


def test_pack_fills_one_cluster_before_opening_another(world: World) -> None:
    got = world.create({"name": "w", "shape": shape(), "replicas": 4})
    assert world.shares(got) == {"iad-1": 3, "fra-1": 1}
    assert {d["phase"] for d in got["deployments"]} == {"placed"}


def test_spread_distributes_replicas_across_clusters(world: World) -> None:
    got = world.create({"name": "w", "shape": shape(), "replicas": 3, "strategy": "spread"})
    assert world.shares(got) == {"iad-1": 1, "fra-1": 1, "sjc-1": 1}


def test_cluster_floors_and_max_clusters(world: World) -> None:
    floors = world.create({"name": "f", "shape": shape(), "replicas": 3, "cluster_floors": {"sjc-1": 1}})
    assert world.shares(floors) == {"iad-1": 2, "sjc-1": 1}
    capped = world.create(
        {"name": "c", "shape": shape(1), "replicas": 6, "strategy": "spread", "max_clusters": 2}
    )
    assert len(world.shares(capped)) == 2


def test_a_verdict_explains_why_each_cluster_was_rejected(world: World) -> None:
    got = world.preview(project="acme", shape=shape(16), replicas=1)
    assert got["clusters"] == []
    assert verdicts(got) == dict.fromkeys(CLUSTERS, "insufficient_capacity")
    assert all(v["largestDomain"] == 8 for v in got["verdicts"])


def test_preview_writes_nothing(world: World) -> None:
    before = world.http.get("/v1/events", headers=world.admin).json()["items"]
    got = world.preview(project="acme", shape=shape(), replicas=2)
    assert got["shares"] == {"iad-1": 2}
    assert world.http.get("/v1/events", headers=world.admin).json()["items"] == before


def test_scaling_up_past_capacity_keeps_the_count_and_reports_a_shortfall(world: World) -> None:
    got = world.create({"name": "w", "shape": shape(), "replicas": 2, "cluster": "fra-1"})
    scaled = world.http.post(f"/v1/workloads/{got['id']}/scale", json={"replicas": 3}, headers=world.admin)
    assert scaled.status_code == 200, scaled.text
    (dep,) = scaled.json()["deployments"]
    assert dep["placedReplicas"] == 2
    assert dep["shortfall"] == 1


def test_scaling_down_reduces_shares_proportionally(world: World) -> None:
    got = world.create({"name": "w", "shape": shape(1), "replicas": 12, "strategy": "spread"})
    assert world.shares(got) == {"iad-1": 4, "fra-1": 4, "sjc-1": 4}
    scaled = world.http.post(f"/v1/workloads/{got['id']}/scale", json={"replicas": 6}, headers=world.admin)
    assert world.shares(scaled.json()) == {"iad-1": 2, "fra-1": 2, "sjc-1": 2}


def test_a_drained_cluster_loses_its_deployment_and_its_replicas_are_placed_elsewhere(world: World) -> None:
    got = world.create({"name": "w", "shape": shape(), "replicas": 2})
    assert world.shares(got) == {"iad-1": 2}
    op = world.http.post(
        "/v1/operations",
        json={"type": "workload.drain", "workloadId": got["id"], "payload": {"cluster": "iad-1"}},
        headers=world.admin,
    )
    assert op.status_code == 201, op.text
    assert op.json()["status"] == "succeeded"
    again = world.http.get(f"/v1/workloads/{got['id']}", headers=world.admin).json()
    assert world.shares(again) == {"fra-1": 2}
    read = world.http.get(f"/v1/operations/{op.json()['id']}", headers=world.admin)
    assert read.json()["result"]["removedReplicas"] == 2
    # iad-1 stays out of this workload's placements: scaling up does not bring it back there
    assert again["drainedClusters"] == ["iad-1"]
    up = world.http.post(f"/v1/workloads/{got['id']}/scale", json={"replicas": 3}, headers=world.admin).json()
    assert world.shares(up) == {"fra-1": 2, "sjc-1": 1}
    assert verdicts(up)["iad-1"] == "policy_denied"


def _drain(world: World, workload_id: str, cluster: str, **flags: Any) -> Any:
    body = {"type": "workload.drain", "workloadId": workload_id, "payload": {"cluster": cluster}, **flags}
    return world.http.post("/v1/operations", json=body, headers=world.admin)


def _held_in_iad(world: World) -> dict[str, Any]:
    """A workload of 3 replicas its policy keeps in iad-1: a drain of iad-1 leaves them nowhere."""
    return world.create({"name": "w", "shape": shape(), "replicas": 3, "allowedClusters": ["iad-1"]})


@pytest.mark.both_stores  # a refusal and a dry run roll back: each database must undo it all
def test_a_drain_that_would_leave_replicas_with_nowhere_to_go_is_refused_without_force(world: World) -> None:
    got = _held_in_iad(world)
    assert world.shares(got) == {"iad-1": 3}
    events = len(world.http.get("/v1/events", headers=world.admin).json()["items"])
    refused = _drain(world, got["id"], "iad-1")
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["details"]["reason"], error["details"]["replicas"]) == (
        "INVALID_STATE",
        "nowhere_to_go",
        3,
    )
    assert "would leave 3 replica(s)" in error["message"] and "force: true" in error["message"]
    # nothing changed: the replicas stay where they were, iad-1 is not drained, nothing logged
    again = world.http.get(f"/v1/workloads/{got['id']}", headers=world.admin).json()
    assert world.shares(again) == {"iad-1": 3} and again["drainedClusters"] == []
    assert len(world.http.get("/v1/events", headers=world.admin).json()["items"]) == events

    forced = _drain(world, got["id"], "iad-1", force=True)
    assert forced.status_code == 201, forced.text
    assert forced.json()["result"] == {
        "removedReplicas": 3,
        "terminatingReplicas": 0,
        "strandedReplicas": 3,
        "shares": {},
        "unplaced": 3,
    }
    after = world.http.get(f"/v1/workloads/{got['id']}", headers=world.admin).json()
    assert (after["deployments"], after["unplacedReplicas"]) == ([], 3)


def test_a_drain_whose_replicas_all_find_room_elsewhere_needs_no_force(world: World) -> None:
    got = world.create({"name": "w", "shape": shape(), "replicas": 2})
    op = _drain(world, got["id"], "iad-1")
    assert op.status_code == 201, op.text
    assert op.json()["result"]["strandedReplicas"] == 0
    assert op.json()["result"]["removedReplicas"] == 2


@pytest.mark.both_stores  # a refusal and a dry run roll back: each database must undo it all
def test_a_drain_dry_run_answers_what_the_drain_would_do_and_changes_nothing(world: World) -> None:
    got = _held_in_iad(world)
    before = world.http.get(f"/v1/workloads/{got['id']}", headers=world.admin).json()
    events = world.http.get("/v1/events", headers=world.admin).json()["items"]
    planned = _drain(world, got["id"], "iad-1", dryRun=True)
    assert planned.status_code == 200, planned.text
    answer = planned.json()
    assert (answer["status"], answer["id"], answer["finishedAt"]) == ("planned", "", None)
    assert answer["result"]["strandedReplicas"] == 3  # a dry run is never refused: it says so
    after = world.http.get(f"/v1/workloads/{got['id']}", headers=world.admin).json()
    assert after == before
    assert world.http.get("/v1/events", headers=world.admin).json()["items"] == events
    # what it planned is what the drain then does
    done = _drain(world, got["id"], "iad-1", force=True).json()
    assert done["result"] == answer["result"]
    # a dry run of a drain that fits answers its shares
    other = world.create({"name": "x", "shape": shape(), "replicas": 1})
    fits = _drain(world, other["id"], world.shares(other).popitem()[0], dryRun=True).json()
    assert fits["result"]["strandedReplicas"] == 0 and sum(fits["result"]["shares"].values()) == 1


def test_dry_run_and_force_are_for_a_drain_only(world: World) -> None:
    for flag in ("dryRun", "force"):
        got = world.http.post(
            "/v1/operations",
            json={"type": "replica.release", "payload": {"allocation": "dep-x.r0"}, flag: True},
            headers=world.admin,
        )
        assert got.status_code == 400, got.text
        assert got.json()["error"]["details"]["field"] == flag


def test_a_workload_and_a_reservation_never_hold_one_atom(world: World) -> None:
    got = world.create({"name": "w", "shape": shape(), "replicas": 2, "cluster": "sjc-1"})
    assert got["placedReplicas"] == 1
    pools = world.http.get("/v1/pools", headers=world.admin).json()["items"]
    sjc = next(p["id"] for p in pools if p["clusterId"] == "sjc-1")
    refused = world.http.post(
        "/v1/reservations",
        json={"tenantId": "acme", "poolId": sjc, "devices": [{"class": "gpu", "count": 1}], "duration": "1h"},
        headers=world.admin,
    )
    assert refused.status_code == 409, refused.text


def _retrier(world: World) -> Retrier:
    wiring = Wiring(world.store, BookingIndex(), Stock(), CountingIds())
    return Retrier(wiring, world.clock)


def test_a_refused_deployment_sits_in_pending_until_capacity_frees_up(world: World) -> None:
    retrier = _retrier(world)
    first = world.create({"name": "first", "shape": shape(), "replicas": 1, "cluster": "sjc-1"})
    waiting = world.create({"name": "waiting", "shape": shape(), "replicas": 1, "cluster": "sjc-1"})
    assert waiting["deployments"][0]["phase"] == "pending"
    retrier.tick()  # nothing freed yet: it stays pending
    assert world.http.get(f"/v1/workloads/{waiting['id']}", headers=world.admin).json()["placedReplicas"] == 0
    assert world.http.delete(f"/v1/workloads/{first['id']}", headers=world.admin).status_code == 200
    assert retrier.tick() == 1
    again = world.http.get(f"/v1/workloads/{waiting['id']}", headers=world.admin).json()
    assert again["deployments"][0]["phase"] == "placed"
    assert again["unplacedReplicas"] == 0


def test_a_reservation_that_ends_frees_its_devices_for_a_pending_workload(world: World) -> None:
    retrier = _retrier(world)
    pools = world.http.get("/v1/pools", headers=world.admin).json()["items"]
    sjc = next(p["id"] for p in pools if p["clusterId"] == "sjc-1")
    held = world.http.post(
        "/v1/reservations",
        json={"tenantId": "acme", "poolId": sjc, "devices": [{"class": "gpu", "count": 8}], "duration": "1h"},
        headers=world.admin,
    )
    assert held.status_code == 201, held.text
    waiting = world.create({"name": "waiting", "shape": shape(), "replicas": 1, "cluster": "sjc-1"})
    assert waiting["placedReplicas"] == 0
    retrier.tick()
    world.clock.now = T0 + timedelta(hours=1, seconds=1)
    assert retrier.tick() == 1


def test_an_unhealthy_device_does_not_count_as_capacity(world: World) -> None:
    with world.store.begin() as tx:
        (gpu, *_) = sorted(g.id for g in tx.gpus.of_nodes(["sjc-1-n0"]))
    with world.store.engine.begin() as conn:
        conn.execute(update(gpus).where(gpus.c.id == gpu).values(healthy=False))
    with world.store.begin() as tx:
        rederive_nodes(tx, ["sjc-1-n0"], T0)
    got = world.preview(project="acme", shape=shape(1), replicas=1)
    free = {v["clusterId"]: v["freeDevices"] for v in got["verdicts"]}
    assert free == {"iad-1": 24, "fra-1": 16, "sjc-1": 7}


def test_a_cordoned_node_and_a_cordoned_cluster_take_no_new_replicas(world: World) -> None:
    assert (
        world.http.patch("/v1/nodes/sjc-1-n0", json={"cordoned": True}, headers=world.admin).status_code
        == 200
    )
    got = world.preview(project="acme", shape=shape(1), replicas=1)
    assert {v["clusterId"]: v["freeDevices"] for v in got["verdicts"]}["sjc-1"] == 0
    assert (
        world.http.patch("/v1/clusters/iad-1", json={"phase": "cordoned"}, headers=world.admin).status_code
        == 200
    )
    got = world.preview(project="acme", shape=shape(1), replicas=1)
    iad = next(v for v in got["verdicts"] if v["clusterId"] == "iad-1")
    assert iad["reason"] == "policy_denied"
    assert iad["message"] == "cluster iad-1 is cordoned; only active clusters take new placements"
    assert got["shares"] == {"fra-1": 1}


def test_a_running_replica_is_one_its_node_has_bound(world: World) -> None:
    got = world.create({"name": "w", "shape": shape(1), "replicas": 1, "cluster": "sjc-1"})
    (dep,) = got["deployments"]
    assert dep["phase"] == "placed"
    with world.store.begin() as tx:
        (alloc,) = [a for _, a in tx.workloads.replicas_of([dep["id"]])[dep["id"]]]
        tx.bindings.put(alloc, "sjc-1-n0", "bound", None, T0)
    again = world.http.get(f"/v1/workloads/{got['id']}", headers=world.admin).json()
    assert again["deployments"][0]["phase"] == "running"
    assert again["deployments"][0]["runningReplicas"] == 1


def test_a_workload_is_named_by_its_id_or_its_name_within_what_the_caller_sees(world: World) -> None:
    made = world.create({"name": "train", "shape": shape(1), "replicas": 1})
    by_name = world.http.get("/v1/workloads/train", headers=world.acme)
    assert by_name.status_code == 200, by_name.text
    assert by_name.json()["id"] == made["id"]
    assert world.http.get("/v1/workloads/train", headers=world.admin).json()["id"] == made["id"]
    scaled = world.http.post("/v1/workloads/train/scale", json={"replicas": 2}, headers=world.acme)
    assert scaled.status_code == 200 and scaled.json()["placedReplicas"] == 2, scaled.text
    globex = bearer(tenant_token(world.store, "globex"))
    assert world.http.get("/v1/workloads/train", headers=globex).status_code == 404
    theirs = world.http.post(
        "/v1/workloads", json={"name": "train", "shape": shape(1), "replicas": 0}, headers=globex
    )
    assert theirs.status_code == 201, theirs.text
    assert world.http.get("/v1/workloads/train", headers=globex).json()["id"] == theirs.json()["id"]
    both = world.http.get("/v1/workloads/train", headers=world.admin)
    assert both.status_code == 400
    assert both.json()["error"]["message"] == (
        "more than one project has a workload named train; give the workload's id"
    )
    gone = world.http.delete("/v1/workloads/train", headers=world.acme)
    assert gone.status_code == 200 and gone.json()["id"] == made["id"]


def test_deployments_list_by_workload_and_a_tenant_sees_only_its_own(world: World) -> None:
    got = world.create({"name": "w", "shape": shape(1), "replicas": 2, "strategy": "spread"})
    listed = world.http.get("/v1/deployments", params={"workloadId": got["id"]}, headers=world.acme)
    assert listed.status_code == 200, listed.text
    assert {d["clusterId"] for d in listed.json()["items"]} == {"iad-1", "fra-1"}
    globex = bearer(tenant_token(world.store, "globex"))
    assert world.http.get(f"/v1/workloads/{got['id']}", headers=globex).status_code == 404
    assert world.http.get("/v1/workloads", headers=globex).json()["items"] == []


def test_bad_workload_requests_are_refused_with_the_field(world: World) -> None:
    cases = [
        ({"name": "w", "shape": shape(), "replicas": -1}, "replicas"),
        ({"name": "w", "shape": shape(0)}, "deviceCount"),
        ({"name": "w", "shape": shape(), "strategy": "scatter"}, "strategy"),
        ({"name": "w", "shape": shape(), "replicas": 1, "cluster_floors": {"iad-1": 2}}, "clusterFloors"),
        ({"name": "W!", "shape": shape()}, "name"),
        ({"name": "w", "shape": shape(), "topology_domain_kind": "rack"}, "topology_domain_kind"),
    ]
    for body, field in cases:
        got = world.http.post("/v1/workloads", json={"project": "acme", **body}, headers=world.admin)
        assert got.status_code == 400, (body, got.text)
        assert got.json()["error"]["code"] == "INVALID_INPUT"
        assert field in got.text, (field, got.text)
    unknown = world.http.post(
        "/v1/workloads",
        json={"project": "acme", "name": "w", "shape": {"device_class": "nope", "device_count": 1}},
        headers=world.admin,
    )
    assert unknown.status_code == 404
    world.create({"name": "twice", "shape": shape(1)})
    again = world.http.post(
        "/v1/workloads", json={"project": "acme", "name": "twice", "shape": shape(1)}, headers=world.admin
    )
    assert again.status_code == 409


def test_allowed_regions_on_create_become_a_real_policy_named_after_the_workload(world: World) -> None:
    got = world.create({"name": "us", "shape": shape(), "replicas": 1, "allowed_regions": ["us-west"]})
    assert world.shares(got) == {"sjc-1": 1}
    assert verdicts(got)["iad-1"] == "policy_denied"
    found = world.http.get(
        "/v1/policies", params={"subject_type": "workload", "subject": got["id"]}, headers=world.admin
    )
    assert found.status_code == 200, found.text
    (policy,) = found.json()["items"]
    assert policy["name"] == "us-placement"
    assert policy["id"] == got["policyId"]
    assert world.http.delete(f"/v1/workloads/{got['id']}", headers=world.admin).status_code == 200
    assert world.http.get(f"/v1/policies/{policy['id']}", headers=world.admin).status_code == 404


def test_policies_are_cumulative_a_cluster_must_pass_the_tenants_and_the_workloads(world: World) -> None:
    tenant_policy = world.http.post(
        "/v1/policies",
        json={"name": "us-only", "tenantId": "acme", "allowed_regions": ["us-east", "us-west"]},
        headers=world.admin,
    )
    assert tenant_policy.status_code == 201, tenant_policy.text
    got = world.create({"name": "w", "shape": shape(), "replicas": 1, "allowed_clusters": ["fra-1", "sjc-1"]})
    # fra-1 is allowed by the workload's policy but not by the tenant's; iad-1 the other way round
    assert verdicts(got)["fra-1"] == "policy_denied"
    assert verdicts(got)["iad-1"] == "policy_denied"
    assert world.shares(got) == {"sjc-1": 1}


def test_a_cluster_policy_denies_it_to_every_project(world: World) -> None:
    made = world.http.post(
        "/v1/policies",
        json={
            "name": "no-iad",
            "subject_type": "cluster",
            "subject_id": "iad-1",
            "denied_clusters": ["iad-1"],
        },
        headers=world.admin,
    )
    assert made.status_code == 201, made.text
    got = world.preview(project="acme", shape=shape(), replicas=1)
    assert verdicts(got)["iad-1"] == "policy_denied"
    assert got["shares"] == {"fra-1": 1}


def test_a_pinned_workload_beyond_its_quota_waits_with_insufficient_quota(world: World) -> None:
    world.quota(scope="cluster", cluster_id="iad-1", guaranteed_devices=8)
    got = world.create({"name": "w", "shape": shape(), "replicas": 2, "cluster": "iad-1"})
    (dep,) = got["deployments"]
    assert (dep["phase"], dep["placedReplicas"], dep["reason"], dep["shortfall"]) == (
        "pending",
        1,
        "insufficient_quota",
        1,
    )


def _sicken(world: World, node: str, count: int) -> list[str]:
    """Mark `count` of the node's GPUs unhealthy, as an inventory report would; their ids."""
    with world.store.begin() as tx:
        sick = sorted(g.id for g in tx.gpus.of_nodes([node]))[:count]
    with world.store.engine.begin() as conn:
        conn.execute(update(gpus).where(gpus.c.id.in_(sick)).values(healthy=False))
    with world.store.begin() as tx:
        rederive_nodes(tx, [node], T0)
    return sick


def test_a_pinned_cluster_is_checked_for_existence(world: World) -> None:
    got = world.http.post(
        "/v1/workloads",
        json={"project": "acme", "name": "w", "shape": shape(1), "replicas": 1, "cluster": "nowhere-1"},
        headers=world.admin,
    )
    assert got.status_code == 404, got.text
    assert got.json()["error"]["code"] == "NOT_FOUND"
    assert "nowhere-1" in got.json()["error"]["message"]
    assert world.http.get("/v1/workloads", headers=world.admin).json()["items"] == []


def test_a_cluster_where_the_devices_are_scattered_is_rejected_with_topology_constraint_not_met(
    world: World,
) -> None:
    for node in ("fra-1-n0", "fra-1-n1"):
        _sicken(world, node, 4)  # fra-1 keeps 8 healthy H100s, 4 on each node
    body = {"shape": shape(8), "replicas": 1, "cluster": "fra-1", "requires_single_topology_domain": True}
    got = world.create({"name": "one-fabric", "topology_domain_kind": "nvlink", **body})
    (dep,) = got["deployments"]
    assert (dep["phase"], dep["reason"], dep["placedReplicas"]) == (
        "pending",
        "topology_constraint_not_met",
        0,
    )
    fra = next(v for v in got["verdicts"] if v["clusterId"] == "fra-1")
    assert (fra["freeDevices"], fra["largestDomain"]) == (8, 4)
    # the same shape fits in one domain of iad-1, where nothing is scattered
    free = world.create({"name": "anywhere", **body, "cluster": None})
    assert world.shares(free) == {"iad-1": 1}
    assert verdicts(free)["fra-1"] == "topology_constraint_not_met"


def test_a_device_that_goes_unhealthy_after_admission_leaves_the_deployment_running(world: World) -> None:
    got = world.create({"name": "w", "shape": shape(8), "replicas": 1, "cluster": "sjc-1"})
    (dep,) = got["deployments"]
    with world.store.begin() as tx:
        (before,) = [a for _, a in tx.workloads.replicas_of([dep["id"]])[dep["id"]]]
        tx.bindings.put(before, "sjc-1-n0", "bound", None, T0)
    _sicken(world, "sjc-1-n0", 2)
    _retrier(world).tick()
    again = world.http.get(f"/v1/workloads/{got['id']}", headers=world.admin).json()
    (kept,) = again["deployments"]
    assert (kept["phase"], kept["placedReplicas"], kept["runningReplicas"]) == ("running", 1, 1)
    with world.store.begin() as tx:
        assert [a for _, a in tx.workloads.replicas_of([dep["id"]])[dep["id"]]] == [before]
    # capacity checks only affect admission: scaling up finds no room there now
    up = world.http.post(f"/v1/workloads/{got['id']}/scale", json={"replicas": 2}, headers=world.admin)
    (dep_up,) = up.json()["deployments"]
    assert (dep_up["placedReplicas"], dep_up["phase"]) == (1, "running")
    assert (dep_up["reason"], dep_up["shortfall"]) == ("insufficient_capacity", 1)


def test_every_workload_declares_a_priority_class_standard_unless_named(world: World) -> None:
    made = world.http.post(
        "/v1/priority-classes",
        json={"name": "batch", "priority": 10, "preemptible": True},
        headers=world.admin,
    )
    assert made.status_code == 201, made.text
    plain = world.create({"name": "plain", "shape": shape(1), "replicas": 1})
    batch = world.create({"name": "batch", "shape": shape(1), "replicas": 1, "priority_class": "batch"})
    assert (plain["priorityClass"], batch["priorityClass"]) == ("standard", "batch")
    unknown = world.http.post(
        "/v1/workloads",
        json={"project": "acme", "name": "x", "shape": shape(1), "priority_class": "urgent"},
        headers=world.admin,
    )
    assert unknown.status_code == 404, unknown.text
    assert unknown.json()["error"]["message"] == "priority class urgent not found"


def test_allowed_clusters_on_create_become_a_policy_read_edited_by_the_workloads_name(world: World) -> None:
    got = world.create({"name": "eu", "shape": shape(), "replicas": 1, "allowed_clusters": ["fra-1"]})
    assert world.shares(got) == {"fra-1": 1}
    found = world.http.get(
        "/v1/policies", params={"subject_type": "workload", "subject": "eu"}, headers=world.acme
    )
    assert found.status_code == 200, found.text
    (policy,) = found.json()["items"]
    assert (policy["name"], policy["id"], policy["subjectId"]) == ("eu-placement", got["policyId"], got["id"])
    globex = bearer(tenant_token(world.store, "globex"))
    theirs = world.http.post(
        "/v1/workloads", json={"name": "eu", "shape": shape(1), "replicas": 0}, headers=globex
    )
    assert theirs.status_code == 201, theirs.text
    by_admin = {"subject_type": "workload", "subject": "eu"}
    mixed = world.http.get("/v1/policies", params=by_admin, headers=world.admin)
    assert mixed.status_code == 400 and mixed.json()["error"]["details"]["field"] == "subject", mixed.text
    narrowed = world.http.get("/v1/policies", params={**by_admin, "tenantId": "acme"}, headers=world.admin)
    assert [p["id"] for p in narrowed.json()["items"]] == [policy["id"]], narrowed.text
    edited = world.http.patch(
        f"/v1/policies/{policy['id']}",
        json={"id": policy["id"], "allowed_clusters": ["fra-1", "sjc-1"]},
        headers=world.admin,
    )
    assert edited.status_code == 200, edited.text
    up = world.http.post(f"/v1/workloads/{got['id']}/scale", json={"replicas": 3}, headers=world.admin).json()
    assert world.shares(up) == {"fra-1": 2, "sjc-1": 1}
    assert verdicts(up)["iad-1"] == "policy_denied"


def test_the_retrier_places_again_only_after_an_event_that_may_free_devices(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from better_compute.service.placement import workloads

    passes: list[datetime] = []
    real = workloads.retry

    def counted(wiring: Wiring, now: datetime, limit: int = 100) -> int:
        passes.append(now)
        return real(wiring, now, limit)

    monkeypatch.setattr(workloads, "retry", counted)
    retrier = _retrier(world)
    retrier.tick()  # the first pass always looks
    assert len(passes) == 1
    pools = world.http.get("/v1/pools", headers=world.admin).json()["items"]
    taking = world.http.post(  # a reservation takes devices and frees none
        "/v1/reservations",
        json={
            "tenantId": "acme",
            "poolId": pools[0]["id"],
            "devices": [{"class": "gpu", "count": 1}],
            "duration": "1h",
        },
        headers=world.admin,
    )
    assert taking.status_code == 201, taking.text
    assert retrier.tick() == 0
    assert len(passes) == 1
    world.quota(scope="fleet", guaranteed_devices=100)  # a quota row may free headroom
    retrier.tick()
    assert len(passes) == 2
    assert retrier.tick() == 0 and len(passes) == 2  # nothing new since


def test_a_replica_taken_away_and_added_again_gets_an_allocation_id_no_replica_had(world: World) -> None:
    """A regression: replica indexes were reused, so a replica added after a scale down took the
    allocation id of the one removed, and the node's reports of the old one (bound, released) were
    read as the new one's."""
    got = world.create({"name": "w", "shape": shape(1), "replicas": 2, "cluster": "sjc-1"})
    (dep,) = got["deployments"]

    def allocations() -> list[str]:
        with world.store.begin() as tx:
            return [a for _, a in tx.workloads.replicas_of([dep["id"]])[dep["id"]]]

    first = allocations()
    world.http.post(f"/v1/workloads/{got['id']}/scale", json={"replicas": 1}, headers=world.admin)
    world.http.post(f"/v1/workloads/{got['id']}/scale", json={"replicas": 2}, headers=world.admin)
    again = allocations()
    assert again[0] == first[0]
    assert again[1] not in first
    assert again[1].endswith(".r2")


def test_a_cluster_whose_price_would_exceed_the_cost_ceiling_is_refused_with_the_figure(world: World) -> None:
    ceiling = world.http.post(
        "/v1/policies", json={"name": "budget", "tenantId": "acme", "cost_ceiling": "30"}, headers=world.admin
    )
    assert ceiling.status_code == 201, ceiling.text
    # no price yet: the ceiling cannot be checked, and nothing passes it
    unpriced = world.preview(project="acme", shape=shape(), replicas=1)
    assert set(verdicts(unpriced).values()) == {"cost_ceiling_exceeded"}
    assert "gpu.h100.hours has no price" in unpriced["verdicts"][0]["message"]
    priced = world.http.put(
        "/v1/prices",
        json={"meter": "gpu.h100.hours", "perHour": "2.50", "currency": "USD"},
        headers=world.admin,
    )
    assert priced.status_code == 200, priced.text
    one = world.create({"name": "one", "shape": shape(), "replicas": 1})  # 8 x 2.50 = 20.00 an hour
    assert world.shares(one) == {"iad-1": 1}
    assert {v["costPerHour"] for v in one["verdicts"]} == {"20.00"}
    two = world.preview(project="acme", shape=shape(), replicas=2)  # 40.00 an hour, over 30
    assert two["shares"] == {} and two["reason"] == "cost_ceiling_exceeded"
    iad = next(v for v in two["verdicts"] if v["clusterId"] == "iad-1")
    assert (
        iad["message"]
        == "2 replica(s) in cluster iad-1 would cost 40.00 USD per hour; the cost ceiling is 30.00"
    )
    # policies are cumulative: a cluster's own lower ceiling refuses it alone
    low = world.http.post(
        "/v1/policies",
        json={"name": "iad-budget", "subject_type": "cluster", "subject_id": "iad-1", "cost_ceiling": "10"},
        headers=world.admin,
    )
    assert low.status_code == 201, low.text
    again = world.create({"name": "again", "shape": shape(), "replicas": 1})
    assert verdicts(again)["iad-1"] == "cost_ceiling_exceeded"
    assert world.shares(again) == {"fra-1": 1}
    # a price change is seen at once (no stale catalog): 1.00 an hour fits everywhere
    world.http.put(
        "/v1/prices",
        json={"meter": "gpu.h100.hours", "perHour": "1.00", "currency": "USD"},
        headers=world.admin,
    )
    cheap = world.preview(project="acme", shape=shape(), replicas=1)
    assert set(verdicts(cheap).values()) == {None}


MODEL_SERVER = {
    "image": "registry.example/team/model-server:1.2",
    "command": ["httpd"],
    "args": ["-f", "-p", "8080"],
    "env": {"MODEL": "llama"},
    "ports": [{"containerPort": 8080}],
    "readinessProbe": {"httpGet": {"path": "/ping", "port": 8080}},
    "resources": {"cpu": "500m", "memoryMiB": 512},
}


def test_a_workload_says_what_each_replica_runs_and_keeps_it_through_reads_and_scaling(world: World) -> None:
    got = world.create({"name": "served", "shape": {**shape(1), "container": MODEL_SERVER}, "replicas": 2})
    container = got["shape"]["container"]
    assert container["image"] == MODEL_SERVER["image"]
    assert container["args"] == ["-f", "-p", "8080"]
    assert container["env"] == {"MODEL": "llama"}
    assert container["ports"] == [{"containerPort": 8080}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/ping", "port": 8080}
    assert container["resources"] == {"cpu": 0.5, "memoryMiB": 512}
    read = world.http.get(f"/v1/workloads/{got['id']}", headers=world.acme)
    assert read.json()["shape"]["container"] == container
    scaled = world.http.post(f"/v1/workloads/{got['id']}/scale", json={"replicas": 3}, headers=world.admin)
    assert scaled.status_code == 200, scaled.text
    assert scaled.json()["shape"]["container"] == container
    plain = world.create({"name": "plain", "shape": shape(1)})
    assert "container" not in plain["shape"]
    preview = world.preview(project="acme", shape={**shape(1), "container": MODEL_SERVER}, replicas=1)
    assert preview["verdicts"]


def test_a_bad_container_is_refused_naming_its_field(world: World) -> None:
    cases = [
        ({"image": "--privileged"}, "shape.container.image"),
        ({"image": "ok:1", "env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "shape.container.env"),
        ({"image": "ok:1", "readinessProbe": {"httpGet": {"path": "ping", "port": 80}}}, "httpGet.path"),
        ({"image": "ok:1", "resources": {"memoryMiB": 1}}, "memoryMiB"),
        ({"image": "ok:1", "ports": [{"containerPort": 70000}]}, "containerPort"),
        ({"image": "ok:1", "imagePullPolicy": "Always"}, "imagePullPolicy"),
    ]
    for container, field in cases:
        got = world.http.post(
            "/v1/workloads",
            json={"project": "acme", "name": "w", "shape": {**shape(1), "container": container}},
            headers=world.admin,
        )
        assert got.status_code == 400, (container, got.text)
        assert got.json()["error"]["code"] == "INVALID_INPUT"
        assert field in got.text, (field, got.text)
