"""The runtime converger against the in-process fake runtime (podman's contract): a bound container
assignment gets one container, started, probed and reported; a restarted converger adopts it; strays
go; a crash is restarted with back-off and reported crash-looping; reports go only on change. Time
is a test clock: no sleep decides an outcome."""

from __future__ import annotations

import http.client
import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from better_compute.bcd.containers import NoContainer, container_name, spec_digest
from better_compute.bcd.daemon import Daemon
from better_compute.bcd.fake import FakeNode
from better_compute.bcd.fake_runtime import FakeRuntime
from better_compute.bcd.identity import Identity
from better_compute.bcd.logs import Log
from better_compute.bcd.node_tree import simulated
from better_compute.bcd.podman import PodmanRuntime
from better_compute.bcd.runtime import CRASH_LOOP, RuntimeConverger, backoff
from better_compute.domain.fleet.atoms import atom_id_for
from better_compute.domain.kernel.containers import parse_container
from better_compute.entrypoints.bcd import NvmlKind, RuntimeKind, _container_runtime
from better_compute.wire.nodes import AssignmentPublic, NodeSpecPublic
from tests.builders import fleet_spec

NODE = "node-a"
IMAGE = "localhost/model:1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def container(**extra: Any) -> dict[str, Any]:
    return {"image": IMAGE, "ports": [{"containerPort": 8080}], **extra}


def assigned(
    allocation: str, doc: dict[str, Any] | None, atoms: tuple[str, ...] = ("gpu-1/gpu",), tenant: str = "acme"
) -> AssignmentPublic:
    return AssignmentPublic.model_validate(
        {"allocationId": allocation, "atoms": list(atoms), "env": {}, "container": doc, "tenantId": tenant}
    )


@pytest.fixture
def runtime() -> Iterator[FakeRuntime]:
    fake = FakeRuntime(NODE, images=[IMAGE])
    try:
        yield fake
    finally:
        fake.close()


def converger(runtime: FakeRuntime, clock: Clock, **kw: Any) -> RuntimeConverger:
    return RuntimeConverger(runtime, NODE, advertise="10.0.0.7", clock=clock, stop_timeout=1, **kw)


def one(reports: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(reports) == 1, reports
    return reports[0]


def test_a_bound_container_assignment_gets_one_started_container_that_answers_on_its_address(
    runtime: FakeRuntime,
) -> None:
    clock = Clock()
    rc = converger(runtime, clock)
    a = assigned("dep1.r0", container())
    first = one(rc.converge([a], {"dep1.r0"}))
    (found,) = runtime.list()
    assert found.state == "running" and found.name == container_name(NODE, "dep1.r0")
    assert found.spec_digest == spec_digest(parse_container(container()), ["gpu-1/gpu"], "acme")
    assert found.atoms == ("gpu-1/gpu",)
    host_port = found.ports[8080]
    # No probe: ready once it runs (the next pass sees it running).
    assert first == {
        "kind": "ReplicaState",
        "allocationId": "dep1.r0",
        "state": "created",
        "restarts": 0,
        "address": f"10.0.0.7:{host_port}",
    }
    assert one(rc.converge([a], {"dep1.r0"}))["state"] == "ready"
    assert rc.converge([a], {"dep1.r0"}) == []  # nothing changed: nothing reported
    # The container serves real HTTP: /ping, and POSTs naming the allocation.
    conn = http.client.HTTPConnection("127.0.0.1", host_port, timeout=5)
    conn.request("POST", "/invocations", body=b'{"x": 1}')
    answer = json.loads(conn.getresponse().read())
    conn.close()
    assert answer["allocation"] == "dep1.r0" and answer["body"] == '{"x": 1}'
    assert "POST /invocations" in runtime.logs("dep1.r0", 10)


def test_an_assignment_not_bound_or_without_a_container_gets_none(runtime: FakeRuntime) -> None:
    rc = converger(runtime, Clock())
    assert rc.converge([assigned("r1", container()), assigned("r2", None)], {"r2"}) == []
    assert runtime.list() == []


def test_a_new_converger_adopts_the_container_and_never_doubles_it(runtime: FakeRuntime) -> None:
    clock = Clock()
    a = assigned("dep1.r0", container())
    first = converger(runtime, clock)
    first.converge([a], {"dep1.r0"})
    first.converge([a], {"dep1.r0"})
    (before,) = runtime.list()
    # The daemon is killed; a new one (nothing in memory) sees the container by its labels.
    again = converger(runtime, clock)
    reports = again.converge([a], {"dep1.r0"})
    assert [f.id for f in runtime.list()] == [before.id]
    assert one(reports)["state"] == "ready" and one(reports)["address"] == f"10.0.0.7:{before.ports[8080]}"


def test_strays_and_released_allocations_are_stopped_removed_and_reported(runtime: FakeRuntime) -> None:
    clock = Clock()
    rc = converger(runtime, clock)
    rc.converge([assigned("keep", container()), assigned("gone", container())], {"keep", "gone"})
    # A container of this node this converger never made (an earlier daemon's, its allocation gone).
    runtime.start(runtime.create("left-over", parse_container(container())))
    other_node = FakeRuntime("node-b", images=[IMAGE])
    other_node.create("theirs", parse_container(container()))

    reports = rc.converge([assigned("keep", container())], {"keep"})
    removed = sorted(r["allocationId"] for r in reports if r["state"] == "removed")
    assert removed == ["gone", "left-over"]
    assert [f.allocation_id for f in runtime.list()] == ["keep"]
    assert len(other_node.list()) == 1
    other_node.close()


def test_a_changed_spec_recreates_the_container(runtime: FakeRuntime) -> None:
    rc = converger(runtime, Clock())
    rc.converge([assigned("r", container())], {"r"})
    (old,) = runtime.list()
    rc.converge([assigned("r", container(env={"MODE": "fast"}))], {"r"})
    (new,) = runtime.list()
    assert new.id != old.id and new.state == "running"
    assert new.spec_digest == spec_digest(
        parse_container(container(env={"MODE": "fast"})), ["gpu-1/gpu"], "acme"
    )


def test_a_copy_moved_to_another_atom_of_the_same_node_gets_a_new_container(runtime: FakeRuntime) -> None:
    """The CDI device is resolved when a container is created: a copy that moves to other atoms of
    the same node under the same name must not keep running on the old one."""
    rc = converger(runtime, Clock())
    rc.converge([assigned("copy:chat:0", container(), atoms=("gpu-1/mig:1g.10gb@0",))], {"copy:chat:0"})
    (old,) = runtime.list()
    rc.converge([assigned("copy:chat:0", container(), atoms=("gpu-1/mig:1g.10gb@1",))], {"copy:chat:0"})
    (new,) = runtime.list()
    assert new.id != old.id and new.state == "running" and new.atoms == ("gpu-1/mig:1g.10gb@1",)


def test_a_component_made_again_by_another_tenant_gets_a_new_container(runtime: FakeRuntime) -> None:
    """Deleted and made again under the same name with an identical container by another tenant: the
    old tenant's container (its filesystem) is not handed over."""
    rc = converger(runtime, Clock())
    rc.converge([assigned("copy:chat:0", container(), tenant="acme")], {"copy:chat:0"})
    (old,) = runtime.list()
    rc.converge([assigned("copy:chat:0", container(), tenant="globex")], {"copy:chat:0"})
    (new,) = runtime.list()
    assert new.id != old.id and new.state == "running"


def test_a_missing_image_is_image_not_found_and_tried_again_with_back_off(runtime: FakeRuntime) -> None:
    clock = Clock()
    rc = converger(runtime, clock)
    a = assigned("r", {"image": "localhost/absent:1"})
    report = one(rc.converge([a], {"r"}))
    assert report["problem"] == "image-not-found" and "image not known" in report["detail"]
    assert runtime.list() == []
    assert rc.due() == pytest.approx(1.0)
    assert rc.converge([a], {"r"}) == []  # not due yet, nothing new
    runtime.images = {IMAGE, "localhost/absent:1"}  # loaded onto the node meanwhile
    clock.now += 1
    report = one(rc.converge([a], {"r"}))
    assert "problem" not in report and runtime.list()[0].state == "running"


def test_a_crashing_container_is_restarted_with_back_off_and_reported_crash_looping(
    runtime: FakeRuntime,
) -> None:
    clock = Clock()
    rc = converger(runtime, clock)
    a = assigned("r", container())
    rc.converge([a], {"r"})
    rc.converge([a], {"r"})
    seen: list[dict[str, Any]] = []
    for restart in range(4):
        runtime.exit("r", 3)
        exited = one(rc.converge([a], {"r"}))
        assert exited["state"] == "exited" and exited["exitCode"] == 3 and exited["restarts"] == restart
        assert rc.due() == pytest.approx(backoff(restart))
        clock.now += backoff(restart) - 0.5
        assert rc.converge([a], {"r"}) == []  # still backing off
        clock.now += 0.5
        restarted = one(rc.converge([a], {"r"}))
        assert restarted["state"] == "created" and restarted["restarts"] == restart + 1
        assert runtime.list()[0].state == "running"
        seen.append(exited)
    assert [r.get("problem") for r in seen] == [None, None, None, "crash-looping"]
    assert [backoff(n) for n in range(4)] == [1, 2, 4, 8] and backoff(30) == 300
    # Running long enough resets the streak and clears the problem.
    clock.now += 601
    calm = one(rc.converge([a], {"r"}))
    assert calm["state"] == "ready" and "problem" not in calm


def test_an_http_probe_decides_readiness_with_its_delay_period_and_threshold(runtime: FakeRuntime) -> None:
    clock = Clock()
    answers: list[bool] = []
    calls: list[tuple[str, int, str, float]] = []

    def probe(host: str, port: int, path: str, timeout: float) -> bool:
        calls.append((host, port, path, timeout))
        return answers.pop(0)

    rc = converger(runtime, clock, probe_http=probe)
    probe_doc = {
        "httpGet": {"path": "/ping", "port": 8080},
        "initialDelaySeconds": 10,
        "periodSeconds": 5,
        "failureThreshold": 2,
        "timeoutSeconds": 2,
    }
    a = assigned("r", container(readinessProbe=probe_doc))
    assert one(rc.converge([a], {"r"}))["state"] == "created"
    clock.now += 9
    assert rc.converge([a], {"r"}) == [] and calls == []  # initial delay
    clock.now += 1
    answers[:] = [False]
    assert rc.converge([a], {"r"}) == []  # one failure: below the threshold
    (found,) = runtime.list()
    assert calls == [("127.0.0.1", found.ports[8080], "/ping", 2.0)]
    clock.now += 4
    assert rc.converge([a], {"r"}) == [] and len(calls) == 1  # within the period
    clock.now += 1
    answers[:] = [False]
    assert one(rc.converge([a], {"r"}))["state"] == "not-ready"
    clock.now += 5
    answers[:] = [True]
    assert one(rc.converge([a], {"r"}))["state"] == "ready"
    clock.now += 5
    answers[:] = [False]
    assert rc.converge([a], {"r"}) == []  # ready until the threshold
    clock.now += 5
    answers[:] = [False]
    assert one(rc.converge([a], {"r"}))["state"] == "not-ready"
    assert rc.due() == pytest.approx(5.0)


def test_a_real_http_probe_reaches_the_fake_containers_server(runtime: FakeRuntime) -> None:
    rc = converger(runtime, Clock())
    a = assigned("r", container(readinessProbe={"httpGet": {"path": "/ping", "port": 8080}}))
    rc.converge([a], {"r"})
    assert one(rc.converge([a], {"r"}))["state"] == "ready"


def test_an_exec_probe_runs_in_the_container(runtime: FakeRuntime) -> None:
    clock = Clock()
    rc = converger(runtime, clock)
    a = assigned(
        "r",
        container(
            readinessProbe={
                "exec": {"command": ["test", "-f", "/ready"]},
                "periodSeconds": 1,
                "failureThreshold": 1,
            }
        ),
    )
    runtime.exec_status["r"] = 1
    rc.converge([a], {"r"})
    assert one(rc.converge([a], {"r"}))["state"] == "not-ready"
    runtime.exec_status["r"] = 0
    clock.now += 1
    assert one(rc.converge([a], {"r"}))["state"] == "ready"


def test_logs_of_an_allocation_without_a_container_say_so(runtime: FakeRuntime) -> None:
    with pytest.raises(NoContainer, match="no container runs allocation 'nope'"):
        runtime.logs("nope", 10)


def test_the_podman_create_argv_holds_the_device_labels_limits_ports_and_command() -> None:
    podman = PodmanRuntime(
        "node-a", argv=["podman", "--runtime", "runc"], create_args=["--ulimit", "nofile=1024:1024"]
    )
    spec = parse_container(
        container(
            command=["/bin/server"],
            args=["--model", "m"],
            env={"B": "2", "A": "1", "C": "two\nlines"},
            resources={"cpu": "500m", "memoryMiB": 512},
            readinessProbe={"httpGet": {"path": "/ping", "port": 9000}},
        )
    )
    argv = podman.create_argv("copy:chat:0", spec, env_file="/state/container-env/x.env")
    name = container_name("node-a", "copy:chat:0")
    assert name.startswith("bc-node-a-copy-chat-0-") and ":" not in name
    assert argv == [
        "create", "--name", name,
        "--label", "better-compute.node=node-a",
        "--label", "better-compute.allocation=copy:chat:0",
        "--label", f"better-compute.spec={spec_digest(spec)}",
        "--label", "better-compute.atoms=",
        "--device", "better-compute.io/gpu=copy:chat:0",
        "--pull=never", "--stop-timeout", "10",
        "--cpus", "0.5", "--memory", "512m",
        "--env-file", "/state/container-env/x.env", "--env", "C=two\nlines",
        "--publish", "127.0.0.1::8080", "--publish", "127.0.0.1::9000",
        "--entrypoint", '["/bin/server"]',
        "--ulimit", "nofile=1024:1024",
        IMAGE, "--model", "m",
    ]  # fmt: skip


class _Nodes:
    """The server's side of `nodes.spec` and `nodes.report`, as the daemon's loop sees it."""

    def __init__(self, spec: NodeSpecPublic) -> None:
        self.spec_answer = spec
        self.waits: list[float | None] = []
        self.reports: list[dict[str, Any]] = []

    def spec(self, node: str, *, after: int | None = None, wait: float | None = None) -> NodeSpecPublic:
        self.waits.append(wait)
        return self.spec_answer

    def report(self, node: str, report: dict[str, Any], *, report_id: str) -> Any:
        self.reports.append(dict(report))
        return SimpleNamespace(kind=report["kind"], sequence=len(self.reports), duplicate=False)


def test_the_daemon_runs_a_bound_assignments_container_and_keeps_passing_once_settled(
    tmp_path: Path, runtime: FakeRuntime
) -> None:
    fake = FakeNode.from_fleet(fleet_spec(nodes=1, mode="exclusive"), "n")
    whole = atom_id_for(fake.list_gpus()[0].uuid, "gpu")
    spec = NodeSpecPublic.model_validate(
        {
            "node": "n",
            "generation": 1,
            "gpus": [{"uuid": g.uuid, "migLayout": None} for g in fake.list_gpus()],
            "sharing": {"mode": "exclusive", "replicas": 1},
            "assignments": [
                {"allocationId": "dep.r0", "atoms": [whole], "env": {}, "container": container()}
            ],
        }
    )
    nodes = _Nodes(spec)
    identity = Identity(tmp_path / "state", "n", "http://server", Ed25519PrivateKey.generate())
    (tmp_path / "state").mkdir()
    runtime.node = "n"
    daemon = Daemon(
        identity,
        fake,
        SimpleNamespace(nodes=nodes),  # type: ignore[arg-type]
        cdi_root=tmp_path / "cdi",
        log=Log(io.StringIO(), node="n"),
        node_root=tmp_path / "node-root",
        runtime=runtime,
        wait=30,
    )
    simulated(tmp_path / "node-root")
    assert daemon.step(False)
    states = [(r["kind"], r.get("binding") or r.get("state")) for r in nodes.reports]
    assert ("AllocationBound", "bound") in states and ("ReplicaState", "created") in states
    assert [f.allocation_id for f in runtime.list()] == ["dep.r0"]
    # Settled: the long poll waits no longer than the next look at the container, and the spec
    # coming back unchanged still gets the containers' pass.
    assert daemon.step(True)
    assert nodes.waits[-1] is not None and nodes.waits[-1] <= 5.0
    assert nodes.reports[-1]["kind"] == "ReplicaState" and nodes.reports[-1]["state"] == "ready"


def test_bcd_run_chooses_its_runtime() -> None:
    assert isinstance(
        _container_runtime(RuntimeKind.auto, NvmlKind.fake, "n", "podman", [], "127.0.0.1", "never", 1),
        FakeRuntime,
    )
    assert (
        _container_runtime(RuntimeKind.none, NvmlKind.real, "n", "podman", [], "127.0.0.1", "never", 1)
        is None
    )
    assert (
        _container_runtime(
            RuntimeKind.auto, NvmlKind.real, "n", "no-such-podman", [], "127.0.0.1", "never", 1
        )
        is None
    )
    with pytest.raises(ValueError, match="no-such-podman is not on PATH"):
        _container_runtime(
            RuntimeKind.podman,
            NvmlKind.real,
            "n",
            "no-such-podman --runtime runc",
            [],
            "127.0.0.1",
            "never",
            1,
        )
    with pytest.raises(ValueError, match="pull policy"):
        _container_runtime(RuntimeKind.podman, NvmlKind.real, "n", "sh", [], "127.0.0.1", "sometimes", 1)
    chosen = _container_runtime(
        RuntimeKind.podman,
        NvmlKind.real,
        "n",
        "sh -c",
        ["--ulimit=nofile=1024:1024"],
        "0.0.0.0",
        "missing",
        3,
    )
    assert (
        isinstance(chosen, PodmanRuntime)
        and chosen.argv == ["sh", "-c"]
        and chosen.create_args == ["--ulimit=nofile=1024:1024"]
    )


def _daemon(tmp_path: Path, runtime: FakeRuntime, nodes: _Nodes, fake: FakeNode) -> Daemon:
    identity = Identity(tmp_path / "state", "n", "http://server", Ed25519PrivateKey.generate())
    (tmp_path / "state").mkdir()
    runtime.node = "n"
    simulated(tmp_path / "node-root")
    return Daemon(
        identity,
        fake,
        SimpleNamespace(nodes=nodes),  # type: ignore[arg-type]
        cdi_root=tmp_path / "cdi",
        log=Log(io.StringIO(), node="n"),
        node_root=tmp_path / "node-root",
        runtime=runtime,
        wait=30,
    )


def _spec(
    fake: FakeNode, generation: int, *assignments: dict[str, Any], scrub: str = "none"
) -> NodeSpecPublic:
    return NodeSpecPublic.model_validate(
        {
            "node": "n",
            "generation": generation,
            "gpus": [{"uuid": g.uuid, "migLayout": None} for g in fake.list_gpus()],
            "sharing": {"mode": "exclusive", "replicas": 1, "scrub": scrub},
            "assignments": list(assignments),
        }
    )


def test_a_container_whose_removal_failed_keeps_its_gpu_from_the_next_tenant(
    tmp_path: Path, runtime: FakeRuntime
) -> None:
    """Tenant A's replica leaves, tenant B's gets A's GPU, and podman cannot remove A's container:
    A is not released, the GPU is neither scrubbed nor handed to B, and B gets no container, until a
    pass removes A's; then `removed` is reported before `AllocationReleased`, the scrub after it."""
    fake = FakeNode.from_fleet(fleet_spec(nodes=1, mode="exclusive"), "n")
    whole = atom_id_for(fake.list_gpus()[0].uuid, "gpu")
    a = {"allocationId": "a.r0", "atoms": [whole], "env": {}, "container": container(), "tenantId": "acme"}
    b = {"allocationId": "b.r0", "atoms": [whole], "env": {}, "container": container(), "tenantId": "globex"}
    nodes = _Nodes(_spec(fake, 1, a, scrub="zero"))
    daemon = _daemon(tmp_path, runtime, nodes, fake)
    assert daemon.step(False)
    assert [f.allocation_id for f in runtime.list()] == ["a.r0"]
    runtime.refuse_remove.add("a.r0")
    nodes.spec_answer = _spec(fake, 2, b, scrub="zero")
    nodes.reports.clear()
    for _ in range(2):
        assert not daemon.step(False)
    said = [(r["kind"], r.get("allocationId"), r.get("state") or r.get("binding")) for r in nodes.reports]
    assert not [
        s
        for s in said
        if s[0] in ("AllocationReleased", "AllocationBound", "ScrubDone", "ObservedGeneration")
    ]
    assert [(f.allocation_id, f.state) for f in runtime.list()] == [("a.r0", "running")]
    held, _ = daemon._held(nodes.spec_answer, {"a.r0": (whole,)})
    assert fake.list_gpus()[0].uuid in held
    # The removal goes through on a later pass.
    runtime.refuse_remove.clear()
    nodes.reports.clear()
    for _ in range(3):
        daemon.step(False)
    said = [(r["kind"], r.get("allocationId"), r.get("state") or r.get("binding")) for r in nodes.reports]
    order = [s for s in said if s[0] != "Inventory"]
    assert order.index(("ReplicaState", "a.r0", "removed")) < order.index(
        ("AllocationReleased", "a.r0", None)
    )
    assert order.index(("AllocationReleased", "a.r0", None)) < order.index(("ScrubDone", None, None))
    assert order.index(("ScrubDone", None, None)) < order.index(("AllocationBound", "b.r0", "bound"))
    assert [f.allocation_id for f in runtime.list()] == ["b.r0"]


@pytest.mark.parametrize(
    "says",
    [
        "not json",
        '{"Id": "x"}',
        '[{"Labels": {"better-compute.node": "n", "better-compute.allocation": "x"}, "State": "exited"}]',
        '[{"Id": "x", "Labels": {"better-compute.node": "n", "better-compute.allocation": "x"},'
        ' "State": "running", "Ports": [{"host_port": 1}]}]',
    ],
)
def test_podman_output_bcd_cannot_read_is_a_runtime_failure_not_a_crash(says: str) -> None:
    from better_compute.bcd.containers import RuntimeFailure

    podman = PodmanRuntime("n", argv=["sh", "-c", f"printf '%s' '{says}'"])
    with pytest.raises(RuntimeFailure, match="cannot read"):
        podman.list()
    # The converger's pass survives it: nothing done, nothing reported, no exception.
    assert converger(podman, Clock()).converge([assigned("r", container())], {"r"}) == []  # type: ignore[arg-type]


def test_a_podman_create_that_prints_no_id_or_hangs_is_a_runtime_failure() -> None:
    from better_compute.bcd.containers import RuntimeFailure

    spec = parse_container(container())
    with pytest.raises(RuntimeFailure, match="printed no container id"):
        PodmanRuntime("n", argv=["true"]).create("r", spec)
    slow = PodmanRuntime("n", argv=["sh", "-c", "sleep 5"], timeout=0.3, quick_timeout=0.3)
    with pytest.raises(RuntimeFailure, match=r"took longer than 0\.3 s"):
        slow.create("r", spec)
    with pytest.raises(RuntimeFailure, match=r"took longer than 0\.3 s"):
        slow.list()
    assert PodmanRuntime("n").quick_timeout <= 30


class _Forgetful(_Nodes):
    """A server that refuses the first ReplicaState report of state `refuse` (it will never take it)."""

    def __init__(self, spec: NodeSpecPublic, refuse: str | None) -> None:
        super().__init__(spec)
        self.refuse = refuse

    def report(self, node: str, report: dict[str, Any], *, report_id: str) -> Any:
        from better_compute.client import InvalidInputError

        if report["kind"] == "ReplicaState" and report["state"] == self.refuse:
            self.refuse = None
            raise InvalidInputError("allocation not on this node's atoms")
        return super().report(node, report, report_id=report_id)


def test_a_refused_replica_state_is_not_resent_each_pass_and_every_state_is_sent_on_a_new_spec(
    tmp_path: Path, runtime: FakeRuntime
) -> None:
    fake = FakeNode.from_fleet(fleet_spec(nodes=1, mode="exclusive"), "n")
    whole = atom_id_for(fake.list_gpus()[0].uuid, "gpu")
    a = {"allocationId": "copy:chat:0", "atoms": [whole], "env": {}, "container": container()}
    nodes = _Forgetful(_spec(fake, 1, a), refuse="ready")
    daemon = _daemon(tmp_path, runtime, nodes, fake)
    daemon.step(False)
    daemon.step(True)  # `ready` is refused by the server, for the spec it has
    daemon.step(True)
    daemon.step(True)
    states = [r["state"] for r in nodes.reports if r["kind"] == "ReplicaState"]
    assert states == ["created"]  # taken; the refused `ready` is not sent again each pass
    # A new generation (the copy scaled down and added again: the server forgot it): the unchanged
    # `ready` is sent once more.
    nodes.spec_answer = _spec(fake, 2, a)
    nodes.reports.clear()
    daemon.step(True)
    assert [r["state"] for r in nodes.reports if r["kind"] == "ReplicaState"] == ["ready"]
    nodes.reports.clear()
    daemon.step(True)
    assert [r for r in nodes.reports if r["kind"] == "ReplicaState"] == []


def _dripping_server(first: bytes) -> tuple[int, threading.Event]:
    """A server that answers `first`, then one byte every 0.2 s until told to stop."""
    import socket

    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        conn.sendall(first)
        while not stop.wait(0.2):
            try:
                conn.sendall(b"X")
            except OSError:
                break
        conn.close()
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1], stop


def test_a_readiness_probe_dripping_its_answer_is_bounded_by_its_timeout_overall() -> None:
    from better_compute.bcd.runtime import http_get

    port, stop = _dripping_server(b"HTTP/1.1 2")  # the status line never ends
    started = time.monotonic()
    assert not http_get("127.0.0.1", port, "/ping", 1.0)
    assert time.monotonic() - started < 1.8
    stop.set()
    # Headers dripped after the status line: the status is all a probe reads.
    port, stop = _dripping_server(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    started = time.monotonic()
    assert http_get("127.0.0.1", port, "/ping", 5.0)
    assert time.monotonic() - started < 1.0
    stop.set()


def test_a_readiness_probe_that_hangs_does_not_stall_the_pass(runtime: FakeRuntime) -> None:
    from better_compute.bcd.runtime import PROBE_WAIT

    release = threading.Event()

    def hanging(host: str, port: int, path: str, timeout: float) -> bool:
        release.wait(30)
        return True

    clock = Clock()
    rc = converger(runtime, clock, probe_http=hanging)
    probe = {"httpGet": {"path": "/ping", "port": 8080}, "timeoutSeconds": 60}
    a = assigned("r", container(readinessProbe=probe))
    b = assigned("s", container())  # no probe: its state is not held up by r's
    rc.converge([a, b], {"r", "s"})
    started = time.monotonic()
    reports = rc.converge([a, b], {"r", "s"})
    assert time.monotonic() - started < PROBE_WAIT + 1.0
    assert [(x["allocationId"], x["state"]) for x in reports] == [("s", "ready")]
    assert rc.due() is not None and rc.due() < 1.0  # the probe under way is read soon
    release.set()
    time.sleep(0.2)
    assert [(x["allocationId"], x["state"]) for x in rc.converge([a, b], {"r", "s"})] == [("r", "ready")]


def test_env_values_reach_podman_in_a_private_env_file_not_on_its_command_line(tmp_path: Path) -> None:
    """Any local user reads a process's command line in /proc: a secret in the environment goes in a
    0600 file under the state directory, removed once the container is created."""
    seen = tmp_path / "seen"
    script = (
        'for a; do if [ "$prev" = --env-file ]; then stat -c %a "$a" > "$SEEN.mode"; cat "$a" > "$SEEN.env";'
        ' echo "$a" > "$SEEN.path"; fi; prev="$a"; done; echo "$@" > "$SEEN.argv"; echo cafe01'
    )
    podman = PodmanRuntime(
        "n", argv=["env", f"SEEN={seen}", "sh", "-c", script, "podman"], env_dir=tmp_path / "container-env"
    )
    spec = parse_container(container(env={"API_KEY": "s3cret value", "MODE": "fast"}))
    assert podman.create("r", spec) == "cafe01"
    assert "s3cret" not in (tmp_path / "seen.argv").read_text()
    assert (tmp_path / "seen.env").read_text() == "API_KEY=s3cret value\nMODE=fast\n"
    assert (tmp_path / "seen.mode").read_text().strip() == "600"
    used = Path((tmp_path / "seen.path").read_text().strip())
    assert used.parent == tmp_path / "container-env" and not used.exists()


def test_crash_looping_is_cleared_once_the_container_is_ready_again(runtime: FakeRuntime) -> None:
    clock = Clock()
    rc = converger(runtime, clock)
    a = assigned("r", container())
    rc.converge([a], {"r"})
    rc.converge([a], {"r"})
    for restart in range(CRASH_LOOP + 1):
        runtime.exit("r", 3)
        exited = one(rc.converge([a], {"r"}))
        clock.now += backoff(restart)
        rc.converge([a], {"r"})
    assert exited.get("problem") == "crash-looping"
    # Started again and running: ready, the problem and its detail gone, the restarts kept.
    ready = one(rc.converge([a], {"r"}))
    assert ready["state"] == "ready" and "problem" not in ready and "detail" not in ready
    assert ready["restarts"] == CRASH_LOOP + 1


def test_logs_are_the_current_containers_when_two_share_an_allocation() -> None:
    from better_compute.bcd.containers import Found

    node = "n"
    name = container_name(node, "r")
    old = Found(id="a-old", name="bc-old-name", allocation_id="r", spec_digest="x", state="running")
    new = Found(id="z-new", name=name, allocation_id="r", spec_digest="y", state="running")
    from better_compute.bcd.podman import _current_first

    assert [f.id for f in _current_first([old, new], node)] == ["z-new", "a-old"]


def test_an_exec_probe_printing_without_end_is_bounded_by_its_timeout_not_held_in_memory() -> None:
    """A tenant's exec probe printing without end (1.5 GiB a second here) must not fill bcd's memory:
    measured in a process of its own."""
    import subprocess
    import sys

    script = (
        "import resource\n"
        "from better_compute.bcd.podman import PodmanRuntime\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "podman = PodmanRuntime('n', argv=['sh', '-c', 'exec yes probe-output-probe-output', 'podman'])\n"
        "assert podman.exec('c', ['cat'], 1.0) == -1\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True
    )
    assert int(done.stdout.strip()) < 100  # MiB


def test_a_log_line_without_end_is_read_bounded_not_held_whole() -> None:
    """`--tail` bounds lines, not their length: a container's one 300 MB line must not fill bcd's
    memory (measured in a process of its own); the last MiB is kept, and a podman that never ends
    is cut at its timeout."""
    import subprocess
    import sys

    script = (
        "import resource\n"
        "from better_compute.bcd.containers import MAX_LOG_BYTES, Found, RuntimeFailure, container_name\n"
        "from better_compute.bcd.podman import PodmanRuntime\n"
        "current = Found(id='c1', name=container_name('n', 'r'), allocation_id='r', spec_digest='d',"
        " state='running')\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "podman = PodmanRuntime('n', argv=['sh', '-c',"
        " 'yes x | head -c 300000000 | tr -d \"\\\\n\"; echo END', 'podman'])\n"
        "podman.list = lambda: [current]\n"
        "text = podman.logs('r', 10)\n"
        "assert len(text) == MAX_LOG_BYTES and text.endswith('xEND\\n'), text[-20:]\n"
        "endless = PodmanRuntime('n', argv=['sh', '-c', 'exec yes', 'podman'], quick_timeout=0.5)\n"
        "endless.list = lambda: [current]\n"
        "try:\n"
        "    endless.logs('r', 10)\n"
        "    raise SystemExit('an endless podman logs was not cut')\n"
        "except RuntimeFailure:\n"
        "    pass\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.strip()) < 100  # MiB
