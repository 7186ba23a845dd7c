"""Layout changes as NVIDIA's MIG manager makes them: the GPU clients (systemd units that hold the
GPUs) stopped before a change and started after, in order, also when the change fails or the daemon
dies between the two; the NVIDIA CDI spec refreshed after; what was refused reported to the server.

The GPUs are the fake backend; systemd is `SimulatedSystemd`, which answers as systemctl does
(stopping an inactive unit succeeds, starting one not installed fails). A GPU a client holds refuses
MIG changes and resets as NVML does ("In use by another client"), so a change that ran beside a
running client fails here as it would on a node."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from better_compute.bcd import cdi, gpu_clients, node_tree
from better_compute.bcd.daemon import Daemon
from better_compute.bcd.fake import FakeNode
from better_compute.bcd.gpu import InstanceInUse
from better_compute.bcd.gpu_clients import (
    CDI_REFRESH_UNIT,
    DEFAULT_GPU_CLIENTS,
    RECORD_FILE,
    GpuClients,
    SimulatedSystemd,
    SystemctlProbe,
)
from better_compute.bcd.host import HostConverger
from better_compute.bcd.inventory import mig_instances
from better_compute.bcd.logs import Log
from better_compute.entrypoints.bcd import bcd_app
from better_compute.storage.store import Store
from better_compute.wire.nodes import LAYOUT_REFUSAL_REASON_MAX, NodeSpecPublic
from tests.bcd.test_daemon import booked_slice
from tests.builders import fleet_spec
from tests.node_world import NodeWorld

CLIENTS = ("nvsm.service", "nvidia-dcgm.service", "dcgm-exporter.service")
"""The list these tests give bcd: providers before consumers, as NVIDIA's lists are written."""

Journal = list[list[str]]


def stop(unit: str) -> list[str]:
    return ["systemctl", "stop", "--", unit]


def start(unit: str) -> list[str]:
    return ["systemctl", "start", "--", unit]


REFRESH = ["systemctl", "restart", "--", CDI_REFRESH_UNIT]


class HeldByClients:
    """The fake GPUs, refusing every change while a GPU client runs, as NVML does while DCGM or
    NVSM holds the device; each change the GPUs take is written to `journal`, beside systemctl's
    commands, so the order of the two shows."""

    def __init__(self, fake: FakeNode, systemd: SimulatedSystemd, journal: Journal) -> None:
        self.fake = fake
        self.systemd = systemd
        self.journal = journal

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fake, name)

    def _change(self, name: str, gpu: str, call: Callable[[], Any]) -> Any:
        holders = sorted(u for u in CLIENTS if self.systemd.active(u))
        if holders:
            raise InstanceInUse(f"{gpu}: In use by another client ({', '.join(holders)})")
        self.journal.append(["gpu", name, gpu])
        return call()

    def destroy_instance(self, gpu: str, gi_id: int) -> None:
        self._change("destroy", gpu, lambda: self.fake.destroy_instance(gpu, gi_id))

    def create_instance(self, gpu: str, profile: str, start: int) -> Any:
        return self._change("create", gpu, lambda: self.fake.create_instance(gpu, profile, start))

    def set_mig_mode(self, gpu: str, enabled: bool) -> bool:
        return bool(self._change("mig-mode", gpu, lambda: self.fake.set_mig_mode(gpu, enabled)))

    def reset_gpu(self, gpu: str) -> None:
        self._change("reset", gpu, lambda: self.fake.reset_gpu(gpu))


class Node:
    """A node's GPUs, its systemd (the clients running, nvsm installed but stopped, the CDI refresh
    unit installed) and a host converger over them, with its log in memory."""

    def __init__(self, tmp_path: Path, layout: str = "all-1g.10gb") -> None:
        self.fake = FakeNode.from_fleet(fleet_spec(nodes=2, mode="mig", layout=layout), "n-1")
        self.journal: Journal = []
        self.systemd = SimulatedSystemd(
            {
                "nvsm.service": "inactive",
                "nvidia-dcgm.service": "active",
                "dcgm-exporter.service": "active",
                CDI_REFRESH_UNIT: "inactive",
            },
            commands=self.journal,
        )
        self.gpus = HeldByClients(self.fake, self.systemd, self.journal)
        self.stream = io.StringIO()
        self.log = Log(self.stream)
        self.record = tmp_path / RECORD_FILE
        self.clients = GpuClients(CLIENTS, self.systemd, self.record, self.log)
        self.seconds = 0.0
        self.host = HostConverger(self.gpus, self.log, clients=self.clients, monotonic=lambda: self.seconds)

    def spec(self, layout: str | None, assignments: list[dict[str, object]] | None = None) -> NodeSpecPublic:
        return NodeSpecPublic.model_validate(
            {
                "node": self.fake.name,
                "generation": 1,
                "gpus": [{"uuid": g.uuid, "migLayout": layout} for g in self.fake.list_gpus()],
                "sharing": {"mode": "mig", "replicas": 1},
                "assignments": assignments or [],
            }
        )

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stream.getvalue().splitlines()]

    def running(self) -> set[str]:
        return {u for u, state in self.systemd.units.items() if state == "active"}


def profiles(fake: FakeNode, gpu: str) -> list[str]:
    [found] = [g for g in fake.list_gpus() if g.uuid == gpu]
    return sorted(gi.profile for gi in found.instances)


def test_gpu_clients_are_stopped_before_a_repartition_and_started_after_it_in_order(tmp_path: Path) -> None:
    node = Node(tmp_path)
    first = node.fake.list_gpus()[0].uuid
    assert node.host.converge(node.spec("all-3g.40gb"), ())
    assert profiles(node.fake, first) == ["3g.40gb", "3g.40gb"]
    commands = [c for c in node.journal if c[0] == "systemctl"]
    # Consumers stopped first, providers started first; nvsm was not running: not touched. The CDI
    # refresh comes once the GPUs are cut, before the clients read them again.
    assert commands == [
        stop("dcgm-exporter.service"),
        stop("nvidia-dcgm.service"),
        REFRESH,
        start("nvidia-dcgm.service"),
        start("dcgm-exporter.service"),
    ]
    changes = [i for i, c in enumerate(node.journal) if c[0] == "gpu"]
    assert changes and node.journal.index(stop("nvidia-dcgm.service")) < min(changes)
    assert max(changes) < node.journal.index(REFRESH)
    assert node.running() == {"nvidia-dcgm.service", "dcgm-exporter.service", CDI_REFRESH_UNIT}
    assert not node.record.exists()
    assert node.host.refused == {}


def test_without_stopping_the_clients_the_change_is_refused_as_on_a_node(tmp_path: Path) -> None:
    """The same change with no GPU client list: the running DCGM holds the GPUs, so it fails (what
    NVIDIA's MIG manager stops clients for), and the refusal is kept for the server."""
    node = Node(tmp_path)
    bare = HostConverger(node.gpus, node.log)
    first = node.fake.list_gpus()[0].uuid
    bare.converge(node.spec("all-3g.40gb"), ())
    assert profiles(node.fake, first) == ["1g.10gb"] * 7
    assert bare.refused[first].action == "repartition"
    assert "In use by another client" in bare.refused[first].reason


def test_nothing_is_stopped_or_refreshed_when_nothing_changes(tmp_path: Path) -> None:
    node = Node(tmp_path)
    assert not node.host.converge(node.spec("all-1g.10gb"), ())
    held = node.fake.list_gpus()[0].uuid
    assert not node.host.converge(node.spec("all-3g.40gb"), {g.uuid for g in node.fake.list_gpus()})
    assert node.host.unconverged(node.spec("all-3g.40gb")) != []  # held, so left as it is
    assert node.journal == []
    assert not node.record.exists()
    assert held not in node.host.refused


def test_a_gpu_nvml_did_not_read_whole_is_not_changed_and_nothing_is_stopped_for_it(tmp_path: Path) -> None:
    node = Node(tmp_path)
    listed = node.fake.list_gpus

    def half_read() -> tuple[Any, ...]:
        return tuple(dataclasses.replace(g, partial=True) for g in listed())

    node.fake.list_gpus = half_read  # type: ignore[method-assign]
    spec = node.spec("all-3g.40gb")
    assert not node.host.converge(spec, ())
    assert node.journal == []
    assert all(profiles(node.fake, g.uuid) == ["1g.10gb"] * 7 for g in listed())
    assert len(node.host.unconverged(spec)) == 2 and node.host.refused == {}


def test_gpu_clients_are_started_again_after_a_refused_change(tmp_path: Path) -> None:
    node = Node(tmp_path)
    first = node.fake.list_gpus()[0]
    node.fake.mark_busy(first.uuid, first.instances[0].gi_id)  # a tenant's process bcd does not know of
    spec = node.spec("all-3g.40gb")
    assert node.host.converge(spec, ())  # the other GPU changed, and a refusal appeared
    assert node.journal[-2:] == [start("nvidia-dcgm.service"), start("dcgm-exporter.service")]
    assert node.running() >= {"nvidia-dcgm.service", "dcgm-exporter.service"}
    refusal = node.host.refused[first.uuid]
    assert refusal.action == "repartition" and "in use" in refusal.reason
    assert node.host.unconverged(spec) == [first.uuid]
    assert {e["gpu"] for e in node.events() if e["event"] == "host.refused"} == {first.uuid}


def test_gpu_clients_are_started_again_when_the_pass_fails_outright(tmp_path: Path) -> None:
    """An error no converger expects (the driver gone mid-pass) leaves the pass at once; the units
    it stopped are started again on the way out."""
    node = Node(tmp_path)

    def lost(gpu: str, profile: str, start: int) -> Any:
        raise RuntimeError("NVML: GPU is lost")

    node.fake.create_instance = lost  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="GPU is lost"):
        node.host.converge(node.spec("all-3g.40gb"), ())
    assert node.journal[-3:] == [REFRESH, start("nvidia-dcgm.service"), start("dcgm-exporter.service")]
    assert not node.record.exists()


def test_a_client_that_will_not_stop_refuses_the_change_and_the_others_start_again(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.systemd.fail_stop.add("nvidia-dcgm.service")
    before = {g.uuid: profiles(node.fake, g.uuid) for g in node.fake.list_gpus()}
    spec = node.spec("all-3g.40gb")
    assert node.host.converge(spec, ())  # refusals appeared: the inventory goes out again
    assert {g.uuid: profiles(node.fake, g.uuid) for g in node.fake.list_gpus()} == before
    assert [c for c in node.journal if c[0] == "gpu"] == []
    assert node.journal == [
        stop("dcgm-exporter.service"),
        stop("nvidia-dcgm.service"),  # refused: nothing else is stopped, no GPU touched
        start("dcgm-exporter.service"),
    ]
    assert {r.action for r in node.host.refused.values()} == {"repartition"}
    assert all("nvidia-dcgm.service did not stop" in r.reason for r in node.host.refused.values())
    assert sorted(node.host.refused) == node.host.unconverged(spec)


def test_a_refused_gpu_is_tried_again_after_a_pause_that_doubles_so_clients_are_not_bounced(
    tmp_path: Path,
) -> None:
    """The daemon's passes come a second apart while a GPU is behind; each try of a refused GPU
    stops and starts DCGM. The GPU waits 1 s, 2 s, 4 s… (up to 5 minutes) between tries, and is tried
    at once when the spec's generation moves."""
    node = Node(tmp_path)
    first = node.fake.list_gpus()[0]
    node.fake.mark_busy(first.uuid, first.instances[0].gi_id)
    spec = node.spec("all-3g.40gb")

    def tried() -> int:
        node.host.converge(spec, ())
        stops = node.journal.count(stop("nvidia-dcgm.service"))
        node.journal.clear()
        return stops

    assert tried() == 1  # the first pass (the other GPU is cut in it too)
    assert tried() == 0  # at once: waits
    node.seconds += 1.0
    assert tried() == 1
    node.seconds += 1.5
    assert tried() == 0  # the pause doubled to 2 s
    node.seconds += 0.5
    assert tried() == 1
    for _ in range(20):
        node.seconds += 1000
        tried()
    node.seconds += 299
    assert tried() == 0  # at most 5 minutes apart
    node.seconds += 1
    assert tried() == 1
    assert tried() == 0
    spec = spec.model_copy(update={"generation": 2})
    assert tried() == 1  # a new generation: tried at once
    assert node.host.refused[first.uuid].action == "repartition"


def test_a_client_that_will_not_start_again_is_logged_and_the_change_stands(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.systemd.fail_start.add("nvidia-dcgm.service")
    spec = node.spec("all-3g.40gb")
    node.host.converge(spec, ())
    assert node.host.unconverged(spec) == [] and node.host.refused == {}
    assert node.journal[-1] == start("dcgm-exporter.service")
    failed = [e for e in node.events() if e["event"] == "host.clients-start-failed"]
    assert [e["unit"] for e in failed] == ["nvidia-dcgm.service"]
    assert not node.record.exists()


class Killed(BaseException):
    """The daemon killed (SIGKILL, a power cut): nothing after it runs."""


def test_a_daemon_killed_between_stop_and_start_starts_the_clients_on_its_next_start(tmp_path: Path) -> None:
    node = Node(tmp_path)

    def killed(gpu: str, profile: str, start: int) -> Any:
        # From here on the process is gone: systemctl is never called again by it.
        def dead(argv: Any) -> None:
            raise Killed

        node.systemd.run = dead  # type: ignore[method-assign]
        raise Killed

    node.fake.create_instance = killed  # type: ignore[method-assign]
    with pytest.raises(Killed):
        node.host.converge(node.spec("all-3g.40gb"), ())
    assert node.running() == set()  # DCGM and its exporter stopped, and nobody left to start them
    assert node.record.exists()

    del node.systemd.run  # the same node's systemd, and a new bcd process over the same state
    again = GpuClients(CLIENTS, node.systemd, node.record, node.log)
    node.journal.clear()
    again.recover()
    assert node.journal == [REFRESH, start("nvidia-dcgm.service"), start("dcgm-exporter.service")]
    assert node.running() == {"nvidia-dcgm.service", "dcgm-exporter.service", CDI_REFRESH_UNIT}
    assert not node.record.exists()
    again.recover()  # nothing left over: nothing to do
    assert len(node.journal) == 3


def test_a_record_left_over_is_honoured_by_the_next_pass_too(tmp_path: Path) -> None:
    """A daemon that did not run its start-up recovery (or a record written by hand) still gets
    the recorded units started when its next change ends, and only once."""
    node = Node(tmp_path)
    node.systemd.units["nvsm.service"] = "inactive"
    node.record.write_text(json.dumps({"units": ["nvsm.service"]}))
    node.host.converge(node.spec("all-3g.40gb"), ())
    starts = [c for c in node.journal if c[:2] == ["systemctl", "start"]]
    assert starts == [start("nvsm.service"), start("nvidia-dcgm.service"), start("dcgm-exporter.service")]
    assert not node.record.exists()


def test_a_spoilt_record_starts_nothing_and_says_so(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.record.write_text("{not json")
    node.clients.recover()
    assert [c for c in node.journal if c[:2] == ["systemctl", "start"]] == []
    assert [e["event"] for e in node.events()][:1] == ["host.clients-record-unread"]
    assert not node.record.exists()


def test_a_mig_mode_change_and_its_reset_happen_inside_one_stop(tmp_path: Path) -> None:
    node = Node(tmp_path, layout="all-disabled")
    node.host.converge(node.spec("all-1g.10gb"), ())
    kinds = [c[1] if c[0] == "gpu" else f"{c[1]} {c[-1]}" for c in node.journal]
    assert kinds.count("stop dcgm-exporter.service") == 1 and kinds.count("start dcgm-exporter.service") == 1
    first, last = kinds.index("stop nvidia-dcgm.service"), kinds.index(f"restart {CDI_REFRESH_UNIT}")
    inside = kinds[first + 1 : last]
    assert {"mig-mode", "reset", "create"} <= set(inside)
    assert all(not k.startswith(("stop", "start")) for k in inside)
    assert node.host.unconverged(node.spec("all-1g.10gb")) == []


def test_no_cdi_refresh_where_its_unit_is_not_installed_or_none_is_named(tmp_path: Path) -> None:
    node = Node(tmp_path)
    del node.systemd.units[CDI_REFRESH_UNIT]
    node.host.converge(node.spec("all-3g.40gb"), ())
    assert not [c for c in node.journal if c[1] == "restart"]
    again = Node(tmp_path / "b")
    again.host.clients = GpuClients(CLIENTS, again.systemd, again.record, again.log, cdi_refresh=None)
    again.host.converge(again.spec("all-3g.40gb"), ())
    assert not [c for c in again.journal if c[1] == "restart"]


def test_a_refusal_keeps_its_since_is_bounded_and_clears_once_the_gpu_converges(tmp_path: Path) -> None:
    node = Node(tmp_path)
    first = node.fake.list_gpus()[0]
    node.fake.mark_busy(first.uuid, first.instances[0].gi_id)
    spec = node.spec("all-3g.40gb")
    node.host.converge(spec, ())
    since = node.host.refused[first.uuid].since
    assert not node.host.converge(spec, ())  # refused again, the same way: nothing new to report
    assert node.host.refused[first.uuid].since == since
    node.fake.mark_busy(first.uuid, first.instances[0].gi_id, busy=False)
    node.seconds += 60  # its pause over
    assert node.host.converge(spec, ())
    assert node.host.refused == {}
    assert "host.refusal-cleared" in [e["event"] for e in node.events()]

    long = HeldByClients(node.fake, node.systemd, [])
    long.destroy_instance = lambda gpu, gi: (_ for _ in ()).throw(InstanceInUse("x" * 5000))  # type: ignore[method-assign]
    bare = HostConverger(long, node.log)
    bare.converge(node.spec("all-1g.10gb"), ())
    assert bare.refused
    for refusal in bare.refused.values():
        assert len(refusal.reason) == LAYOUT_REFUSAL_REASON_MAX and refusal.reason.endswith("…")


def test_unit_lists_and_files(tmp_path: Path) -> None:
    assert gpu_clients.configured_units(None, None) == DEFAULT_GPU_CLIENTS
    assert gpu_clients.configured_units("", None) == ()
    assert gpu_clients.configured_units(" a.service, b ,a.service,", None) == ("a.service", "b")
    clients_file = tmp_path / "clients.yaml"
    clients_file.write_text("version: v1\nsystemd-services:\n  - nvsm.service\n  - nvidia-dcgm.service\n")
    assert gpu_clients.configured_units(None, clients_file) == ("nvsm.service", "nvidia-dcgm.service")
    for bad in ("--now", "a b.service", "x;rm", "a" * 300):
        with pytest.raises(ValueError, match="not a systemd unit name"):
            gpu_clients.parse_units(bad)
    clients_file.write_text("systemd-services: [a.service]\n")
    with pytest.raises(ValueError, match="version: v1"):
        gpu_clients.read_clients_file(clients_file)
    with pytest.raises(ValueError, match="not both"):
        gpu_clients.configured_units("a", clients_file)
    assert "nvidia-persistenced.service" not in DEFAULT_GPU_CLIENTS


def test_bcd_run_refuses_a_bad_unit_name_with_a_clear_error(tmp_path: Path) -> None:
    for option in ("--gpu-clients=nvsm.service,--now", "--cdi-refresh=a b"):
        result = CliRunner().invoke(bcd_app, ["run", "--state-dir", str(tmp_path), option])
        assert result.exit_code == 2, result.output
        assert "is not a systemd unit name" in result.output
    missing = tmp_path / "none.yaml"
    result = CliRunner().invoke(
        bcd_app, ["run", "--state-dir", str(tmp_path), "--gpu-clients-file", str(missing)]
    )
    assert result.exit_code == 2 and "cannot read the GPU clients file" in result.output


def test_the_real_systemctl_says_an_unknown_unit_is_neither_active_nor_installed() -> None:
    """The probe against this machine's systemctl (with or without systemd running): a unit that
    does not exist is not active and not installed, so nothing is stopped or restarted for it."""
    probe = SystemctlProbe()
    assert not probe.active("bc-test-no-such-unit.service")
    assert not probe.exists("bc-test-no-such-unit.service")


# -- the daemon and the server ------------------------------------------------------------------------


@pytest.fixture
def world(store: Store, tmp_path: Path) -> NodeWorld:
    return NodeWorld(store, tmp_path)


def daemon_with_clients(
    world: NodeWorld, node: str, systemd: SimulatedSystemd, layout: str = "all-1g.10gb"
) -> tuple[Daemon, FakeNode]:
    identity = world.join(node)
    fake = FakeNode.from_fleet(fleet_spec(nodes=2, mode="mig", layout=layout), node)
    # The wrapper is not a FakeNode, so the daemon would read this machine's own driver tree: give it
    # the simulated one a fake node gets.
    tree = node_tree.simulated(world.tmp_path / node / "node-root")
    daemon = Daemon(
        identity,
        HeldByClients(fake, systemd, []),  # type: ignore[arg-type]
        world.node(identity),
        cdi_root=world.tmp_path / node / "cdi",
        node_root=tree.root,
        log=Log(io.StringIO(), node=node),
        systemd=systemd,
        gpu_clients=CLIENTS,
        cdi_refresh=CDI_REFRESH_UNIT,
        wait=0,
    )
    daemon.starting()
    return daemon, fake


def running_clients() -> SimulatedSystemd:
    return SimulatedSystemd.running(["nvidia-dcgm.service", "dcgm-exporter.service", CDI_REFRESH_UNIT])


def test_a_refused_layout_reaches_the_server_and_clears_once_the_gpu_converges(world: NodeWorld) -> None:
    """The node's GPUs are at 3g.40gb, its pool's layout all-1g.10gb; a process bcd does not know of
    holds one instance, so re-cutting that GPU is refused."""
    systemd = running_clients()
    daemon, fake = daemon_with_clients(world, "n-1", systemd, layout="all-3g.40gb")
    assert daemon.flush()
    stuck = fake.list_gpus()[0]
    fake.mark_busy(stuck.uuid, stuck.instances[0].gi_id)
    spec = daemon.compute.nodes.spec("n-1")
    assert {g.mig_layout for g in spec.gpus} == {"all-1g.10gb"}
    daemon.converge(spec)
    assert daemon.flush()
    [shown] = [
        n for n in world.http.get("/v1/nodes", headers=world.admin).json()["items"] if n["id"] == "n-1"
    ]
    [refused] = shown["layoutRefused"]
    assert (refused["gpu"], refused["action"]) == (stuck.uuid, "repartition")
    assert "in use" in refused["reason"] and refused["since"]
    gpus = world.http.get("/v1/gpus", params={"node": "n-1"}, headers=world.admin).json()["items"]
    by_uuid = {g["uuid"]: g for g in gpus}
    assert by_uuid[stuck.uuid]["layoutRefused"]["action"] == "repartition"
    assert all(g["layoutRefused"] is None for u, g in by_uuid.items() if u != stuck.uuid)
    events = world.http.get("/v1/events", params={"type": "node.layout_refused"}, headers=world.admin).json()
    assert [(e["subject"], e["payload"]["gpu"], e["payload"]["action"]) for e in events["items"]] == [
        ("n-1", stuck.uuid, "repartition")
    ]
    found = world.http.get("/v1/doctor", headers=world.admin).json()["findings"]
    [finding] = [f for f in found if f["code"] == "node.layout-refused"]
    assert finding["subject"] == "n-1" and stuck.uuid in finding["detail"] and "in use" in finding["detail"]
    # A tenant sees no fleet-wide event of it.
    mine = world.http.get("/v1/events", params={"type": "node.layout_refused"}, headers=world.platform).json()
    assert mine["items"] == []

    daemon.converge(spec)  # refused again: no new event
    daemon.enqueue(daemon.inventory())
    assert daemon.flush()
    events = world.http.get("/v1/events", params={"type": "node.layout_refused"}, headers=world.admin).json()
    assert len(events["items"]) == 1

    fake.mark_busy(stuck.uuid, stuck.instances[0].gi_id, busy=False)
    daemon.converge(spec.model_copy(update={"generation": spec.generation + 1}))  # a new generation: at once
    assert daemon.flush()
    [shown] = [
        n for n in world.http.get("/v1/nodes", headers=world.admin).json()["items"] if n["id"] == "n-1"
    ]
    assert shown["layoutRefused"] == []
    found = world.http.get("/v1/doctor", headers=world.admin).json()["findings"]
    assert [f for f in found if f["code"] == "node.layout-refused"] == []
    assert systemd.active("nvidia-dcgm.service") and systemd.active("dcgm-exporter.service")


def test_an_inventory_naming_a_refusal_for_a_gpu_it_does_not_list_is_refused(world: NodeWorld) -> None:
    daemon, fake = world.daemon("n-1")
    assert daemon.flush()
    report = daemon.inventory()
    report["layoutRefused"] = [
        {"gpu": "GPU-not-here", "action": "repartition", "reason": "x", "since": "2026-01-01T00:00:00Z"}
    ]
    with pytest.raises(Exception, match="does not list"):
        daemon.compute.nodes.report("n-1", report)
    report["layoutRefused"] = [
        {"gpu": fake.list_gpus()[0].uuid, "action": "reset", "reason": "x", "since": "2026-01-01T00:00:00"}
    ]
    with pytest.raises(Exception, match="timezone"):
        daemon.compute.nodes.report("n-1", report)


def test_a_restarted_daemon_starts_the_clients_its_killed_run_left_stopped(world: NodeWorld) -> None:
    systemd = running_clients()
    daemon, _ = daemon_with_clients(world, "n-1", systemd)
    assert daemon.host.clients is not None
    daemon.host.clients.stop()  # killed here, mid-change
    assert not systemd.active("nvidia-dcgm.service")
    systemd.commands.clear()
    identity = daemon.identity
    again = Daemon(
        identity,
        daemon.backend,
        daemon.compute,
        cdi_root=daemon.devices.cdi_root,
        log=Log(io.StringIO(), node="n-1"),
        systemd=systemd,
        gpu_clients=CLIENTS,
        cdi_refresh=CDI_REFRESH_UNIT,
        wait=0,
    )
    again.starting()
    assert systemd.commands == [REFRESH, start("nvidia-dcgm.service"), start("dcgm-exporter.service")]
    assert not (identity.state_dir / RECORD_FILE).exists()


def test_a_bound_instance_keeps_its_cdi_spec_through_a_recut_of_its_gpu(world: NodeWorld) -> None:
    """The pass that re-cuts a GPU around a handed-over MIG instance (kept where it is, same uuid)
    stops the clients, changes the GPU, refreshes NVIDIA's spec, starts the clients, and its devices
    pass leaves the allocation its own spec, naming its instance."""
    systemd = running_clients()
    daemon, fake = daemon_with_clients(world, "n-1", systemd, layout="mixed:4g.40gb+3x1g.10gb")
    gpu = fake.list_gpus()[0]
    [kept] = [gi for gi in gpu.instances if (gi.profile, gi.placement_start) == ("1g.10gb", 4)]
    fake.mark_busy(gpu.uuid, kept.gi_id)  # the tenant's process runs on it
    mig_uuid = mig_instances(kept)[0].uuid
    atom = booked_slice(fake, gpu.uuid, "1g.10gb", 4)
    spec = {
        "node": "n-1",
        "generation": 1,
        "gpus": [{"uuid": g.uuid, "migLayout": "mixed:4g.40gb+3x1g.10gb"} for g in fake.list_gpus()],
        "sharing": {"mode": "mig", "replicas": 1},
        "assignments": [{"allocationId": "res-a", "atoms": [atom], "env": {}}],
    }
    daemon.converge(NodeSpecPublic.model_validate(spec))
    path = cdi.spec_path(daemon.devices.cdi_root, "res-a")
    assert mig_uuid in path.read_text()
    systemd.commands.clear()

    recut = {
        **spec,
        "generation": 2,
        "gpus": [{"uuid": g.uuid, "migLayout": "all-1g.10gb"} for g in fake.list_gpus()],
    }
    daemon.converge(NodeSpecPublic.model_validate(recut))
    [now] = [g for g in fake.list_gpus() if g.uuid == gpu.uuid]
    assert sorted((gi.profile, gi.placement_start) for gi in now.instances) == [
        ("1g.10gb", s) for s in range(7)
    ]
    [still] = [gi for gi in now.instances if gi.placement_start == 4]
    assert mig_instances(still)[0].uuid == mig_uuid
    assert systemd.commands[-3:] == [REFRESH, start("nvidia-dcgm.service"), start("dcgm-exporter.service")]
    assert path.exists() and mig_uuid in path.read_text()
