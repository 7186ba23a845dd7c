"""Scheduling policy end to end through the real app, on SQLite and PostgreSQL (docs/scheduling.md):
preemption by priority with the victims shown and re-placed, non-preemptible work never touched, floors held
against a burst, borrowing and reclaim, no loop between equal projects, weights 2:1."""

from __future__ import annotations

import warnings
from datetime import datetime, timedelta
from typing import Any

import pytest

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.ops.placement_retry import Retrier
from better_compute.service.placement.placement_stock import Stock
from better_compute.service.placement.workloads import Wiring
from better_compute.storage.store import Store
from tests.builders import T0, CountingIds, admin_token, bearer, real_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

CLASS = "h100-80gb-sxm"


def fleet() -> dict[str, Any]:
    """One cluster of two nodes of 4 H100s (8 devices), in a pool the platform owns and offers to
    acme and globex."""
    return {
        "tenants": [{"id": "platform"}, {"id": "acme"}, {"id": "globex"}],
        "deviceClasses": [
            {
                "name": CLASS,
                "class": "gpu",
                "selector": {"matchExpressions": [{"key": "gpuModel", "op": "In", "values": ["H100-80GB"]}]},
            }
        ],
        "clusters": [
            {
                "name": "iad-1",
                "region": "us-east",
                "nodes": [{"name": f"n{i}", "gpus": {"model": "H100-80GB", "count": 4}} for i in range(2)],
            }
        ],
        "pools": [
            {
                "name": "shared",
                "cluster": "iad-1",
                "mode": "exclusive",
                "owner": "platform",
                "nodes": ["n0", "n1"],
            }
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
        pool = self.http.get("/v1/pools", headers=self.admin).json()["items"][0]["id"]
        for tenant in ("acme", "globex"):
            self.put("/v1/quotas", {"tenantId": tenant, "poolId": pool, "class": "gpu", "limit": 8})
        self.post("/v1/priority-classes", {"name": "batch", "priority": 1, "preemptible": True})
        self.post("/v1/priority-classes", {"name": "prod", "priority": 100, "preemptible": False})
        self.retrier = Retrier(Wiring(store, BookingIndex(), Stock(), CountingIds()), self.clock)

    def post(self, path: str, body: dict[str, Any], status: int = 201) -> dict[str, Any]:
        got = self.http.post(path, json=body, headers=self.admin)
        assert got.status_code == status, got.text
        out: dict[str, Any] = got.json()
        return out

    def put(self, path: str, body: dict[str, Any]) -> None:
        got = self.http.put(path, json=body, headers=self.admin)
        assert got.status_code == 200, got.text

    def create(
        self, tenant: str, name: str, replicas: int, cls: str = "standard", count: int = 1
    ) -> dict[str, Any]:
        return self.post(
            "/v1/workloads",
            {
                "project": tenant,
                "name": name,
                "shape": {"device_class": CLASS, "device_count": count},
                "replicas": replicas,
                "priority_class": cls,
            },
        )

    def get(self, workload: dict[str, Any]) -> dict[str, Any]:
        got = self.http.get(f"/v1/workloads/{workload['id']}", headers=self.admin)
        assert got.status_code == 200, got.text
        out: dict[str, Any] = got.json()
        return out

    def placed(self, workload: dict[str, Any]) -> int:
        return int(self.get(workload)["placedReplicas"])

    def row(self, tenant: str, **row: Any) -> None:
        self.put(
            "/v1/quotas",
            {"project": tenant, "device_class": CLASS, "scope": "cluster", "cluster_id": "iad-1", **row},
        )

    def events(self, type_: str) -> list[dict[str, Any]]:
        got = self.http.get("/v1/events", params={"type": type_}, headers=self.admin)
        assert got.status_code == 200, got.text
        items: list[dict[str, Any]] = got.json()["items"]
        return items


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


def test_a_higher_priority_workload_evicts_the_fewest_preemptible_replicas_that_open_whole_holes(
    world: World,
) -> None:
    batch = world.create("globex", "batch", 8, "batch")
    assert world.placed(batch) == 8
    # preview first: whom it would evict, and nothing written
    preview = world.post(
        "/v1/placement/preview",
        {
            "project": "acme",
            "shape": {"device_class": CLASS, "device_count": 2},
            "replicas": 1,
            "priority_class": "prod",
        },
        status=200,
    )
    assert preview["shares"] == {"iad-1": 1}
    assert [(p["workloadId"], p["priorityClass"], p["why"]) for p in preview["preemptions"]] == [
        (batch["id"], "batch", "priority"),
        (batch["id"], "batch", "priority"),
    ]
    assert world.placed(batch) == 8
    # two devices on one node: two single-device victims beside each other, newest first
    serve = world.create("acme", "serve", 1, "prod", count=2)
    assert serve["placedReplicas"] == 1
    assert len(serve["preemptions"]) == 2
    victim = world.get(batch)
    assert victim["placedReplicas"] == 6
    (dep,) = victim["deployments"]
    assert (dep["phase"], dep["reason"], dep["preemptedBy"]) == ("pending", "preempted", serve["id"])
    assert serve["id"] in dep["message"]
    (told,) = world.events("workload.preempted")
    assert told["subject"] == batch["id"]
    assert told["payload"]["preemptorId"] == serve["id"]
    assert told["payload"]["why"] == "priority"
    assert sorted(told["payload"]["allocations"]) == sorted(p["allocationId"] for p in serve["preemptions"])
    # once the preemptor is gone, the victims are placed again
    world.retrier.tick()
    assert world.placed(batch) == 6
    assert world.http.delete(f"/v1/workloads/{serve['id']}", headers=world.admin).status_code == 200
    world.retrier.tick()
    back = world.get(batch)
    assert back["placedReplicas"] == 8
    assert back["deployments"][0]["reason"] is None
    assert "preemptedBy" not in back["deployments"][0]


def test_a_non_preemptible_workload_is_never_evicted_whatever_the_priority(world: World) -> None:
    steady = world.create("globex", "steady", 8)
    serve = world.create("acme", "serve", 1, "prod")
    assert serve["placedReplicas"] == 0
    assert serve.get("preemptions") is None
    assert serve["reason"] == "insufficient_capacity"
    assert world.placed(steady) == 8


def test_equal_priority_never_evicts_by_priority(world: World) -> None:
    world.create("globex", "batch", 8, "batch")
    # weights and floors equal (none): acme starts from 0 against globex's 8, so fair sharing
    # evicts; with acme's work of priority 0 it never evicts globex's priority-1 work
    mine = world.create("acme", "mine", 1)
    assert mine["placedReplicas"] == 0


def test_a_floor_is_held_against_another_projects_burst(world: World) -> None:
    world.row("acme", guaranteed_devices=8, floor_devices=4)
    burst = world.create("globex", "burst", 8)
    assert burst["placedReplicas"] == 4
    (verdict,) = burst["verdicts"]
    assert "unused floors" in verdict["message"]
    mine = world.create("acme", "mine", 4)
    assert mine["placedReplicas"] == 4


def test_preemptible_work_borrows_an_unused_floor_and_the_owner_reclaims_it(world: World) -> None:
    world.row("acme", guaranteed_devices=8, floor_devices=4)
    borrowed = world.create("globex", "borrowed", 8, "batch")
    assert borrowed["placedReplicas"] == 8
    # acme's standard work (priority 0, under the batch's 1) takes its floor back
    mine = world.create("acme", "mine", 4)
    assert mine["placedReplicas"] == 4
    assert {p["why"] for p in mine["preemptions"]} == {"floor"}
    assert world.placed(borrowed) == 4
    # and no further: globex now holds 4 and acme's floor is used
    more = world.create("acme", "more", 1)
    assert more["placedReplicas"] == 0


def test_two_equal_projects_do_not_evict_each_other_back_and_forth(world: World) -> None:
    """kueue#3779: equal projects one device apart must not take turns evicting each other."""
    theirs = world.create("globex", "theirs", 8, "batch")
    mine = world.create("acme", "mine", 8, "batch")
    # fair sharing evens them out, and stops there
    assert (world.placed(mine), world.placed(theirs)) == (4, 4)
    assert {p["why"] for p in mine["preemptions"]} == {"fair_share"}
    evictions = len(world.events("workload.preempted"))
    # both wait for more; placing both again and again evicts nobody
    for _ in range(3):
        world.retrier.tick()
    again = world.create("globex", "again", 1, "batch")
    assert again["placedReplicas"] == 0 and again.get("preemptions") is None
    assert len(world.events("workload.preempted")) == evictions
    assert (world.placed(mine), world.placed(theirs)) == (4, 4)


def test_weights_two_to_one_split_contended_capacity_two_to_one(world: World) -> None:
    world.row("acme", guaranteed_devices=8, over_quota_weight=2)
    world.row("globex", guaranteed_devices=8, over_quota_weight=1)
    theirs = world.create("globex", "theirs", 8, "batch")
    mine = world.create("acme", "mine", 8, "batch")
    # a fair share of 8 at 2:1 is 5.33 : 2.67; evictions stop where one more would not be fairer
    assert (world.placed(mine), world.placed(theirs)) == (5, 3)
    assert {p["why"] for p in mine["preemptions"]} == {"fair_share"}
    for _ in range(3):
        world.retrier.tick()
    assert (world.placed(mine), world.placed(theirs)) == (5, 3)


def test_a_replica_on_a_cordoned_node_is_never_evicted_for_a_replica_that_could_not_land_there(
    world: World,
) -> None:
    """A regression: the victims' devices were read without the cordoned nodes left out, so a
    replica on a cordoned node was evicted and the preemptor booked onto that node."""
    batch = world.create("globex", "batch", 8, "batch")
    got = world.http.patch("/v1/nodes/n0", json={"cordoned": True}, headers=world.admin)
    assert got.status_code == 200, got.text
    serve = world.create("acme", "serve", 2, "prod", count=4)
    # n1 opens for one replica of 4; n0's replicas stay, cordoned
    assert serve["placedReplicas"] == 1
    assert len(serve["preemptions"]) == 4
    assert world.placed(batch) == 4
    with world.store.begin() as tx:
        nodes = {
            a.node
            for r in tx.workloads.replicas_of([d["id"] for d in serve["deployments"]]).values()
            for _, alloc in r
            for a in tx.reservations.held_atoms([alloc])[alloc]
        }
    assert nodes == {"n1"}


def reserve(world: World, tenant: str, count: int, preemptible: bool | None) -> dict[str, Any]:
    pool = world.http.get("/v1/pools", headers=world.admin).json()["items"][0]["id"]
    body: dict[str, Any] = {
        "tenantId": tenant,
        "poolId": pool,
        "devices": [{"class": "gpu", "count": count}],
        "duration": "4h",
    }
    if preemptible is not None:
        body["preemptible"] = preemptible
    return world.post("/v1/reservations", body)


def test_a_reservation_made_preemptible_is_ended_for_a_workload_and_any_other_never_is(world: World) -> None:
    kept = reserve(world, "globex", 4, None)
    assert kept["preemptible"] is False
    spare = reserve(world, "globex", 4, True)
    assert spare["preemptible"] is True
    world.clock.now = T0 + timedelta(hours=1)  # both have run an hour
    serve = world.create("acme", "serve", 2, "prod", count=4)
    # only the preemptible reservation's node opens: one replica placed, one waits
    assert serve["placedReplicas"] == 1
    (gone,) = serve["preemptions"]
    assert (gone["kind"], gone["allocationId"], gone["why"]) == ("reservation", spare["id"], "priority")
    ended = world.http.get(f"/v1/reservations/{spare['id']}", headers=world.admin).json()
    assert ended["status"] == "released" and ended["end"].startswith("2026-12-01T10:00")
    still = world.http.get(f"/v1/reservations/{kept['id']}", headers=world.admin).json()
    assert still["status"] == "active"
    (told,) = world.events("reservation.preempted")
    assert told["subject"] == spare["id"] and told["payload"]["preemptorId"] == serve["id"]
