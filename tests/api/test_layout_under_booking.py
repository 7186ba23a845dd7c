"""A node whose GPUs report a layout other than its pool's (one that joined, was re-imaged or
restarted at another), through the real app with a `bcd` loop over the fake backend, on SQLite and
PostgreSQL: its GPUs take no work until they are at the pool's layout, a GPU a booking holds is not
repartitioned under it, and admission counts every booking of a GPU's family (docs/concepts.md#the-atom-rule,
#changing-a-pools-layout-the-gate, #atoms)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from better_compute.bcd.fake import FakeNode
from better_compute.domain.kernel.timewin import Window
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import inventory
from better_compute.storage.kernel.tables import atoms
from better_compute.storage.store import Store
from tests.builders import T0, admin_token, api_client, at, bearer, fleet_spec, tenant_token
from tests.node_world import NodeWorld

TOMORROW = T0 + timedelta(days=1)


@pytest.fixture
def world(store: Store, tmp_path: Path) -> NodeWorld:
    return NodeWorld(store, tmp_path, mode="mig", layout="all-1g.10gb")


def node_atoms(world: NodeWorld, node: str) -> list[dict[str, Any]]:
    found = world.http.get("/v1/atoms", params={"limit": 500}, headers=world.admin).json()["items"]
    return [a for a in found if a["node"] == node]


def ask(world: NodeWorld, devices: list[dict[str, Any]], start: Any = TOMORROW, duration: str = "4h") -> Any:
    body = {"poolId": "p1", "devices": devices, "start": start.isoformat(), "duration": duration}
    return world.http.post("/v1/reservations", json=body, headers=world.platform)


def doctor_codes(world: NodeWorld) -> list[tuple[str, str]]:
    answer = world.http.get("/v1/doctor", headers=world.admin)
    assert answer.status_code == 200, answer.text
    return [(f["code"], f["subject"]) for f in answer.json()["findings"] if f["code"].startswith("ledger.")]


def test_a_node_reporting_a_layout_other_than_its_pools_has_no_bookable_whole_gpus(world: NodeWorld) -> None:
    daemon, fake = world.daemon("n-1", layout="all-disabled")  # re-imaged: its GPUs whole
    assert daemon.flush()  # its first inventory, before it reads its spec
    present = [a for a in node_atoms(world, "n-1") if a["present"]]
    assert {(a["class"], a["bookable"], a["partitionPending"]) for a in present} == {("gpu", False, True)}
    # No tenant books a whole GPU the node is about to split, not even for later.
    refused = ask(world, [{"class": "gpu", "count": 1}])
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["details"]["reason"] == "not_in_pool"
    spec = daemon.compute.nodes.spec("n-1")
    assert [g.mig_layout for g in spec.gpus] == ["all-1g.10gb", "all-1g.10gb"]
    daemon.step(False)  # it converges the spec and reports what it has now
    assert all(g.mig_current for g in fake.list_gpus())
    present = [a for a in node_atoms(world, "n-1") if a["present"]]
    assert not any(a["partitionPending"] for a in present)
    assert sorted(a["class"] for a in present if a["bookable"]) == ["gpu.mig"] * 14
    made = ask(world, [{"class": "gpu.mig", "count": 28}])  # every instance of both nodes
    assert made.status_code == 201, made.text
    assert doctor_codes(world) == []


def test_a_future_booking_of_a_whole_gpu_is_never_cut_by_a_repartition(world: NodeWorld) -> None:
    daemon, fake = world.daemon("n-1", layout="all-disabled")
    assert daemon.flush()
    # The node's whole GPUs taken as bookable, as a ledger written before this rule could have them.
    with world.store.engine.begin() as conn:
        conn.execute(
            update(atoms)
            .where(atoms.c.node_id == "n-1", atoms.c["class"] == "gpu")
            .values(bookable=True, partition_pending=False)
        )
    made = ask(world, [{"class": "gpu", "count": 1}])
    assert made.status_code == 201, made.text
    rid, gpu = made.json()["id"], made.json()["atoms"][0]["gpuId"]
    # Tomorrow's booking holds that GPU: its node is not told to split it; the idle one is.
    spec = daemon.compute.nodes.spec("n-1")
    assert {g.uuid: g.mig_layout for g in spec.gpus} == {
        g.uuid: (None if g.uuid == gpu else "all-1g.10gb") for g in fake.list_gpus()
    }
    daemon.step(False)
    assert {g.uuid: g.mig_current for g in fake.list_gpus()} == {
        g.uuid: g.uuid != gpu for g in fake.list_gpus()
    }
    # Its parts are never booked over the window: it has none, and its whole atom is held.
    assert ask(world, [{"class": "gpu.mig", "count": 21}]).status_code == 201
    assert ask(world, [{"class": "gpu.mig", "count": 1}]).status_code == 409
    # The booking sits on an atom that is not bookable now: doctor and the reservation say so.
    assert doctor_codes(world) == [("ledger.stranded", rid)]
    shown = world.http.get(f"/v1/reservations/{rid}", headers=world.platform).json()
    assert shown["binding"] == "stranded"
    assert "partitionPending" in shown["bindingDetail"] and gpu in shown["bindingDetail"]
    # At its window the tenant gets its whole GPU; only after it is the GPU cut to the pool's layout.
    world.clock.now = TOMORROW + timedelta(hours=1)
    daemon.step(False)
    handed = {a.allocation_id: a.env for a in daemon.compute.nodes.spec("n-1").assignments}
    assert handed[rid] == {"NVIDIA_VISIBLE_DEVICES": gpu}
    assert not next(g for g in fake.list_gpus() if g.uuid == gpu).mig_current
    world.clock.now = TOMORROW + timedelta(hours=5)
    daemon.step(False)
    assert all(g.mig_current for g in fake.list_gpus())
    assert doctor_codes(world) == []


@pytest.fixture
def one_gpu(store: Store) -> Store:
    """Node `n` with one H100 at all-1g.10gb in mig pool p1; acme has quota for whole GPUs and parts."""
    load_fleet(store, fleet_spec(nodes=1, gpus=1, layout="all-1g.10gb"), T0)
    http = api_client(store)
    for cls in ("gpu", "gpu.mig"):
        body = {"tenantId": "acme", "poolId": "p1", "class": cls, "limit": 16}
        assert http.put("/v1/quotas", json=body, headers=bearer(admin_token(store))).status_code == 200
    return store


def reserve(store: Store, cls: str, count: int, start: Any, duration: str = "1h") -> Any:
    body = {"poolId": "p1", "devices": [{"class": cls, "count": count}], "start": start.isoformat()}
    return api_client(store).post(
        "/v1/reservations", json={**body, "duration": duration}, headers=bearer(tenant_token(store, "acme"))
    )


def test_admission_counts_a_booking_of_a_gpus_parent_though_the_parent_is_not_bookable(
    one_gpu: Store,
) -> None:
    with one_gpu.read() as tx:
        parent = next(a for a in tx.atoms.of_nodes(["n"]) if a.cls == "gpu")
    assert not parent.bookable  # the GPU is split: its parent is no one's to book now...
    with one_gpu.begin() as tx:  # ...but a booking made before it was (a ledger from before) holds it
        tx.ledger.book([parent.id], Window(at(1), at(3)), "rsv-whole", "beta", T0, require_bookable=False)
    refused = reserve(one_gpu, "gpu.mig", 1, at(2))
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["details"]["reason"] == "all_busy"
    assert refused.json()["error"]["details"]["earliestStart"] == at(3).isoformat()
    assert reserve(one_gpu, "gpu.mig", 7, at(3)).status_code == 201


def test_admission_counts_a_booking_of_a_part_gone_from_a_gpu_now_whole(store: Store) -> None:
    load_fleet(store, fleet_spec(nodes=1, gpus=1, layout="all-disabled"), T0)
    http = api_client(store)
    body = {"tenantId": "acme", "poolId": "p1", "class": "gpu", "limit": 4}
    assert http.put("/v1/quotas", json=body, headers=bearer(admin_token(store))).status_code == 200
    split = FakeNode.build("n", "H100-80GB", 1)
    split.apply_layout("all-3g.40gb")
    inventory.ingest(store, [split.report()], T0)  # split for a while (its pool tells it whole)
    with store.read() as tx:
        part = next(a for a in tx.atoms.of_nodes(["n"]) if a.cls == "gpu.mig")
    with store.begin() as tx:  # a part booked then, as a ledger from before this rule could hold it
        tx.ledger.book([part.id], Window(at(1), at(3)), "rsv-part", "beta", T0, require_bookable=False)
    inventory.ingest(store, [FakeNode.build("n", "H100-80GB", 1).report()], T0)  # whole again
    with store.read() as tx:
        found = {a.id: a for a in tx.atoms.of_nodes(["n"])}
    assert not found[part.id].present and next(a for a in found.values() if a.cls == "gpu").bookable
    refused = reserve(store, "gpu", 1, at(2))
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["details"]["earliestStart"] == at(3).isoformat()
    assert reserve(store, "gpu", 1, at(3)).status_code == 201


def test_an_extension_refused_for_a_part_of_its_gpu_says_when_the_family_is_free(store: Store) -> None:
    """A whole GPU's reservation extended over a booking of a part of that GPU is refused by the
    family fence; the refusal named the added time itself as when the atom is free (its own
    bookings were all it looked at), not when the part's booking ends."""
    load_fleet(store, fleet_spec(nodes=1, gpus=1, layout="all-disabled"), T0)
    http = api_client(store)
    body = {"tenantId": "acme", "poolId": "p1", "class": "gpu", "limit": 4}
    assert http.put("/v1/quotas", json=body, headers=bearer(admin_token(store))).status_code == 200
    made = reserve(store, "gpu", 1, at(1), duration="2h")
    assert made.status_code == 201, made.text
    split = FakeNode.build("n", "H100-80GB", 1)
    split.apply_layout("all-3g.40gb")
    inventory.ingest(store, [split.report()], T0)
    with store.read() as tx:
        part = next(a for a in tx.atoms.of_nodes(["n"]) if a.cls == "gpu.mig")
    with store.begin() as tx:  # a part booked after the whole one ends
        tx.ledger.book([part.id], Window(at(5), at(7)), "rsv-part", "beta", T0, require_bookable=False)
    rid = made.json()["id"]
    refused = http.post(
        f"/v1/reservations/{rid}/extend",
        json={"id": rid, "duration": "4h"},
        headers=bearer(tenant_token(store, "acme")),
    )
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["details"]["freeFrom"] == at(7).isoformat()


def test_mig_slice_restored_under_other_gi_ids_is_the_same_atom(world: NodeWorld) -> None:
    """Every 1g.10gb of n-1 is booked; the node reboots at all-3g.40gb (3g.40gb instances at the
    booked ones' GPU-instance ids), and its driver hands out GPU-instance ids in another order when
    the pool's layout is put back. The 3g.40gb are not the booked atoms (they hold nothing, so the
    node is told its pool's layout and restores it), and each restored slice is the very atom its
    booking names: handed to it, never free to another tenant."""
    daemon, fake = world.daemon("n-1")
    assert daemon.flush()
    daemon.step(False)
    before = {a["id"]: a["attributes"] for a in node_atoms(world, "n-1") if a["class"] == "gpu.mig"}
    assert len(before) == 14
    now = world.reserve([{"class": "gpu.mig", "count": 28}], duration="2d")["id"]  # every instance
    daemon.step(False)
    for gpu in fake.list_gpus():
        fake.gpu(gpu.uuid).apply_layout("all-3g.40gb")  # rebooted at another layout
        fake.gpu(gpu.uuid).gi_ids = [7, 6, 5, 4, 3, 2, 1]  # the driver's order when it creates again
    daemon.enqueue(daemon.inventory())
    assert daemon.flush()
    present = {a["id"] for a in node_atoms(world, "n-1") if a["present"] and a["class"] == "gpu.mig"}
    assert not present & set(before)  # a 3g.40gb at a 1g.10gb's ids is another atom
    spec = world.http.get("/v1/nodes/n-1/spec", headers=world.admin).json()
    assert [g["migLayout"] for g in spec["gpus"]] == ["all-1g.10gb", "all-1g.10gb"]
    daemon.step(False)  # it puts its pool's layout back, under other GPU-instance ids
    after = {
        a["id"]: a["attributes"] for a in node_atoms(world, "n-1") if a["present"] and a["class"] == "gpu.mig"
    }
    assert set(after) == set(before)
    assert any(after[a]["giId"] != before[a]["giId"] for a in after)
    spec = world.http.get("/v1/nodes/n-1/spec", headers=world.admin).json()
    [handed] = [a for a in spec["assignments"] if a["allocationId"] == now]
    assert set(handed["atoms"]) == set(before)
    assert set(handed["env"]["NVIDIA_VISIBLE_DEVICES"].split(",")) == {a["migUuid"] for a in after.values()}
    assert ask(world, [{"class": "gpu.mig", "count": 1}], start=T0).status_code == 409
    assert doctor_codes(world) == []


def test_layout_returns_around_a_booked_slice_it_keeps(world: NodeWorld) -> None:
    """Every 1g.10gb of n-1 is booked and handed over; the node reboots at
    `mixed:4g.40gb+3x1g.10gb`, which still has the booked slices at placements 4 to 6, their
    tenants' work running on them again. Putting the pool's layout back destroys only the 4g.40gb,
    so the node is told it (not held at the foreign layout, its booking stranded until it ends):
    it re-cuts each GPU around the booked slices, which keep their devices throughout, and every
    atom takes work again. Nothing is stranded."""
    daemon, fake = world.daemon("n-1")
    assert daemon.flush()
    daemon.step(False)
    rid = world.reserve([{"class": "gpu.mig", "count": 28}], duration="2d")["id"]  # every instance
    daemon.step(False)
    kept: dict[str, dict[int, str]] = {}
    for gpu in fake.list_gpus():
        fake.gpu(gpu.uuid).apply_layout("mixed:4g.40gb+3x1g.10gb")  # rebooted at another layout
        for gi in fake.gpu(gpu.uuid).read().instances:
            if gi.profile == "1g.10gb":
                fake.mark_busy(gpu.uuid, gi.gi_id)  # its tenant's work runs on it again
        kept[gpu.uuid] = {
            gi.placement_start: gi.compute_instances[0].uuid
            for gi in fake.gpu(gpu.uuid).read().instances
            if gi.profile == "1g.10gb"
        }
    daemon.enqueue(daemon.inventory())
    assert daemon.flush()
    spec = world.http.get("/v1/nodes/n-1/spec", headers=world.admin).json()
    assert [g["migLayout"] for g in spec["gpus"]] == ["all-1g.10gb", "all-1g.10gb"]
    daemon.step(False)  # it re-cuts around the booked slices
    for gpu in fake.list_gpus():
        slices = {gi.placement_start: gi.compute_instances[0].uuid for gi in gpu.instances}
        assert {gi.profile for gi in gpu.instances} == {"1g.10gb"} and sorted(slices) == list(range(7))
        assert {s: slices[s] for s in kept[gpu.uuid]} == kept[gpu.uuid]
    present = [a for a in node_atoms(world, "n-1") if a["present"]]
    assert not any(a["partitionPending"] for a in present)
    assert sorted(a["class"] for a in present if a["bookable"]) == ["gpu.mig"] * 14
    spec = world.http.get("/v1/nodes/n-1/spec", headers=world.admin).json()
    [handed] = [a for a in spec["assignments"] if a["allocationId"] == rid]
    devices = set(handed["env"]["NVIDIA_VISIBLE_DEVICES"].split(","))
    assert {u for k in kept.values() for u in k.values()} <= devices
    assert doctor_codes(world) == []
