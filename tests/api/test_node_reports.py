"""Joining and signed node reports through the real app, on SQLite and PostgreSQL: a join token works
once; only reports signed by the node's registered key, fresh, with a new sequence number and about
the node itself are taken; inventory reports change atoms; binding reports show on reservations."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from better_compute.bcd.fake import FakeNode
from better_compute.client import ForbiddenError, UnauthenticatedError
from better_compute.domain.fleet.inventory import GpuReport
from better_compute.service.fleet import joining
from better_compute.storage.store import Store
from tests.builders import stored_events
from tests.node_world import NodeWorld


@pytest.fixture
def world(store: Store, tmp_path: Path) -> NodeWorld:
    return NodeWorld(store, tmp_path)


def gpu_wire(g: GpuReport, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "uuid": g.uuid,
        "product": g.product,
        "memoryMiB": g.memory_mib,
        "index": g.index,
        "numaNode": g.numa_node,
        "nvlinkPeers": list(g.nvlink_peers),
        "healthy": g.healthy,
        "migMode": {"current": g.mig_mode_current, "pending": g.mig_mode_pending},
        "migInstances": [
            {
                "profile": i.profile,
                "giId": i.gi_id,
                "ciId": i.ci_id,
                "placementStart": i.placement_start,
                "placementSize": i.placement_size,
                "uuid": i.uuid,
            }
            for i in g.mig_instances
        ],
    }
    body.update(changes)
    return body


def inventory(node: str, *, healthy_first: bool = True) -> dict[str, Any]:
    fake = FakeNode.build(node, "H100-80GB", 2)
    fake.apply_layout("all-1g.10gb")
    gpus = [gpu_wire(g) for g in fake.report().gpus]
    gpus[0]["healthy"] = healthy_first
    return {"kind": "Inventory", "gpus": gpus}


def refusal(error: UnauthenticatedError) -> str:
    return str(error.details["reason"])


def test_a_join_token_works_once_and_a_new_join_replaces_the_key(world: NodeWorld) -> None:
    token = world.join_token("n-1")
    body = {"node": "n-1", "token": token, "publicKey": "A" * 43 + "="}
    first = world.http.post("/v1/nodes/n-1/join", json=body)
    assert first.status_code == 200, first.text
    again = world.http.post("/v1/nodes/n-1/join", json=body)
    assert again.status_code == 401 and again.json()["error"]["details"]["reason"] == "join_token"
    # A node that joins again (with a new token) gets its new key registered; the old one stops.
    old = world.join("n-1")
    new = world.join("n-1")
    with pytest.raises(UnauthenticatedError) as refused:
        world.node(old).nodes.report("n-1", {"kind": "ObservedGeneration", "generation": 0})
    assert refusal(refused.value) == "signature"
    # (The two identities share n-1's state directory, so the refused report used number 1.)
    assert world.node(new).nodes.report("n-1", {"kind": "ObservedGeneration", "generation": 0}).sequence == 2
    joined = [e["payload"]["replaced"] for e in stored_events(world.store, "node.joined")]
    assert joined == [False, True, True]


def test_an_expired_or_foreign_join_token_is_refused(world: NodeWorld) -> None:
    token = world.join_token("n-1", ttlSeconds=60)
    world.clock.now += timedelta(seconds=61)
    late = world.http.post(
        "/v1/nodes/n-1/join", json={"node": "n-1", "token": token, "publicKey": "A" * 43 + "="}
    )
    assert late.status_code == 401 and late.json()["error"]["code"] == "UNAUTHENTICATED"
    other = world.join_token("n-2")
    foreign = world.http.post(
        "/v1/nodes/n-1/join", json={"node": "n-1", "token": other, "publicKey": "A" * 43 + "="}
    )
    assert foreign.status_code == 401
    tenant = world.http.post("/v1/nodes/n-1/join-tokens", json={"node": "n-1"}, headers=world.platform)
    assert tenant.status_code == 403
    nowhere = world.http.post("/v1/nodes/nope/join-tokens", json={"node": "nope"}, headers=world.admin)
    assert nowhere.status_code == 404
    bad_key = world.http.post(
        "/v1/nodes/n-2/join", json={"node": "n-2", "token": other, "publicKey": "not a key"}
    )
    assert bad_key.status_code == 400 and bad_key.json()["error"]["details"]["field"] == "publicKey"


def test_a_join_token_raced_by_many_joins_admits_one(world: NodeWorld) -> None:
    token = world.join_token("n-1")
    results: list[str] = []
    barrier = threading.Barrier(6)

    def attempt(n: int) -> None:
        barrier.wait()
        try:
            joining.join(world.store, "n-1", token, "B" * 42 + f"{n}=", world.clock.now)
            results.append("joined")
        except Exception as exc:  # the losers' refusal
            results.append(type(exc).__name__)

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["Unauthenticated"] * 5 + ["joined"]
    assert len(stored_events(world.store, "node.joined")) == 1


def test_a_signed_inventory_report_changes_the_atoms(world: NodeWorld) -> None:
    node = world.node(world.join("n-1"))
    before = world.http.get("/v1/atoms", params={"bookable": "true"}, headers=world.admin).json()["items"]
    accepted = node.nodes.report("n-1", inventory("n-1", healthy_first=False))
    assert (accepted.kind, accepted.sequence) == ("Inventory", 1)
    after = world.http.get("/v1/atoms", params={"bookable": "true"}, headers=world.admin).json()["items"]
    sick = next(
        g
        for g in world.http.get("/v1/gpus", params={"node": "n-1"}, headers=world.admin).json()["items"]
        if g["index"] == 0
    )
    assert not sick["healthy"]
    assert {a["id"] for a in after} < {a["id"] for a in before}
    assert all(a["gpuId"] != sick["id"] for a in after)


def test_forged_replayed_stale_unsigned_and_cross_node_reports_are_unauthenticated(world: NodeWorld) -> None:
    one, two = world.join("n-1"), world.join("n-2")
    report = {"kind": "ObservedGeneration", "generation": 0}
    # Signed with n-2's key while claiming to be n-1: the signature does not verify under n-1's key.
    forged = world.node(two)
    forged.nodes._compute._http.auth.identity.node = "n-1"  # type: ignore[union-attr]
    with pytest.raises(UnauthenticatedError) as e:
        forged.nodes.report("n-1", report)
    assert refusal(e.value) == "signature"
    # Stale: signed six minutes off the server's clock, either way.
    for skew in (-360.0, 360.0):
        with pytest.raises(UnauthenticatedError) as e:
            world.node(one, skew=skew).nodes.report("n-1", report)
        assert refusal(e.value) == "stale"
    # Replayed: the same signed bytes sent again.
    sent: list[Any] = []
    client = world.node(one)
    client.nodes._compute._http.event_hooks["request"].append(sent.append)  # type: ignore[union-attr]
    client.nodes.report("n-1", report)
    replay = sent[-1]
    again = world.http.post(
        replay.url.raw_path.decode(), content=replay.content, headers=dict(replay.headers)
    )
    assert again.status_code == 401 and again.json()["error"]["details"]["reason"] == "replayed"
    # Cross-node: n-1 signs a report about n-2.
    with pytest.raises(UnauthenticatedError) as e:
        world.node(one).nodes.report("n-2", report)
    assert refusal(e.value) == "other_node"
    # Unsigned.
    bare = world.http.post("/v1/nodes/n-1/reports", json={"node": "n-1", "report": report})
    assert bare.status_code == 401 and bare.json()["error"]["details"]["reason"] == "unsigned"
    reasons = sorted(e["payload"]["reason"] for e in stored_events(world.store, "node.report.refused"))
    assert reasons == ["other_node", "replayed", "signature", "stale", "stale"]


def test_reports_racing_with_one_sequence_number_take_effect_once(world: NodeWorld) -> None:
    identity = world.join("n-1")
    sent: list[Any] = []
    client = world.node(identity)
    client.nodes._compute._http.event_hooks["request"].append(sent.append)  # type: ignore[union-attr]
    rid = world.reserve([{"class": "gpu.mig", "count": 1}])["id"]
    mine = "n-1" in {
        a["node"] for a in world.http.get(f"/v1/reservations/{rid}", headers=world.platform).json()["atoms"]
    }
    node = "n-1" if mine else "n-2"
    if not mine:
        identity = world.join("n-2")
        client = world.node(identity)
        sent.clear()
        client.nodes._compute._http.event_hooks["request"].append(sent.append)  # type: ignore[union-attr]
    client.nodes.report(node, {"kind": "AllocationBound", "allocationId": rid, "binding": "bound"})
    signed = sent[-1]
    # Reset the sequence so the same signed request is new to the server, then send it six times at once.
    with world.store.engine.begin() as conn:
        from sqlalchemy import update

        from better_compute.storage.kernel.tables import nodes

        conn.execute(update(nodes).where(nodes.c.id == node).values(report_sequence=0))
    codes: list[int] = []
    barrier = threading.Barrier(6)

    def send() -> None:
        barrier.wait()
        r = world.http.post(
            signed.url.raw_path.decode(), content=signed.content, headers=dict(signed.headers)
        )
        codes.append(r.status_code)

    threads = [threading.Thread(target=send) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [200] + [401] * 5
    assert len(stored_events(world.store, "allocation.bound")) == 2  # the first send and one of the six


def test_binding_reports_show_on_the_reservation(world: NodeWorld) -> None:
    one, two = world.join("n-1"), world.join("n-2")
    rid = world.reserve([{"class": "gpu.mig", "count": 1}])["id"]
    shown = world.http.get(f"/v1/reservations/{rid}", headers=world.platform).json()
    assert shown["binding"] == "pending"
    node = shown["atoms"][0]["node"]
    holder, other = (one, two) if node == "n-1" else (two, one)
    with pytest.raises(ForbiddenError):
        world.node(other).nodes.report(
            other.node, {"kind": "AllocationBound", "allocationId": rid, "binding": "bound"}
        )
    client = world.node(holder)
    client.nodes.report(node, {"kind": "AllocationBound", "allocationId": rid, "binding": "device-missing"})
    assert (
        world.http.get(f"/v1/reservations/{rid}", headers=world.platform).json()["binding"]
        == "device-missing"
    )
    client.nodes.report(node, {"kind": "AllocationBound", "allocationId": rid, "binding": "bound"})
    listed = world.http.get("/v1/reservations", headers=world.platform).json()["items"]
    assert [r["binding"] for r in listed if r["id"] == rid] == ["bound"]
    world.http.post(f"/v1/reservations/{rid}/release", json={"id": rid}, headers=world.platform)
    client.nodes.report(node, {"kind": "AllocationReleased", "allocationId": rid})
    assert world.http.get(f"/v1/reservations/{rid}", headers=world.platform).json()["binding"] == "released"
    # The tenant reads its reservation's binding events; they name the node.
    events = world.http.get("/v1/events", params={"type": "allocation.bound"}, headers=world.platform).json()
    assert [e["payload"]["binding"] for e in events["items"]] == ["device-missing", "bound"]


def test_observed_generation_and_scrub_reports(world: NodeWorld) -> None:
    client = world.node(world.join("n-1"))
    spec = client.nodes.spec("n-1")
    client.nodes.report("n-1", {"kind": "ObservedGeneration", "generation": spec.generation})
    listed = world.http.get("/v1/nodes", headers=world.admin).json()["items"]
    assert [n["observedGeneration"] for n in listed if n["id"] == "n-1"] == [spec.generation]
    with pytest.raises(Exception) as never:
        client.nodes.report("n-1", {"kind": "ObservedGeneration", "generation": spec.generation + 5})
    assert getattr(never.value, "code", None) == "INVALID_INPUT"
    atoms = [
        a["id"]
        for a in world.http.get("/v1/atoms", params={"pool": "p1"}, headers=world.admin).json()["items"]
        if a["node"] == "n-1"
    ]
    client.nodes.report("n-1", {"kind": "ScrubDone", "atoms": atoms[:2]})
    with pytest.raises(ForbiddenError):
        client.nodes.report("n-1", {"kind": "ScrubDone", "atoms": ["atm-elsewhere"]})
    assert [e["payload"]["atoms"] for e in stored_events(world.store, "node.scrubbed")] == [sorted(atoms[:2])]


def test_what_bcd_inventory_prints_is_a_report_the_server_takes_as_it_is(world: NodeWorld) -> None:
    from better_compute.bcd.fake import FakeNode
    from better_compute.bcd.inventory import report_json

    fake = FakeNode.build("n-1", "H100-80GB", 2)
    fake.apply_layout("all-1g.10gb")
    body = report_json(fake.report())
    node = world.node(world.join("n-1"))
    accepted = node.nodes.report(body["node"], body["report"])
    assert (accepted.kind, accepted.sequence) == ("Inventory", 1)


def test_a_resent_report_id_is_answered_as_accepted_and_applied_once(world: NodeWorld) -> None:
    one, two = world.join("n-1"), world.join("n-2")
    rid = world.reserve([{"class": "gpu.mig", "count": 1}])["id"]
    node = world.http.get(f"/v1/reservations/{rid}", headers=world.platform).json()["atoms"][0]["node"]
    holder = one if node == "n-1" else two
    client = world.node(holder)
    bound = {"kind": "AllocationBound", "allocationId": rid, "binding": "bound"}
    first = client.nodes.report(node, bound, report_id="r-1")
    again = client.nodes.report(node, bound, report_id="r-1")
    assert (first.duplicate, again.duplicate) == (False, True)
    assert again.sequence > first.sequence
    events = world.http.get("/v1/events", params={"type": "allocation.bound"}, headers=world.platform).json()
    assert [e["payload"]["binding"] for e in events["items"]] == ["bound"]
    assert not client.nodes.report(node, bound, report_id="r-2").duplicate
