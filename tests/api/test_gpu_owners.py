"""A GPU belongs to one node, through the real app on SQLite and PostgreSQL: a node whose signed
inventory names another node's GPU uuid, or the `MIG-…` uuid of another node's MIG instance, is
refused (CONFLICT, `GpuOwnedElsewhere`) and changes nothing, however it reports after; the refusal
is logged and shown by `doctor`. A GPU moves once its node reported it gone, or once an admin
released it (`nodes.releaseGpu`), which is refused while a tenant's booking holds it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from better_compute.bcd.fake import FakeNode
from better_compute.client import Compute, ConflictError
from better_compute.storage.store import Store
from tests.api.test_node_reports import gpu_wire, inventory
from tests.builders import stored_events
from tests.node_world import NodeWorld


@pytest.fixture
def world(store: Store, tmp_path: Path) -> NodeWorld:
    return NodeWorld(store, tmp_path)


def wire_gpus(node: str) -> list[dict[str, Any]]:
    """`node`'s GPUs as its `bcd` reports them (the fleet's layout, so the same atoms as stored)."""
    fake = FakeNode.build(node, "H100-80GB", 2)
    fake.apply_layout("all-1g.10gb")
    return [gpu_wire(g) for g in fake.report().gpus]


def taking(thief: str, victim: str, gpu: str) -> dict[str, Any]:
    """`thief`'s inventory with `victim`'s GPU `gpu` added as its third GPU."""
    stolen = next(g for g in wire_gpus(victim) if g["uuid"] == gpu)
    return {"kind": "Inventory", "gpus": [*wire_gpus(thief), {**stolen, "index": 2}]}


def booked(world: NodeWorld) -> tuple[str, str, str, str]:
    """A tenant's live booking of one MIG instance: (reservation, its node, its GPU, the other node)."""
    rid = str(world.reserve([{"class": "gpu.mig", "count": 1}])["id"])
    atom = world.http.get(f"/v1/reservations/{rid}", headers=world.platform).json()["atoms"][0]
    other = "n-2" if atom["node"] == "n-1" else "n-1"
    return rid, atom["node"], atom["gpuId"], other


def fleet_rows(world: NodeWorld) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every GPU and every atom as the admin lists them."""

    def listed(path: str) -> list[dict[str, Any]]:
        return list(world.http.get(path, params={"limit": 1000}, headers=world.admin).json()["items"])

    return listed("/v1/gpus"), listed("/v1/atoms")


def assignments(world: NodeWorld, node: str) -> list[str]:
    spec = world.http.get(f"/v1/nodes/{node}/spec", headers=world.admin).json()
    return [a["allocationId"] for a in spec["assignments"]]


def refused_claims(world: NodeWorld) -> list[dict[str, Any]]:
    return [
        e
        for e in stored_events(world.store, "node.report.refused")
        if e["payload"]["reason"] == "GpuOwnedElsewhere"
    ]


def joined(world: NodeWorld, node: str) -> Compute:
    return world.node(world.join(node))


def test_a_node_cannot_take_another_nodes_gpu(world: NodeWorld) -> None:
    rid, victim, gpu, thief = booked(world)
    client = joined(world, thief)
    before = fleet_rows(world)
    changes = len(stored_events(world.store, "node.inventory.changed"))
    with pytest.raises(ConflictError) as refused:
        client.nodes.report(thief, taking(thief, victim, gpu))
    assert refused.value.reason == "GpuOwnedElsewhere"
    assert refused.value.details["uuids"] == [gpu]
    # Nothing changed: the GPU, its atoms and the tenant's booking stay with the victim and its pool.
    assert fleet_rows(world) == before
    atom = world.http.get(f"/v1/reservations/{rid}", headers=world.platform).json()["atoms"][0]
    assert (atom["node"], atom["gpuId"]) == (victim, gpu)
    assert assignments(world, victim) == [rid] and assignments(world, thief) == []
    # The refusal took no sequence number, and is logged for the admin with who holds the GPU.
    with world.store.read() as tx:
        assert tx.nodes.by_ids([thief])[thief].report_sequence == 0
    (event,) = refused_claims(world)
    assert event["subject"] == thief and event["payload"]["owners"] == {gpu: victim}
    assert len(stored_events(world.store, "node.inventory.changed")) == changes


def test_a_node_cannot_take_another_nodes_mig_instance(world: NodeWorld) -> None:
    rid, victim, gpu, thief = booked(world)
    client = joined(world, thief)
    theirs = next(g for g in wire_gpus(victim) if g["uuid"] == gpu)["migInstances"][0]["uuid"]
    mine = wire_gpus(thief)
    mine[0]["migInstances"][0]["uuid"] = theirs
    before = fleet_rows(world)
    with pytest.raises(ConflictError) as refused:
        client.nodes.report(thief, {"kind": "Inventory", "gpus": mine})
    assert refused.value.reason == "GpuOwnedElsewhere" and refused.value.details["uuids"] == [theirs]
    assert fleet_rows(world) == before
    assert assignments(world, victim) == [rid]


def test_reporting_again_without_a_gpu_it_tried_to_take_does_not_block_its_node(world: NodeWorld) -> None:
    rid, victim, gpu, thief = booked(world)
    client = joined(world, thief)
    with contextlib.suppress(ConflictError):  # (refused: test_a_node_cannot_take_another_nodes_gpu)
        client.nodes.report(thief, taking(thief, victim, gpu))
    # The thief reports its own GPUs only: the victim's GPU is still present, on the victim, bookable.
    client.nodes.report(thief, inventory(thief))
    gpus = world.http.get("/v1/gpus", params={"node": victim}, headers=world.admin).json()["items"]
    assert [g["present"] for g in gpus if g["id"] == gpu] == [True]
    atoms = world.http.get("/v1/atoms", params={"pool": "p1", "limit": 1000}, headers=world.admin).json()
    on_gpu = [a for a in atoms["items"] if a["gpuId"] == gpu]
    assert on_gpu and all(a["node"] == victim for a in on_gpu)
    assert sum(a["bookable"] for a in on_gpu) == 7  # its seven 1g.10gb instances, one of them booked
    assert assignments(world, victim) == [rid]
    # Another tenant request is served from the victim's GPU as before.
    assert world.reserve([{"class": "gpu.mig", "count": 7}])


def doctor_says(world: NodeWorld) -> list[dict[str, Any]]:
    found = world.http.get("/v1/doctor", headers=world.admin).json()["findings"]
    return [f for f in found if f["code"] == "node.gpu-owned-elsewhere"]


def test_doctor_shows_a_node_that_named_another_nodes_gpu_until_an_inventory_of_it_is_taken(
    world: NodeWorld,
) -> None:
    _, victim, gpu, thief = booked(world)
    client = joined(world, thief)
    with pytest.raises(ConflictError):
        client.nodes.report(thief, taking(thief, victim, gpu))
    (finding,) = doctor_says(world)
    assert finding["subject"] == thief and f"{gpu} (held by node {victim})" in finding["detail"]
    assert "release-gpu" in finding["action"]
    client.nodes.report(thief, inventory(thief))
    assert doctor_says(world) == []


def test_a_gpu_that_moved_is_released_by_an_admin_and_taken_by_the_node_that_reports_it(
    world: NodeWorld,
) -> None:
    rid, old, gpu, new = booked(world)
    client = joined(world, new)
    with pytest.raises(ConflictError):
        client.nodes.report(new, taking(new, old, gpu))
    # Not while a tenant's booking holds it, and only by the admin.
    held = world.http.post(f"/v1/gpus/{gpu}/release", json={}, headers=world.admin)
    assert held.status_code == 409 and held.json()["error"]["code"] == "INVALID_STATE"
    assert held.json()["error"]["details"]["allocationIds"] == [rid]
    tenant = world.http.post(f"/v1/gpus/{gpu}/release", json={}, headers=world.platform)
    assert tenant.status_code == 403
    world.http.post(f"/v1/reservations/{rid}/release", json={"id": rid}, headers=world.platform)
    released = world.http.post(f"/v1/gpus/{gpu}/release", json={"gpu": gpu}, headers=world.admin)
    assert released.status_code == 200, released.text
    assert (released.json()["node"], released.json()["present"]) == (old, False)
    # The node it moved to reports it again (bcd restarted there): it is its now, in its pool.
    client.nodes.report(new, taking(new, old, gpu))
    gpus = world.http.get("/v1/gpus", params={"node": new}, headers=world.admin).json()["items"]
    assert [g["present"] for g in gpus if g["id"] == gpu] == [True]
    atoms = world.http.get("/v1/atoms", params={"limit": 1000}, headers=world.admin).json()["items"]
    assert {(a["node"], a["poolId"]) for a in atoms if a["gpuId"] == gpu} == {(new, "p1")}
    assert doctor_says(world) == []
    # Its old node naming it again is refused now.
    with pytest.raises(ConflictError) as refused:
        joined(world, old).nodes.report(old, inventory(old))
    assert refused.value.details["uuids"] == [gpu]
    audited = world.http.get("/v1/events", params={"type": "gpu.released"}, headers=world.admin).json()
    assert [(e["subject"], e["payload"]["node"]) for e in audited["items"]] == [(gpu, old)]
