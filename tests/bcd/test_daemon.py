"""`bcd run`'s loop against the real app in-process: devices handed over and taken back, reports
queued and sent once, layouts applied to idle GPUs only, the reboot-required path."""

from __future__ import annotations

import dataclasses
import io
import json
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from better_compute.bcd import cdi
from better_compute.bcd.daemon import Daemon
from better_compute.bcd.devices import DevicesConverger, DevicesPass
from better_compute.bcd.fake import FakeNode
from better_compute.bcd.gpu import Gpu, Health
from better_compute.bcd.host import HostConverger
from better_compute.bcd.inventory import mig_instances, report_of
from better_compute.bcd.joining import node_client
from better_compute.bcd.logs import Log
from better_compute.bcd.node_tree import simulated
from better_compute.domain.fleet.atoms import atom_id_for, derive_gpu_atoms, mig_atom_key
from better_compute.domain.fleet.pools import PoolSharing
from better_compute.storage.store import Store
from better_compute.wire.nodes import NodeSpecPublic
from tests.builders import fleet_spec
from tests.node_world import NodeWorld


@pytest.fixture
def world(store: Store, tmp_path: Path) -> NodeWorld:
    return NodeWorld(store, tmp_path)


def daemon_for(world: NodeWorld, node: str) -> tuple[Daemon, FakeNode]:
    return world.daemon(node)


def reservation(world: NodeWorld, rid: str) -> dict[str, object]:
    answer: dict[str, object] = world.http.get(f"/v1/reservations/{rid}", headers=world.platform).json()
    return answer


def test_a_mig_reservation_is_handed_over_and_taken_back(world: NodeWorld) -> None:
    daemons = dict(daemon_for(world, n) for n in ("n-1", "n-2"))
    for d in daemons:
        assert d.step(False)
    rid = world.reserve([{"class": "gpu.mig", "count": 1}])["id"]
    shown = reservation(world, rid)
    atom = shown["atoms"][0]  # type: ignore[index]
    daemon = next(d for d in daemons if d.node == atom["node"])
    assert daemon.step(True)
    spec = json.loads(cdi.spec_path(daemon.devices.cdi_root, rid).read_text())
    env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
    assert env["BC_DEVICE_UUIDS"] == atom["attributes"]["migUuid"]
    assert env["BC_DEVICE_UUIDS"].startswith("MIG-") and env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert (daemon.identity.state_dir / "env" / f"{rid}.env").exists()
    assert reservation(world, rid)["binding"] == "bound"
    world.clock.now += timedelta(minutes=5)
    released = world.http.post(f"/v1/reservations/{rid}/release", json={"id": rid}, headers=world.platform)
    assert released.status_code == 200, released.text
    daemon.step(True)
    assert not cdi.spec_path(daemon.devices.cdi_root, rid).exists()
    assert reservation(world, rid)["binding"] == "released"
    assert len(daemon.queue) == 0


def test_a_report_resent_after_its_answer_was_lost_takes_effect_once(world: NodeWorld) -> None:
    daemon, _ = daemon_for(world, "n-1")
    daemon.step(False)
    rid = world.reserve([{"class": "gpu.mig", "count": 1}])["id"]
    node = reservation(world, rid)["atoms"][0]["node"]  # type: ignore[index]
    if node != "n-1":
        daemon, _ = daemon_for(world, "n-2")
        daemon.step(False)
    daemon.enqueue({"kind": "AllocationBound", "allocationId": rid, "binding": "device-missing"})
    (entry,) = daemon.queue.pending()
    # Sent, but the answer never came back: the entry is still queued.
    daemon.compute.nodes.report(daemon.node, entry.report, report_id=entry.report_id)
    assert daemon.flush()
    assert len(daemon.queue) == 0
    events = world.http.get("/v1/events", params={"type": "allocation.bound"}, headers=world.platform).json()
    assert [e["payload"]["binding"] for e in events["items"]] == ["device-missing"]
    sent = [json.loads(line) for line in daemon.log.stream.getvalue().splitlines()]  # type: ignore[union-attr]
    assert [r["duplicate"] for r in sent if r["event"] == "report.sent"][-1] is True


def test_a_report_answered_unavailable_was_dropped(world: NodeWorld) -> None:
    """A server whose database is down answers 503 UNAVAILABLE (docs/api.md#errors): nothing was
    applied, so the report stays queued and is sent once the server can take it."""
    daemon, _ = daemon_for(world, "n-1")
    daemon.step(False)
    rid = world.reserve([{"class": "gpu.mig", "count": 1}])["id"]
    node = reservation(world, rid)["atoms"][0]["node"]  # type: ignore[index]
    if node != "n-1":
        daemon, _ = daemon_for(world, "n-2")
        daemon.step(False)
    database_down = True

    def server(request: httpx.Request) -> httpx.Response:
        if database_down and request.url.path.endswith("/reports"):
            refusal = {"code": "UNAVAILABLE", "message": "the database cannot be reached now", "details": {}}
            return httpx.Response(503, headers={"Retry-After": "5"}, json={"error": refusal})
        return world.forward(request)

    daemon.compute = node_client(
        daemon.identity,
        transport=httpx.MockTransport(server),
        clock=lambda: world.clock.now.timestamp(),  # noqa: PLW0108 (now moves)
    )
    daemon.enqueue({"kind": "AllocationBound", "allocationId": rid, "binding": "device-missing"})

    assert not daemon.flush()
    assert len(daemon.queue) == 1
    database_down = False
    assert daemon.flush()
    assert len(daemon.queue) == 0
    events = world.http.get("/v1/events", params={"type": "allocation.bound"}, headers=world.platform).json()
    assert [e["payload"]["binding"] for e in events["items"]] == ["device-missing"]


def spec_of(
    fake: FakeNode, assignments: list[dict[str, object]], layout: str | None = "all-1g.10gb"
) -> NodeSpecPublic:
    return NodeSpecPublic.model_validate(
        {
            "node": fake.name,
            "generation": 1,
            "gpus": [{"uuid": g.uuid, "migLayout": layout} for g in fake.list_gpus()],
            "sharing": {"mode": "mig", "replicas": 1},
            "assignments": assignments,
        }
    )


def test_device_missing_until_the_instance_exists_and_whole_against_part_refused(tmp_path: Path) -> None:
    fake = FakeNode.from_fleet(fleet_spec(nodes=2, mode="mig", layout="all-1g.10gb"), "n-1")
    gpu = fake.list_gpus()[0]
    gi = gpu.instances[0]
    mig_atom = atom_id_for(gpu.uuid, mig_atom_key(mig_instances(gi)[0]))
    devices = DevicesConverger(tmp_path / "cdi", tmp_path / "env", node=simulated(tmp_path / "node-root"))
    spec = spec_of(fake, [{"allocationId": "res-a", "atoms": [mig_atom], "env": {}}])
    fake.destroy_instance(gpu.uuid, gi.gi_id)
    missing = devices.converge(spec, fake.list_gpus())
    assert not missing.settled
    assert [r["binding"] for r in missing.reports] == ["device-missing"]
    fake.create_instance(gpu.uuid, gi.profile, gi.placement_start)
    bound = devices.converge(spec, fake.list_gpus())
    assert bound.settled and [r["binding"] for r in bound.reports] == ["bound"]
    whole: dict[str, object] = {"allocationId": "res-b", "atoms": [atom_id_for(gpu.uuid, "gpu")], "env": {}}
    both = spec_of(fake, [{"allocationId": "res-a", "atoms": [mig_atom], "env": {}}, whole])
    refused = devices.converge(both, fake.list_gpus())
    assert [(r["allocationId"], r["binding"]) for r in refused.reports] == [("res-b", "refused")]
    assert "whole GPU cannot be handed over" in refused.reports[0]["detail"]
    assert not cdi.spec_path(tmp_path / "cdi", "res-b").exists()
    gone = devices.converge(spec_of(fake, []), fake.list_gpus())
    assert sorted(r["kind"] for r in gone.reports) == ["AllocationReleased", "AllocationReleased"]
    assert not cdi.spec_path(tmp_path / "cdi", "res-a").exists()


def booked_slice(fake: FakeNode, gpu: str, profile: str, start: int) -> str:
    """The id the server derives for the MIG atom of `profile` at placement `start` of `gpu`, as the
    node reports it now: what a booking names."""
    [report] = [g for g in report_of(fake.name, fake.list_gpus()).gpus if g.uuid == gpu]
    atoms = derive_gpu_atoms(report, fake.name, PoolSharing("p", "mig"), None)
    [inst] = [i for i in report.mig_instances if i.profile == profile and i.placement_start == start]
    [atom] = [a.id for a in atoms if a.attributes.get("migUuid") == inst.uuid]
    return atom


def bindings(done: DevicesPass) -> list[object]:
    return [r["binding"] for r in done.reports]


def test_mig_instance_of_another_profile_at_same_ids_is_not_the_booked_atom(tmp_path: Path) -> None:
    """A node rebooted at all-3g.40gb has a 3g.40gb at the GPU-instance id of the 1g.10gb booked:
    the node hands it no device (and takes back the hand-over), nor holds the GPU for it, and hands
    the booked 1g.10gb again once it is back."""
    fake = FakeNode.from_fleet(fleet_spec(nodes=2, mode="mig", layout="all-1g.10gb"), "n-1")
    gpu = fake.list_gpus()[0].uuid
    atom = booked_slice(fake, gpu, "1g.10gb", 0)
    devices = DevicesConverger(tmp_path / "cdi", tmp_path / "env", node=simulated(tmp_path / "node-root"))
    booked = [{"allocationId": "res-a", "atoms": [atom], "env": {}}]
    assert bindings(devices.converge(spec_of(fake, booked), fake.list_gpus())) == ["bound"]
    fake.gpu(gpu).apply_layout("all-3g.40gb")  # rebooted: a 3g.40gb at the 1g.10gb's GPU instance id
    assert fake.gpu(gpu).instances[0].gi_id == 1 and fake.gpu(gpu).instances[0].profile == "3g.40gb"
    missing = devices.converge(spec_of(fake, booked), fake.list_gpus())
    assert bindings(missing) == ["device-missing"] and not missing.settled
    assert gpu not in missing.held_gpus
    assert not cdi.spec_path(tmp_path / "cdi", "res-a").exists()
    fake.gpu(gpu).apply_layout("all-1g.10gb")
    again = devices.converge(spec_of(fake, booked), fake.list_gpus())
    assert again.settled and bindings(again) == ["bound"]


def test_mig_instance_of_the_same_profile_at_another_placement_is_not_the_booked_atom(tmp_path: Path) -> None:
    """A node rebooted at mixed:4g.40gb+3x1g.10gb has a 1g.10gb at the GPU-instance id of the
    booked one, on another slice of the GPU: not the booked atom, no device for it."""
    fake = FakeNode.from_fleet(fleet_spec(nodes=2, mode="mig", layout="all-1g.10gb"), "n-1")
    gpu = fake.list_gpus()[0].uuid
    at_1 = next(i for i in fake.gpu(gpu).instances if i.placement_start == 1)
    atom = booked_slice(fake, gpu, "1g.10gb", 1)
    devices = DevicesConverger(tmp_path / "cdi", tmp_path / "env", node=simulated(tmp_path / "node-root"))
    booked = [{"allocationId": "res-a", "atoms": [atom], "env": {}}]
    assert bindings(devices.converge(spec_of(fake, booked), fake.list_gpus())) == ["bound"]
    fake.gpu(gpu).apply_layout("mixed:4g.40gb+3x1g.10gb")
    there = next(i for i in fake.gpu(gpu).instances if i.gi_id == at_1.gi_id)
    assert there.profile == "1g.10gb" and there.placement_start != 1  # same ids, same profile, elsewhere
    missing = devices.converge(spec_of(fake, booked), fake.list_gpus())
    assert bindings(missing) == ["device-missing"] and gpu not in missing.held_gpus
    assert not cdi.spec_path(tmp_path / "cdi", "res-a").exists()


def test_mig_slice_restored_under_other_gi_ids_is_the_same_atom(tmp_path: Path) -> None:
    """The booked slice comes back after a reboot under GPU-instance ids the driver hands out in
    another order: it is the same atom, handed to the same allocation."""
    fake = FakeNode.from_fleet(fleet_spec(nodes=2, mode="mig", layout="all-1g.10gb"), "n-1")
    gpu = fake.list_gpus()[0].uuid
    before = next(i for i in fake.gpu(gpu).instances if i.placement_start == 1)
    atom = booked_slice(fake, gpu, "1g.10gb", 1)
    fresh = DevicesConverger(tmp_path / "cdi", tmp_path / "env", node=simulated(tmp_path / "node-root"))
    fake.gpu(gpu).gi_ids = [7, 6, 5, 4, 3, 2, 1]  # the driver's order this boot
    fake.gpu(gpu).apply_layout("all-1g.10gb")
    after = next(i for i in fake.gpu(gpu).instances if i.placement_start == 1)
    assert after.gi_id != before.gi_id
    assert booked_slice(fake, gpu, "1g.10gb", 1) == atom
    done = fresh.converge(
        spec_of(fake, [{"allocationId": "res-a", "atoms": [atom], "env": {}}]), fake.list_gpus()
    )
    assert done.settled and bindings(done) == ["bound"] and gpu in done.held_gpus
    env = (tmp_path / "env" / f"{cdi.device_name('res-a')}.env").read_text()
    assert after.uuid in env and before.uuid not in env


def mig_state_unread(gpu: Gpu) -> Gpu:
    """`gpu` as NVML reads it when it refuses the GPU's MIG mode (no permission, a reset required):
    MIG off as far as anyone can tell, no instance, unhealthy and `partial`."""
    note = "cannot read the MIG mode: permission denied; run bcd as root"
    return dataclasses.replace(
        gpu, mig_current=False, mig_pending=False, instances=(), partial=True, health=Health(notes=(note,))
    )


def mig_atom_of(gpu: Gpu, n: int) -> str:
    """The atom id of the `n`th MIG instance of `gpu`."""
    return atom_id_for(gpu.uuid, mig_atom_key(mig_instances(gpu.instances[n])[0]))


def test_a_gpu_whose_mig_state_is_unread_does_not_withdraw_its_bound_allocations(tmp_path: Path) -> None:
    """NVML refuses a GPU's MIG mode for a moment: read as it is, every MIG instance of the GPU is
    gone, and every bound allocation on it would lose its spec. The node cannot tell: each keeps its
    spec and env file as they are (`cdi.kept`, the pass not settled), one not bound yet on that GPU
    is `device-missing` saying why, and one whose instance is really gone on a GPU read whole is
    withdrawn as ever. Read whole again, all is as before."""
    fake = FakeNode.from_fleet(fleet_spec(nodes=2, mode="mig", layout="all-1g.10gb"), "n-1")
    unread, whole = fake.list_gpus()[:2]
    stream = io.StringIO()
    devices = DevicesConverger(
        tmp_path / "cdi", tmp_path / "env", node=simulated(tmp_path / "node-root"), log=Log(stream)
    )
    booked: list[dict[str, object]] = [
        {"allocationId": "res-0", "atoms": [mig_atom_of(unread, 0)], "env": {}},
        {"allocationId": "res-1", "atoms": [mig_atom_of(unread, 1)], "env": {}},
        {"allocationId": "res-2", "atoms": [mig_atom_of(whole, 0)], "env": {}},
    ]
    assert devices.converge(spec_of(fake, booked), fake.list_gpus()).settled
    files = {p.name: p.read_bytes() for d in ("cdi", "env") for p in (tmp_path / d).iterdir()}
    kept = {n: d for n, d in files.items() if "res-2" not in n}
    fake.destroy_instance(whole.uuid, whole.instances[0].gi_id)  # res-2's instance, really gone
    later = spec_of(
        fake, [*booked, {"allocationId": "res-new", "atoms": [mig_atom_of(unread, 2)], "env": {}}]
    )
    reading = [mig_state_unread(g) if g.uuid == unread.uuid else g for g in fake.list_gpus()]

    done = devices.converge(later, reading)
    assert not done.settled and unread.uuid in done.held_gpus
    reported = {r["allocationId"]: (r["binding"], r["detail"]) for r in done.reports}
    assert sorted(reported) == ["res-2", "res-new"]
    assert reported["res-2"][0] == reported["res-new"][0] == "device-missing"
    assert "gone since it was handed over" in reported["res-2"][1]
    assert f"the MIG state of GPU {unread.uuid} is not read whole" in reported["res-new"][1]
    again = devices.converge(later, reading)
    assert not again.settled and again.reports == []
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["event"], e["allocation"]) for e in events] == [
        ("device.lost", "res-2"),
        ("cdi.kept", "res-0"),
        ("cdi.kept", "res-1"),
    ]
    assert f"the MIG state of GPU {unread.uuid} is not read whole" in events[1]["reason"]
    assert {p.name: p.read_bytes() for d in ("cdi", "env") for p in (tmp_path / d).iterdir()} == {
        **kept,
        f"{cdi.device_name('res-2')}.lost": b"",
    }

    # Read whole again: the kept ones are as they were (nothing rewritten, nothing said of them),
    # and the one that waited is handed over.
    stream.truncate(0)
    stream.seek(0)
    back = devices.converge(later, fake.list_gpus())
    assert [(r["allocationId"], r["binding"]) for r in back.reports] == [("res-new", "bound")]
    assert stream.getvalue() == ""
    now = {p.name: p.read_bytes() for d in ("cdi", "env") for p in (tmp_path / d).iterdir()}
    assert {n: d for n, d in now.items() if n in kept} == kept


def test_a_restarted_bcd_withdraws_what_is_on_a_gpu_it_never_read_whole(tmp_path: Path) -> None:
    """Which atoms a GPU had is known only from a reading of it whole, kept in memory: a daemon that
    started while the GPU's MIG state is unread has none, and takes the instances for gone (the safe
    side: no container starts on a device nobody can vouch for)."""
    fake = FakeNode.from_fleet(fleet_spec(nodes=2, mode="mig", layout="all-1g.10gb"), "n-1")
    gpu = fake.list_gpus()[0]
    atom = atom_id_for(gpu.uuid, mig_atom_key(mig_instances(gpu.instances[0])[0]))
    booked: list[dict[str, object]] = [{"allocationId": "res-a", "atoms": [atom], "env": {}}]
    first = DevicesConverger(tmp_path / "cdi", tmp_path / "env", node=simulated(tmp_path / "node-root"))
    assert first.converge(spec_of(fake, booked), fake.list_gpus()).settled
    restarted = DevicesConverger(tmp_path / "cdi", tmp_path / "env", node=simulated(tmp_path / "node-root"))
    reading = [mig_state_unread(g) if g.uuid == gpu.uuid else g for g in fake.list_gpus()]
    done = restarted.converge(spec_of(fake, booked), reading)
    assert bindings(done) == ["device-missing"]
    assert not cdi.spec_path(tmp_path / "cdi", "res-a").exists()


def test_layouts_go_to_idle_gpus_only_and_a_failed_reset_asks_for_a_reboot() -> None:
    fake = FakeNode.from_fleet(fleet_spec(nodes=2, mode="mig", layout="all-1g.10gb"), "n-1")
    first, second = fake.list_gpus()[:2]
    host = HostConverger(fake, Log(io.StringIO()))
    assert host.converge(spec_of(fake, [], "all-3g.40gb"), {first.uuid})
    after = {g.uuid: g for g in fake.list_gpus()}
    assert after[first.uuid].instances == first.instances
    assert {gi.profile for gi in after[second.uuid].instances} == {"3g.40gb"}
    assert not host.converge(spec_of(fake, [], "all-3g.40gb"), {first.uuid})
    fake.fail_resets(second.uuid)
    host.converge(spec_of(fake, [], "all-disabled"), {first.uuid})
    assert host.reboot_required == {second.uuid}
    stuck = {g.uuid: g for g in fake.list_gpus()}[second.uuid]
    assert stuck.mig_current and not stuck.mig_pending


def test_a_node_whose_reset_fails_shows_reboot_required(world: NodeWorld) -> None:
    """The reboot-required path end to end: the daemon's mode change needs a reset that fails, its
    next inventory names the GPU, and the server shows the node `rebootRequired` with an event."""
    daemon, fake = daemon_for(world, "n-1")
    assert daemon.flush()
    stuck = fake.list_gpus()[0]
    fake.fail_resets(stuck.uuid)
    daemon.converge(spec_of(fake, [], "all-disabled"))
    daemon.flush()
    nodes = world.http.get("/v1/nodes", headers=world.admin).json()["items"]
    shown = {n["id"]: n for n in nodes}
    assert shown["n-1"]["rebootRequired"] is True
    assert shown["n-2"]["rebootRequired"] is False
    events = world.http.get("/v1/events", params={"type": "node.reboot_required"}, headers=world.admin).json()
    assert [(e["subject"], e["payload"]["gpus"]) for e in events["items"]] == [("n-1", [stuck.uuid])]


def test_an_allocation_id_no_cdi_device_can_carry_is_refused_and_the_others_are_handed_over(
    tmp_path: Path,
) -> None:
    fake = FakeNode.from_fleet(fleet_spec(nodes=1, mode="exclusive"), "n")
    first, second = (atom_id_for(g.uuid, "gpu") for g in fake.list_gpus()[:2])
    devices = DevicesConverger(tmp_path / "cdi", tmp_path / "env", node=simulated(tmp_path / "node-root"))
    spec = spec_of(
        fake,
        [
            {"allocationId": "dep-1/r0", "atoms": [first], "env": {}},
            {"allocationId": "res-ok", "atoms": [second], "env": {}},
        ],
        layout=None,
    )
    done = devices.converge(spec, fake.list_gpus())
    assert sorted((r["allocationId"], r["binding"]) for r in done.reports) == [
        ("dep-1/r0", "refused"),
        ("res-ok", "bound"),
    ]
    assert "not a valid CDI device name" in next(
        r["detail"] for r in done.reports if r["binding"] == "refused"
    )
    assert cdi.spec_path(tmp_path / "cdi", "res-ok").exists()
    gone = devices.converge(spec_of(fake, []), fake.list_gpus())
    assert sorted(r["allocationId"] for r in gone.reports) == ["dep-1/r0", "res-ok"]


def restarted(daemon: Daemon, fake: FakeNode) -> Daemon:
    """The node's `bcd` started again over the same state directory (identity, queue, hand-over
    records) and the same GPUs, its start inventory queued as `run` queues it."""
    log = Log(io.StringIO(), node=daemon.node)
    again = Daemon(daemon.identity, fake, daemon.compute, cdi_root=daemon.devices.cdi_root, log=log, wait=0)
    again.starting()
    return again


def reboot_mig_off(fake: FakeNode, stuck: set[str]) -> None:
    """The node reboots and its GPUs come back MIG-off with no instance, as Hopper GPUs do (MIG mode
    is not kept across a reboot there); the GPUs in `stuck` fail the reset that turns MIG back on."""
    for gpu in fake.gpus:
        gpu.mig_mode_persists = False
        gpu.reset_fails = gpu.uuid in stuck
    fake.reboot()


def reserve_instance(world: NodeWorld, mig_uuid: str) -> str:
    """Book the one MIG instance whose `MIG-…` uuid is `mig_uuid`."""
    selector = {"matchExpressions": [{"key": "migUuid", "op": "In", "values": [mig_uuid]}]}
    return str(world.reserve([{"class": "gpu.mig", "count": 1, "selector": selector}])["id"])


def bindings_reported(world: NodeWorld, rid: str) -> list[tuple[str, str | None]]:
    events = world.http.get("/v1/events", params={"type": "allocation.bound"}, headers=world.platform).json()
    return [
        (e["payload"]["binding"], e["payload"].get("detail")) for e in events["items"] if e["subject"] == rid
    ]


def test_bcd_does_not_crash_when_a_handed_over_mig_instance_is_gone(world: NodeWorld) -> None:
    """A reboot takes a handed-over MIG instance away (the GPU comes back MIG-off and cannot be
    partitioned again yet): the allocation is `device-missing`, its CDI spec and env file are gone so
    no container starts on a stale device, the rest of the node converges, and the allocation is
    bound again once its instance is back."""
    daemon, fake = daemon_for(world, "n-1")
    assert daemon.step(False)
    lost_gpu, kept_gpu = fake.list_gpus()[:2]
    lost = reserve_instance(world, lost_gpu.instances[0].compute_instances[0].uuid)
    kept = reserve_instance(world, kept_gpu.instances[0].compute_instances[0].uuid)
    assert daemon.step(True)
    assert reservation(world, lost)["binding"] == reservation(world, kept)["binding"] == "bound"
    cdi_root, env = daemon.devices.cdi_root, daemon.identity.state_dir / "env"

    reboot_mig_off(fake, {lost_gpu.uuid})
    daemon = restarted(daemon, fake)
    assert not daemon.step(False)  # before the fix: CdiError, "has no device to hand over"

    # The node says its device is missing; the reservation shows the server's word for it: its
    # instance is gone from the node, so the booking is stranded (`domain.fleet.bindings`).
    assert bindings_reported(world, lost)[-1][0] == "device-missing"
    assert "gone" in str(bindings_reported(world, lost)[-1][1])
    assert reservation(world, lost)["binding"] == "stranded"
    assert not cdi.spec_path(cdi_root, lost).exists()
    assert not (env / f"{lost}.env").exists()
    assert reservation(world, kept)["binding"] == "bound"  # its GPU came back partitioned
    kept_spec = json.loads(cdi.spec_path(cdi_root, kept).read_text())
    visible = dict(e.split("=", 1) for e in kept_spec["devices"][0]["containerEdits"]["env"])
    now_kept = {g.uuid: g for g in fake.list_gpus()}[kept_gpu.uuid]
    assert visible["BC_DEVICE_UUIDS"] == now_kept.instances[0].compute_instances[0].uuid
    assert not daemon.step(False)  # still missing: nothing more to say, and no crash either
    assert bindings_reported(world, lost)[-1][0] == "device-missing"

    fake.fail_resets(lost_gpu.uuid, False)  # the operator rebooted it: MIG on again
    daemon = restarted(daemon, fake)
    assert daemon.step(False)
    assert reservation(world, lost)["binding"] == "bound"
    spec = json.loads(cdi.spec_path(cdi_root, lost).read_text())
    visible = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
    back = {g.uuid: g for g in fake.list_gpus()}[lost_gpu.uuid].instances[0].compute_instances[0].uuid
    assert visible["BC_DEVICE_UUIDS"] == back != lost_gpu.instances[0].compute_instances[0].uuid


def test_a_gpu_whose_mig_state_nvml_would_not_read_keeps_its_reservations_bound(world: NodeWorld) -> None:
    """NVML refuses a GPU's MIG mode (no permission, a reset required): the node reads it as MIG off
    with no instance. Reported so, the server would take every MIG atom of it for gone, and the node
    would withdraw every allocation on it. Its inventory says its MIG state is unknown instead: the
    server keeps its atoms as they were (present, unbookable while it is unhealthy), the node keeps
    the allocation's spec, and the reservation is bound again, unchanged, once the GPU reads whole."""
    daemon, fake = daemon_for(world, "n-1")
    assert daemon.step(False)
    gpu = fake.list_gpus()[0]
    rid = reserve_instance(world, gpu.instances[0].compute_instances[0].uuid)
    assert daemon.step(True)
    assert reservation(world, rid)["binding"] == "bound"
    spec = cdi.spec_path(daemon.devices.cdi_root, rid)
    written = spec.read_bytes()
    reads = fake.list_gpus

    def unread() -> tuple[Gpu, ...]:
        return tuple(mig_state_unread(g) if g.uuid == gpu.uuid else g for g in reads())

    def atoms_of_gpu() -> dict[str, tuple[bool, bool]]:
        listed = world.http.get("/v1/atoms", params={"limit": 500}, headers=world.admin).json()["items"]
        return {a["id"]: (a["present"], a["bookable"]) for a in listed if a["gpuId"] == gpu.uuid}

    before = atoms_of_gpu()
    fake.list_gpus = unread  # type: ignore[method-assign]
    assert not daemon.step(False)
    assert not daemon.step(False)
    shown = {g["id"]: g for g in world.http.get("/v1/gpus", headers=world.admin).json()["items"]}[gpu.uuid]
    assert not shown["healthy"]  # the inventory reached the server
    assert {a: present for a, (present, _) in atoms_of_gpu().items()} == {
        a: present for a, (present, _) in before.items()
    }
    assert not any(bookable for _, bookable in atoms_of_gpu().values())
    # Stranded as any booking on an unhealthy GPU is (not as one whose instance is gone), and the
    # node never said its device was missing.
    shown_now = reservation(world, rid)
    assert shown_now["binding"] == "stranded"
    assert str(shown_now["bindingDetail"]).endswith("is not bookable: its GPU reports unhealthy")
    assert [b for b, _ in bindings_reported(world, rid)] == ["bound"]
    assert spec.read_bytes() == written

    fake.list_gpus = reads  # type: ignore[method-assign]
    assert daemon.step(False)
    assert atoms_of_gpu() == before
    assert reservation(world, rid)["binding"] == "bound"
    assert spec.read_bytes() == written


def test_a_bound_allocation_whose_cdi_spec_a_reboot_wiped_gets_it_written_again(tmp_path: Path) -> None:
    """The CDI root is a tmpfs (/var/run/cdi): a reboot empties it while the env files on the state
    directory stay. A whole GPU survives the reboot, so its allocation's env file is unchanged; its
    CDI spec must still come back, or no container can ask for the device it is bound to."""
    fake = FakeNode.from_fleet(fleet_spec(nodes=1, mode="exclusive"), "n")
    whole = atom_id_for(fake.list_gpus()[0].uuid, "gpu")
    devices = DevicesConverger(tmp_path / "cdi", tmp_path / "env", node=simulated(tmp_path / "node-root"))
    spec = spec_of(fake, [{"allocationId": "res-a", "atoms": [whole], "env": {}}], layout=None)
    assert devices.converge(spec, fake.list_gpus()).settled
    fake.reboot()
    cdi.spec_path(tmp_path / "cdi", "res-a").unlink()
    again = DevicesConverger(
        tmp_path / "cdi", tmp_path / "env", node=simulated(tmp_path / "node-root")
    )  # the daemon after the reboot
    assert again.converge(spec, fake.list_gpus()).settled
    written = json.loads(cdi.spec_path(tmp_path / "cdi", "res-a").read_text())
    assert written["devices"][0]["containerEdits"]["env"] == [
        f"BC_DEVICE_UUIDS={fake.list_gpus()[0].uuid}",
        "NVIDIA_VISIBLE_DEVICES=void",
    ]


def generations(world: NodeWorld, node: str) -> tuple[int, int]:
    """The node's spec generation and the one it observed, as `nodes.list` shows them."""
    shown = {n["id"]: n for n in world.http.get("/v1/nodes", headers=world.admin).json()["items"]}[node]
    return int(shown["specGeneration"]), int(shown["observedGeneration"])


def test_a_restarted_bcd_does_not_claim_the_generation_it_observed_before_it_stopped(
    world: NodeWorld,
) -> None:
    """A node rebooted to another layout (MIG off, the reset that turns it on failing) has the
    same spec generation as before: its restarted `bcd` has not converged it, so the server must not
    go on counting the generation it observed before the restart; once it converges, it says so."""
    daemon, fake = daemon_for(world, "n-1")
    assert daemon.step(False)
    spec, observed = generations(world, "n-1")
    assert observed == spec >= 1
    reboot_mig_off(fake, {g.uuid for g in fake.gpus})
    daemon = restarted(daemon, fake)
    assert daemon.flush()  # its start inventory: MIG off everywhere
    assert generations(world, "n-1") == (spec, 0)  # before the fix: (spec, spec)
    daemon.step(False)
    assert daemon.host.reboot_required  # it cannot converge
    assert generations(world, "n-1") == (spec, 0)
    for gpu in fake.gpus:
        gpu.reset_fails = False
    daemon = restarted(daemon, fake)
    assert daemon.step(False)
    assert generations(world, "n-1") == (spec, spec)


def test_a_restarted_bcd_drops_the_generation_claims_its_last_run_left_unsent(world: NodeWorld) -> None:
    """A pass converged the spec and queued its `ObservedGeneration`, and the daemon was killed
    before sending it; the node rebooted MIG-off. The restarted daemon does not send that claim
    (nor the old run's inventory): what it sends first says it has observed nothing yet."""
    daemon, fake = daemon_for(world, "n-1")
    assert daemon.flush()
    assert daemon.converge(daemon.compute.nodes.spec("n-1"))  # queued, never sent
    assert [e.report["kind"] for e in daemon.queue.pending()] == ["ObservedGeneration"]
    reboot_mig_off(fake, {g.uuid for g in fake.gpus})
    daemon = restarted(daemon, fake)
    queued = daemon.queue.pending()
    assert [e.report["kind"] for e in queued] == ["Inventory"]  # before the fix: the claim went first
    assert queued[0].report["observedGeneration"] == 0
    assert daemon.flush()
    spec, observed = generations(world, "n-1")
    assert spec >= 1 and observed == 0


def _slices(fake: FakeNode, gpu: str) -> dict[tuple[str, int], str]:
    """The GPU's MIG instances now, by (profile, placement start), with their `MIG-…` uuids."""
    [found] = [g for g in fake.list_gpus() if g.uuid == gpu]
    return {(gi.profile, gi.placement_start): mig_instances(gi)[0].uuid for gi in found.instances}


def test_layout_returns_around_a_booked_slice_it_keeps(world: NodeWorld) -> None:
    """A node restarted at `mixed:4g.40gb+3x1g.10gb` in an `all-1g.10gb` pool, its 1g.10gb at
    placement 4 handed to a tenant whose process runs on it: the node re-cuts the rest of the GPU
    to the pool's layout around that instance, which it never destroys (the hardware would refuse
    to), and the GPU is then at its layout (its atoms bookable again) with the tenant's slice, same
    uuid, in its device file throughout."""
    daemon, fake = world.daemon("n-1", "mig", "mixed:4g.40gb+3x1g.10gb")
    gpu = fake.list_gpus()[0].uuid
    atom = booked_slice(fake, gpu, "1g.10gb", 4)
    [busy] = [
        gi for gi in fake.list_gpus()[0].instances if (gi.profile, gi.placement_start) == ("1g.10gb", 4)
    ]
    fake.mark_busy(gpu, busy.gi_id)
    before = _slices(fake, gpu)[("1g.10gb", 4)]
    spec = spec_of(fake, [{"allocationId": "res-a", "atoms": [atom], "env": {}}], "all-1g.10gb")
    daemon.converge(spec)
    after = _slices(fake, gpu)
    assert sorted(after) == [("1g.10gb", start) for start in range(7)]
    assert after[("1g.10gb", 4)] == before and booked_slice(fake, gpu, "1g.10gb", 4) == atom
    assert daemon.host.unconverged(spec) == []
    env = (daemon.devices.env_dir / f"{cdi.device_name('res-a')}.env").read_text()
    assert before in env


def test_a_layout_that_would_destroy_a_held_instance_leaves_its_gpu_alone(world: NodeWorld) -> None:
    """The same node with its 4g.40gb handed over: the pool's layout destroys it, so that GPU keeps
    the layout it has (nothing of it destroyed, nothing refused) while the idle one is re-cut."""
    daemon, fake = world.daemon("n-1", "mig", "mixed:4g.40gb+3x1g.10gb")
    first, second = (g.uuid for g in fake.list_gpus()[:2])
    atom = booked_slice(fake, first, "4g.40gb", 0)
    [busy] = [gi for gi in fake.list_gpus()[0].instances if gi.profile == "4g.40gb"]
    fake.mark_busy(first, busy.gi_id)
    before = _slices(fake, first)
    spec = spec_of(fake, [{"allocationId": "res-a", "atoms": [atom], "env": {}}], "all-1g.10gb")
    daemon.converge(spec)
    assert _slices(fake, first) == before
    assert sorted(_slices(fake, second)) == [("1g.10gb", start) for start in range(7)]
    assert daemon.host.unconverged(spec) == [first]
    stream = daemon.log.stream
    assert isinstance(stream, io.StringIO) and "host.refused" not in stream.getvalue()


def test_bcd_run_logs_what_a_reading_left_out_once_while_it_lasts(world: NodeWorld) -> None:
    """A compute instance tied to no MIG device, and a GPU NVML counts but would not name, are in no
    inventory: `bcd run` logs each (`gpu.unlisted` with its GPU, `gpu.unreadable`) with its reason
    when it first reads it, not again on every pass, and again if it comes back."""
    daemon, fake = daemon_for(world, "n-1")
    reads = fake.list_gpus
    gpu = reads()[0].uuid
    why = "GPU instance 1 (1g.10gb) compute instance 0: not listed: NVML has no MIG device for it"
    missing = "GPU 2: not listed: NVML would not give its uuid: permission denied"

    def left_out() -> tuple[Gpu, ...]:
        return tuple(
            dataclasses.replace(g, unlisted=(why,), partial=True) if g.uuid == gpu else g for g in reads()
        )

    def logged() -> list[tuple[str, str | None, str]]:
        events = [json.loads(line) for line in daemon.log.stream.getvalue().splitlines()]  # type: ignore[union-attr]
        return [(e["event"], e.get("gpu"), e["reason"]) for e in events if e["event"].startswith("gpu.")]

    assert daemon.step(False) and logged() == []
    fake.list_gpus = left_out  # type: ignore[method-assign]
    fake.unreadable = (missing,)  # type: ignore[attr-defined]
    for _ in range(3):
        daemon.step(False)
    assert logged() == [("gpu.unlisted", gpu, why), ("gpu.unreadable", None, missing)]
    fake.list_gpus = reads  # type: ignore[method-assign]
    fake.unreadable = ()  # type: ignore[attr-defined]
    daemon.step(False)
    fake.list_gpus = left_out  # type: ignore[method-assign]
    daemon.step(False)
    assert logged() == [
        ("gpu.unlisted", gpu, why),
        ("gpu.unreadable", None, missing),
        ("gpu.unlisted", gpu, why),
    ]
