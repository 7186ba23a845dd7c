"""A cluster's phase and a node's cordon through the real app, on SQLite and PostgreSQL: admin only,
round trips, refusals by name, a cordoned node's atoms kept off new bookings (and given back when the
cordon is lifted), and cordoned hours in capacity accounting."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from better_compute.domain.fleet.clusters import PHASES
from better_compute.storage.store import Store
from tests.api.test_capacity_accounting import Fleet, hours
from tests.api.test_reservations import World, error
from tests.builders import T0, at, stored_events

GPU = {"class": "gpu", "count": 1}


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


def patch_cluster(world: World, cluster: str, body: dict[str, Any], who: dict[str, str] | None = None) -> Any:
    return world.http.patch(f"/v1/clusters/{cluster}", json=body, headers=who or world.admin)


def patch_node(world: World, node: str, body: dict[str, Any], who: dict[str, str] | None = None) -> Any:
    return world.http.patch(f"/v1/nodes/{node}", json=body, headers=who or world.admin)


def nodes_of(reservation: Any) -> set[str]:
    return {a["node"] for a in reservation.json()["atoms"]}


def test_a_tenant_token_may_not_change_a_cluster_or_a_node(world: World, store: Store) -> None:
    for refused, action in (
        (patch_cluster(world, "c1", {"phase": "draining"}, world.acme), "clusters.update"),
        (patch_node(world, "ex-1", {"cordoned": True}, world.platform), "nodes.update"),
    ):
        assert refused.status_code == 403, refused.text
        assert error(refused)["code"] == "FORBIDDEN"
        assert error(refused)["details"] == {"action": action}
    assert world.http.get("/v1/clusters/c1", headers=world.acme).json()["phase"] == "active"
    assert stored_events(store, "cluster.updated") == []
    assert world.http.get("/v1/nodes", headers=world.admin).json()["items"][0]["cordoned"] is False


def test_a_phase_change_round_trips_and_is_logged_once(world: World, store: Store) -> None:
    got = world.http.get("/v1/clusters/c1", headers=world.acme)
    assert got.status_code == 200, got.text
    assert (got.json()["id"], got.json()["region"], got.json()["phase"]) == ("c1", "r1", "active")
    changed = patch_cluster(world, "c1", {"phase": "draining"})
    assert changed.status_code == 200, changed.text
    assert changed.json() == {**got.json(), "phase": "draining"}
    assert world.http.get("/v1/clusters/c1", headers=world.acme).json()["phase"] == "draining"
    listed = world.http.get("/v1/clusters", headers=world.admin).json()["items"]
    assert [c["phase"] for c in listed] == ["draining"]
    # The same phase again writes nothing; the path's id may be sent in the body too.
    assert patch_cluster(world, "c1", {"id": "c1", "phase": "draining"}).status_code == 200
    assert patch_cluster(world, "c1", {"phase": "cordoned"}).json()["phase"] == "cordoned"
    logged = stored_events(store, "cluster.updated")
    assert [(e["subject"], e["payload"]) for e in logged] == [
        ("c1", {"phase": "draining", "previous": "active"}),
        ("c1", {"phase": "cordoned", "previous": "draining"}),
    ]


@pytest.mark.parametrize("phase", ["paused", "Active", "", 3, None])
def test_a_phase_there_is_not_is_invalid_input_listing_the_phases(world: World, phase: object) -> None:
    r = patch_cluster(world, "c1", {"phase": phase})
    assert r.status_code == 400, r.text
    err = error(r)
    assert err["code"] == "INVALID_INPUT"
    if isinstance(phase, str):  # others are the wire model's refusal, naming the field all the same
        assert err["message"] == f"phase must be one of active, cordoned, draining, not {phase!r}"
        assert err["details"] == {"field": "phase", "allowed": list(PHASES)}
    else:
        assert "phase" in err["message"]


def test_unknown_clusters_and_nodes_are_not_found(world: World) -> None:
    for r, message in (
        (world.http.get("/v1/clusters/c9", headers=world.acme), "cluster c9 not found"),
        (patch_cluster(world, "c9", {"phase": "cordoned"}), "cluster c9 not found"),
        (patch_node(world, "ex-9", {"cordoned": True}), "node ex-9 not found"),
    ):
        assert r.status_code == 404, r.text
        assert (error(r)["code"], error(r)["message"]) == ("NOT_FOUND", message)


def test_a_cordon_must_be_a_boolean(world: World) -> None:
    for body in ({"cordoned": "yes"}, {"cordoned": 1}, {}, {"cordoned": True, "drain": True}):
        r = patch_node(world, "ex-1", body)
        assert r.status_code == 400, (body, r.text)
        assert error(r)["code"] == "INVALID_INPUT"


def test_cordoning_a_node_round_trips_and_logs_each_change(world: World, store: Store) -> None:
    r = patch_node(world, "ex-1", {"cordoned": True})
    assert r.status_code == 200, r.text
    assert (r.json()["id"], r.json()["clusterId"], r.json()["poolId"], r.json()["cordoned"]) == (
        "ex-1",
        "c1",
        "a100",
        True,
    )
    assert patch_node(world, "ex-1", {"node": "ex-1", "cordoned": True}).json()["cordoned"] is True
    listed = world.http.get("/v1/nodes", params={"cluster": "c1"}, headers=world.admin).json()["items"]
    assert {n["id"]: n["cordoned"] for n in listed}["ex-1"] is True
    assert patch_node(world, "ex-1", {"cordoned": False}).json()["cordoned"] is False
    logged = [(e["type"], e["subject"]) for e in stored_events(store) if str(e["type"]).endswith("cordoned")]
    assert logged == [("node.cordoned", "ex-1"), ("node.uncordoned", "ex-1")]


def test_a_cordoned_nodes_free_gpus_are_not_chosen_until_the_cordon_is_lifted(world: World) -> None:
    # Held before the cordon: it stays.
    kept = world.reserve(world.platform, "a100", [GPU])
    assert kept.status_code == 201, kept.text
    (cordoned,) = nodes_of(kept)
    other = ({"ex-1", "ex-2"} - {cordoned}).pop()
    assert patch_node(world, cordoned, {"cordoned": True}).status_code == 200
    # The cordoned node has a free GPU; the first two go to the other node all the same.
    two = world.reserve(world.platform, "a100", [{"class": "gpu", "count": 2}])
    assert two.status_code == 201, two.text
    assert nodes_of(two) == {other}
    busy = error(world.reserve(world.platform, "a100", [GPU]))
    assert (busy["code"], busy["details"]["reason"]) == ("INSUFFICIENT_CAPACITY", "all_busy")
    assert busy["message"].startswith(
        "devices[0]: 1 gpu atom wanted, 0 free in the pool for that window (2 more matching atoms are on"
        " cordoned nodes); the earliest start"
    )
    assert busy["details"]["cordoned"] == 2
    # Asking for more than the nodes that take bookings have: waiting will not help.
    never = error(world.reserve(world.platform, "a100", [{"class": "gpu", "count": 3}]))
    assert never["details"]["reason"] == "not_in_pool"
    assert never["message"] == (
        "devices[0]: 3 gpu atoms wanted, pool a100 has 2 on nodes that take new bookings and 2 more on"
        " cordoned nodes"
    )
    assert (never["details"]["inPool"], never["details"]["cordoned"]) == (2, 2)
    assert world.http.get(f"/v1/reservations/{kept.json()['id']}", headers=world.platform).json()[
        "status"
    ] == ("active")
    # Lifted: the node's free GPU is bookable again.
    assert patch_node(world, cordoned, {"cordoned": False}).status_code == 200
    again = world.reserve(world.platform, "a100", [GPU])
    assert again.status_code == 201, again.text
    assert nodes_of(again) == {cordoned}


def test_a_pool_whose_every_node_is_cordoned_says_so(world: World) -> None:
    for node in ("ex-1", "ex-2"):
        assert patch_node(world, node, {"cordoned": True}).status_code == 200
    err = error(world.reserve(world.platform, "a100", [GPU]))
    assert (err["code"], err["details"]["reason"]) == ("INSUFFICIENT_CAPACITY", "not_in_pool")
    assert err["message"] == (
        "devices[0]: 1 gpu atom wanted, pool a100 has 0 on nodes that take new bookings and 4 more on"
        " cordoned nodes"
    )


def test_a_cordoned_nodes_unbooked_hours_are_cordoned_in_accounting(store: Store) -> None:
    fleet = Fleet(store)
    fleet.reserve("h100", {"class": "gpu.mig", "count": 1, "selector": _three_g()}, duration="3h")
    fleet.clock.now = at(1)
    r = fleet.http.patch("/v1/nodes/m", json={"cordoned": True}, headers=fleet.admin)
    assert r.status_code == 200, r.text
    fleet.clock.now = at(2)
    assert fleet.http.patch("/v1/nodes/m", json={"cordoned": False}, headers=fleet.admin).status_code == 200
    three_g = Fraction(3, 7)
    assert fleet.hours("h100", T0, at(3)) == [
        hours(booked=three_g, free=1 - three_g),
        hours(booked=three_g, cordoned=1 - three_g),
        hours(booked=three_g, free=1 - three_g),
    ]
    answer = fleet.get(
        "accounting", poolId="h100", **{"from": "2026-12-01T10:00:00Z", "to": "2026-12-01T11:00:00Z"}
    )
    assert answer.json()["total"]["cordoned"] == "0.571429"


def _three_g() -> dict[str, Any]:
    return {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]}


SLURM = {"controller": "slurmctld.example:6817", "partitions": ["gpu"], "account": "bc-holds"}


def test_a_slurm_cluster_is_created_with_its_settings_and_logged(world: World, store: Store) -> None:
    body = {"id": "s1", "region": "r1", "kind": "slurm", "slurm": {**SLURM, "accounts": {"ml": "acme"}}}
    made = world.http.post("/v1/clusters", json=body, headers=world.admin)
    assert made.status_code == 201, made.text
    got = world.http.get("/v1/clusters/s1", headers=world.admin).json()
    assert got == made.json()
    assert (got["kind"], got["phase"], got["region"]) == ("slurm", "active", "r1")
    assert got["slurm"] == {**SLURM, "access": "commands", "accounts": {"ml": "acme"}}
    assert world.http.get("/v1/clusters/c1", headers=world.admin).json()["kind"] == "local"
    logged = stored_events(store, "cluster.created")
    assert [(e["subject"], e["payload"]) for e in logged] == [("s1", {"kind": "slurm", "region": "r1"})]
    again = world.http.post("/v1/clusters", json=body, headers=world.admin)
    assert again.status_code == 409 and error(again)["details"]["reason"] == "already_exists"
    local = world.http.post("/v1/clusters", json={"id": "l2", "region": "r2"}, headers=world.admin)
    assert local.status_code == 201 and (local.json()["kind"], local.json()["slurm"]) == ("local", None)


def test_every_tenant_can_read_each_slurm_clusters_settings_no_more(world: World) -> None:
    """A Slurm cluster's controller and its map of accounts to tenants are for admins: a tenant sees
    the cluster and its kind, by id and in the list."""
    body = {"id": "s1", "region": "r1", "kind": "slurm", "slurm": {**SLURM, "accounts": {"ml": "acme"}}}
    assert world.http.post("/v1/clusters", json=body, headers=world.admin).status_code == 201
    one = world.http.get("/v1/clusters/s1", headers=world.acme).json()
    listed = {c["id"]: c for c in world.http.get("/v1/clusters", headers=world.acme).json()["items"]}
    for seen in (one, listed["s1"]):
        assert (seen["kind"], seen.get("slurm")) == ("slurm", None)
    admin = {c["id"]: c for c in world.http.get("/v1/clusters", headers=world.admin).json()["items"]}
    assert admin["s1"]["slurm"]["accounts"] == {"ml": "acme"}


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        ({"kind": "slurm"}, "slurm", None),
        ({"kind": "batch"}, "kind", None),
        ({"kind": "local", "slurm": SLURM}, "slurm", None),
        ({"kind": "slurm", "slurm": {**SLURM, "access": "rest"}}, "slurm.access", "not_supported"),
        ({"kind": "slurm", "slurm": {**SLURM, "partitions": []}}, "slurm.partitions", None),
        ({"kind": "slurm", "slurm": {**SLURM, "partitions": ["a b"]}}, "slurm.partitions[0]", None),
        ({"kind": "slurm", "slurm": {**SLURM, "account": "x=y"}}, "slurm.account", None),
        ({"kind": "slurm", "slurm": {**SLURM, "controller": "-bad"}}, "slurm.controller", None),
        ({"kind": "slurm", "slurm": {**SLURM, "accounts": {"bc-holds": "acme"}}}, "slurm.accounts", None),
        ({"kind": "slurm", "slurm": {**SLURM, "account": "BC-Holds"}}, "slurm.account", None),
        ({"kind": "slurm", "slurm": {**SLURM, "accounts": {"ML": "acme"}}}, "slurm.accounts", None),
        ({"kind": "slurm", "slurm": {**SLURM, "accounts": {"ml": "nobody"}}}, "slurm.accounts.ml", None),
    ],
)
def test_a_bad_cluster_is_invalid_input_naming_the_field(
    world: World, body: dict[str, Any], field: str, reason: str | None
) -> None:
    r = world.http.post("/v1/clusters", json={"id": "s2", "region": "r1", **body}, headers=world.admin)
    assert r.status_code == 400, r.text
    assert error(r)["code"] == "INVALID_INPUT"
    assert error(r)["details"]["field"] == field
    assert error(r)["details"].get("reason") == reason
    assert world.http.get("/v1/clusters/s2", headers=world.admin).status_code == 404


def test_a_tenant_token_may_not_create_a_cluster(world: World) -> None:
    r = world.http.post("/v1/clusters", json={"id": "s3", "region": "r1"}, headers=world.acme)
    assert r.status_code == 403 and error(r)["details"] == {"action": "clusters.create"}
