"""The host converger's MPS part against the fake backend: an mps pool's GPUs in exclusive-process
before the daemon serves them and back to default after (only those `bcd` set), a MIG GPU or one
NVML refuses left out with its reason, the mode set again after a reboot before the daemon starts."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path

from better_compute.bcd.fake import FakeNode
from better_compute.bcd.gpu import ComputeModeRefused
from better_compute.bcd.host import HostConverger
from better_compute.bcd.logs import Log
from better_compute.bcd.mps import CommandFailed, MpsPaths, MpsUnit
from better_compute.storage.store import Store
from better_compute.wire.nodes import NodeSpecPublic
from tests.node_world import NodeWorld


class Systemd:
    """Records each systemctl call with the GPUs' compute modes at that moment; the unit is active
    from a `start`/`restart` that succeeded until it is stopped or its daemon ends (`running`)."""

    def __init__(self, node: FakeNode) -> None:
        self.node = node
        self.calls: list[tuple[str, dict[str, str]]] = []
        self.fail: str | None = None
        self.running = False

    def run(self, argv: Sequence[str]) -> None:
        verb = argv[1]
        self.calls.append((verb, {g.uuid: g.compute_mode for g in self.node.gpus}))
        if verb == self.fail:
            raise CommandFailed(f"systemctl {verb} bcd-mps.service failed: Job failed")
        if verb in ("start", "restart"):
            self.running = True
        elif verb == "disable" and "--now" in argv:
            self.running = False

    def active(self, unit: str) -> bool:
        assert unit == "bcd-mps.service"
        return self.running

    def verbs(self) -> list[str]:
        return [verb for verb, _ in self.calls]


class Bcd:
    """A node's host converger with its gpu-sharing unit over `state`, and its log lines."""

    def __init__(self, node: FakeNode, state: Path) -> None:
        self.stream = io.StringIO()
        self.systemd = Systemd(node)
        self.unit = MpsUnit(state / "systemd", MpsPaths.under(state / "mps"), self.systemd)
        self.host = HostConverger(node, Log(self.stream), self.unit)

    def events(self, *names: str) -> list[dict[str, object]]:
        lines = [json.loads(line) for line in self.stream.getvalue().splitlines()]
        return [line for line in lines if line["event"] in names]


def spec(
    node: FakeNode, mode: str = "mps", replicas: int = 4, layout: str | None = "all-disabled"
) -> NodeSpecPublic:
    return NodeSpecPublic.model_validate(
        {
            "node": node.name,
            "generation": 1,
            "gpus": [{"uuid": g.uuid, "migLayout": layout} for g in node.gpus],
            "sharing": {"mode": mode, "replicas": replicas},
            "assignments": [],
        }
    )


def modes(node: FakeNode) -> list[str]:
    return [g.compute_mode for g in node.gpus]


def test_mps_gpus_are_exclusive_process_before_the_daemon_starts_and_default_once_it_stops(
    tmp_path: Path,
) -> None:
    node = FakeNode.build("n", "H100-80GB", 2)
    bcd = Bcd(node, tmp_path)
    assert bcd.host.converge(spec(node, replicas=4), set())
    assert bcd.systemd.verbs() == ["daemon-reload", "disable", "restart"]
    assert set(bcd.systemd.calls[-1][1].values()) == {"exclusive-process"}, "set before the daemon starts"
    text = bcd.unit.path.read_text()
    first, second = sorted(g.uuid for g in node.gpus)
    assert f"CUDA_VISIBLE_DEVICES={first},{second}" in text
    assert "set_default_active_thread_percentage 25 |" in text
    assert f"set_default_device_pinned_mem_limit {first} 20480M |" in text  # 80 GiB / 4
    assert [(e["gpu"], e["mode"]) for e in bcd.events("mps.compute-mode")] == [
        (first, "exclusive-process"),
        (second, "exclusive-process"),
    ]
    assert not bcd.host.converge(spec(node, replicas=4), set()), "nothing to do twice"
    bcd.systemd.calls.clear()
    assert bcd.host.converge(spec(node, mode="exclusive", layout=None), set())
    assert bcd.systemd.calls[0] == ("disable", {first: "exclusive-process", second: "exclusive-process"})
    assert modes(node) == ["default", "default"], "given back only once the daemon has stopped"
    assert not bcd.unit.path.exists() and bcd.unit.exclusive.gpus() == set()


def test_only_the_gpus_bcd_put_in_exclusive_process_go_back_even_after_bcd_restarts(tmp_path: Path) -> None:
    node = FakeNode.build("n", "H100-80GB", 2)
    set_by_operator, set_by_bcd = node.gpus
    set_by_operator.compute_mode = "exclusive-process"
    Bcd(node, tmp_path).host.converge(spec(node), set())
    assert modes(node) == ["exclusive-process", "exclusive-process"]
    restarted = Bcd(node, tmp_path)  # a new process over the same state directory
    restarted.host.converge(spec(node, mode="timeslice", layout=None), set())
    assert set_by_bcd.compute_mode == "default"
    assert set_by_operator.compute_mode == "exclusive-process", "not bcd's to change"


def test_a_mig_gpu_is_left_out_of_the_daemon_with_its_reason_logged_once(tmp_path: Path) -> None:
    node = FakeNode.build("n", "A100-80GB", 2)
    node.gpus[0].apply_layout("all-1g.10gb")
    mig, whole = node.gpus
    bcd = Bcd(node, tmp_path)
    bcd.host.converge(spec(node, layout=None), set())
    bcd.host.converge(spec(node, layout=None), set())
    refused = bcd.events("mps.compute-mode-refused")
    assert [(e["gpu"], e["mode"]) for e in refused] == [(mig.uuid, "exclusive-process")]
    assert "MIG mode is on" in str(refused[0]["reason"])
    assert f"CUDA_VISIBLE_DEVICES={whole.uuid}\n" in bcd.unit.path.read_text()
    assert modes(node) == ["default", "exclusive-process"]
    assert bcd.unit.exclusive.gpus() == {whole.uuid}


def test_the_spec_turning_mig_off_lets_the_daemon_serve_the_gpu_in_the_same_pass(tmp_path: Path) -> None:
    """An mps pool's layout is `all-disabled`: the MIG mode change comes first, then the daemon."""
    node = FakeNode.build("n", "A100-80GB", 1)
    node.gpus[0].apply_layout("all-1g.10gb")
    bcd = Bcd(node, tmp_path)
    assert bcd.host.converge(spec(node), set())
    assert not node.gpus[0].mig_current and modes(node) == ["exclusive-process"]
    assert bcd.events("mps.compute-mode-refused") == []


def test_a_gpu_nvml_refuses_is_left_out_and_not_recorded_as_bcds(tmp_path: Path) -> None:
    class Refusing(FakeNode):
        def set_compute_mode(self, gpu: str, mode: str) -> None:
            if gpu == self.gpus[0].uuid:
                raise ComputeModeRefused(f"NVML: no permission to set the compute mode of {gpu}")
            super().set_compute_mode(gpu, mode)

    built = FakeNode.build("n", "H100-80GB", 2)
    node = Refusing(name=built.name, gpus=built.gpus)
    bcd = Bcd(node, tmp_path)
    bcd.host.converge(spec(node), set())
    refused = bcd.events("mps.compute-mode-refused")
    assert [e["gpu"] for e in refused] == [node.gpus[0].uuid] and "no permission" in str(refused[0]["reason"])
    assert node.gpus[0].uuid not in bcd.unit.path.read_text()
    assert bcd.unit.exclusive.gpus() == {node.gpus[1].uuid}


def test_after_a_reboot_the_mode_is_set_again_before_the_daemon_is_started(tmp_path: Path) -> None:
    node = FakeNode.build("n", "H100-80GB", 2)
    Bcd(node, tmp_path).host.converge(spec(node), set())
    node.reboot()
    assert modes(node) == ["default", "default"]
    booted = Bcd(node, tmp_path)  # bcd starts with the node; the unit is not enabled, so nothing ran
    assert booted.host.converge(spec(node), set())
    assert booted.systemd.calls == [("restart", {g.uuid: "exclusive-process" for g in node.gpus})]
    node.gpus[1].compute_mode = "default"  # a driver reload under a running bcd
    booted.systemd.calls.clear()
    assert booted.host.converge(spec(node), set())
    assert booted.systemd.calls == [("restart", {g.uuid: "exclusive-process" for g in node.gpus})]


def test_a_restarted_bcd_starts_the_unit_without_restarting_a_running_daemon(tmp_path: Path) -> None:
    node = FakeNode.build("n", "H100-80GB", 1)
    Bcd(node, tmp_path).host.converge(spec(node), set())
    again = Bcd(node, tmp_path)
    again.host.converge(spec(node), set())
    assert again.systemd.verbs() == ["start"] and again.events("mps.compute-mode") == []


def test_a_node_leaving_its_mps_pool_stops_the_daemon_before_its_layout_changes(tmp_path: Path) -> None:
    """An MPS server holds its GPU, which a MIG mode change's reset needs idle: the daemon stops and
    the compute mode goes back first."""
    node = FakeNode.build("n", "H100-80GB", 1)
    bcd = Bcd(node, tmp_path)
    bcd.host.converge(spec(node), set())
    bcd.host.converge(spec(node, mode="mig", layout="all-1g.10gb"), set())
    order = [e["event"] for e in bcd.events("mps.unit", "mps.compute-mode", "host.mig-mode")]
    assert order == ["mps.compute-mode", "mps.unit", "mps.unit", "mps.compute-mode", "host.mig-mode"]
    assert node.gpus[0].mig_current and modes(node) == ["default"]


def test_a_failing_systemctl_is_logged_and_the_restart_is_owed_to_the_next_pass(tmp_path: Path) -> None:
    node = FakeNode.build("n", "H100-80GB", 1)
    bcd = Bcd(node, tmp_path)
    bcd.systemd.fail = "restart"
    bcd.host.converge(spec(node), set())
    assert [e["reason"] for e in bcd.events("mps.failed")] == [
        "systemctl restart bcd-mps.service failed: Job failed"
    ]
    bcd.systemd.fail = None
    bcd.systemd.calls.clear()
    assert bcd.host.converge(spec(node), set())
    assert bcd.systemd.verbs() == ["restart"]
    bcd.systemd.fail = "disable"
    bcd.host.converge(spec(node, mode="exclusive", layout=None), set())
    assert modes(node) == ["exclusive-process"], "not given back while the daemon may still serve it"


def test_an_mps_nodes_bcd_loop_serves_its_gpus_in_exclusive_process_and_reports_the_spec_observed(
    store: Store, tmp_path: Path
) -> None:
    """`bcd run --nvml fake` on a node of an mps pool, against the real app: the spec's replicas
    become the unit's per-client limits, the GPUs are exclusive-process, the generation observed."""
    world = NodeWorld(store, tmp_path, mode="mps", layout="all-disabled")
    daemon, node = world.daemon("n-1")
    assert daemon.step(False)
    assert modes(node) == ["exclusive-process", "exclusive-process"]
    text = (daemon.identity.state_dir / "systemd" / "bcd-mps.service").read_text()
    first, second = sorted(g.uuid for g in node.gpus)  # L40S-48GB, the pool's replicas 4
    assert f"CUDA_VISIBLE_DEVICES={first},{second}\n" in text
    assert "set_default_active_thread_percentage 25 |" in text
    assert f"set_default_device_pinned_mem_limit {second} {48 * 1024 // 4}M |" in text
    assert daemon.observed == daemon.generation


def test_a_daemon_a_tenant_quit_is_started_again_after_the_modes_are_checked(tmp_path: Path) -> None:
    """`quit` through the pipe directory ends the daemon cleanly; the next pass finds the unit
    inactive, puts back a mode that changed meanwhile, starts the daemon and says so."""
    node = FakeNode.build("n", "H100-80GB", 2)
    bcd = Bcd(node, tmp_path)
    bcd.host.converge(spec(node), set())
    bcd.systemd.calls.clear()
    assert not bcd.host.converge(spec(node), set()), "a running daemon is left alone"
    assert bcd.systemd.calls == []
    bcd.systemd.running = False  # a slot's process sent `quit`
    assert bcd.host.converge(spec(node), set())
    assert bcd.systemd.calls == [("start", {g.uuid: "exclusive-process" for g in node.gpus})]
    assert [e["gpus"] for e in bcd.events("mps.daemon-inactive")] == [sorted(g.uuid for g in node.gpus)]
    bcd.systemd.running = False
    node.gpus[0].compute_mode = "default"  # and a driver reload, meanwhile
    bcd.systemd.calls.clear()
    assert bcd.host.converge(spec(node), set())
    assert bcd.systemd.calls == [("restart", {g.uuid: "exclusive-process" for g in node.gpus})]


def test_a_gpu_goes_back_to_the_compute_mode_it_had_not_to_default(tmp_path: Path) -> None:
    """An operator had the GPU `prohibited` (no compute context at all) before the node joined an
    mps pool: leaving the pool gives it back `prohibited`, also from a restarted `bcd`."""
    node = FakeNode.build("n", "H100-80GB", 2)
    prohibited, default = node.gpus
    prohibited.compute_mode = "prohibited"
    Bcd(node, tmp_path).host.converge(spec(node), set())
    assert modes(node) == ["exclusive-process", "exclusive-process"]
    restarted = Bcd(node, tmp_path)
    restarted.host.converge(spec(node, mode="exclusive", layout=None), set())
    assert modes(node) == ["prohibited", "default"]
    assert [(e["gpu"], e["mode"]) for e in restarted.events("mps.compute-mode")] == [
        (prohibited.uuid, "prohibited"),
        (default.uuid, "default"),
    ]
    assert restarted.unit.exclusive.gpus() == set()


def test_a_record_an_earlier_bcd_wrote_with_uuids_only_gives_its_gpus_back_to_default(tmp_path: Path) -> None:
    node = FakeNode.build("n", "H100-80GB", 1)
    (gpu,) = node.gpus
    gpu.compute_mode = "exclusive-process"
    record = tmp_path / "mps" / "exclusive-process.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"gpus": [gpu.uuid]}))
    bcd = Bcd(node, tmp_path)
    assert bcd.unit.exclusive.modes() == {gpu.uuid: "default"}
    bcd.host.converge(spec(node, mode="exclusive", layout=None), set())
    assert modes(node) == ["default"] and bcd.unit.exclusive.modes() == {}


def test_a_gpu_whose_compute_mode_cannot_be_read_is_left_out_neither_set_nor_restarted_for(
    tmp_path: Path,
) -> None:
    """NVML would not give the mode ("unknown"): it cannot be shown exclusive-process, so the daemon
    does not serve it; it is not set (which would restart the daemon on every pass), and the
    refusal is logged once."""

    class Counting(FakeNode):
        sets: list[tuple[str, str]]

        def set_compute_mode(self, gpu: str, mode: str) -> None:
            self.sets.append((gpu, mode))
            super().set_compute_mode(gpu, mode)

    built = FakeNode.build("n", "H100-80GB", 2)
    node = Counting(name=built.name, gpus=built.gpus)
    node.sets = []
    unread, readable = node.gpus
    unread.compute_mode = "unknown"
    bcd = Bcd(node, tmp_path)
    bcd.host.converge(spec(node), set())
    for _ in range(3):
        bcd.systemd.calls.clear()
        assert not bcd.host.converge(spec(node), set())
        assert bcd.systemd.calls == [], "no restart for it"
    assert node.sets == [(readable.uuid, "exclusive-process")]
    assert f"CUDA_VISIBLE_DEVICES={readable.uuid}\n" in bcd.unit.path.read_text()
    refused = bcd.events("mps.compute-mode-refused")
    assert [e["gpu"] for e in refused] == [unread.uuid]
    assert "cannot be shown exclusive-process" in str(refused[0]["reason"])
    assert bcd.unit.exclusive.gpus() == {readable.uuid}


def test_a_gpu_whose_mode_cannot_be_read_keeps_its_record_until_it_can_be_given_back(tmp_path: Path) -> None:
    node = FakeNode.build("n", "H100-80GB", 1)
    (gpu,) = node.gpus
    bcd = Bcd(node, tmp_path)
    bcd.host.converge(spec(node), set())
    gpu.compute_mode = "unknown"  # NVML stops answering, the node leaves its pool
    bcd.host.converge(spec(node, mode="exclusive", layout=None), set())
    assert bcd.unit.exclusive.gpus() == {gpu.uuid}, "not known to be back, not forgotten"
    gpu.compute_mode = "exclusive-process"  # NVML answers again
    bcd.host.converge(spec(node, mode="exclusive", layout=None), set())
    assert modes(node) == ["default"] and bcd.unit.exclusive.gpus() == set()
