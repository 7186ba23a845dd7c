"""The runtime converger with real podman (runc) and Debian's busybox-static as the image: a replica's
container gets its CDI device, `busybox httpd` answers its httpGet probe and it is reported ready at
its published address; a new converger adopts it (same container, not doubled); an allocation gone
from the spec has its container stopped and removed; a command that keeps exiting is reported
crash-looping; an image not on the node is image-not-found. Needs what `test_cdi_podman` needs
(root, podman, runc, busybox-static): skipped without them, failed under CI."""

# ruff: noqa: F811 - the hand-over tests' fixtures (`node`, `image`) are imported, then named as parameters

from __future__ import annotations

import http.client
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from better_compute.bcd.containers import NODE_LABEL, NoContainer
from better_compute.bcd.podman import PodmanRuntime
from better_compute.bcd.runtime import RuntimeConverger
from better_compute.domain.kernel.containers import parse_container
from better_compute.domain.placement.slurm_replicas import podman_run
from better_compute.wire.nodes import AssignmentPublic
from tests.bcd.handover import assignment, node_spec, whole_atom, whole_node
from tests.bcd.test_cdi_podman import Node, image, node  # noqa: F401 - the fixtures, used by name
from tests.conftest import SERIAL

pytestmark = SERIAL

PODMAN = ["podman", "--runtime", "runc"]
ULIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
HTTPD = (
    "echo serving && busybox mkdir -p /www && echo ok > /www/ping && exec busybox httpd -f -p 8080 -h /www"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def runtime(node: Node) -> Iterator[PodmanRuntime]:
    """A podman runtime for a node of its own name, so nothing another test runs is a stray here;
    every container of it removed after."""
    name = f"bc-test-node-{uuid.uuid4().hex[:8]}"
    podman = PodmanRuntime(name, argv=PODMAN, create_args=ULIMITS, stop_timeout=1)
    try:
        yield podman
    finally:
        ids = subprocess.run(
            [*PODMAN, "ps", "-aq", "--filter", f"label={NODE_LABEL}={name}"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        if ids:
            subprocess.run([*PODMAN, "rm", "-f", "-t", "0", *ids], capture_output=True, check=False)


def bound(node: Node, image_ref: str, doc: dict[str, Any]) -> tuple[str, AssignmentPublic]:
    """An allocation of a whole GPU, handed over (its CDI spec written), carrying `doc`."""
    fake = whole_node()
    allocation = node.allocation()
    spec = node_spec(fake, "exclusive", assignment(allocation, whole_atom(fake.list_gpus()[1])))
    assert node.converger().converge(spec, fake.list_gpus()).settled
    a = AssignmentPublic.model_validate(
        {**spec.assignments[0].model_dump(by_alias=True), "container": {"image": image_ref, **doc}}
    )
    return allocation, a


def until(
    rc: RuntimeConverger, a: AssignmentPublic, allocation: str, want: Any, seconds: float = 60
) -> list[dict[str, Any]]:
    """Passes (real time) until a report satisfies `want`; every report made."""
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen += rc.converge([a], {allocation})
        if any(want(r) for r in seen):
            return seen
        time.sleep(0.3)
    raise AssertionError(f"no report as wanted in {seconds} s: {seen}")


def test_a_replica_runs_with_its_device_is_ready_on_its_probe_adopted_and_removed(
    node: Node, image: str, runtime: PodmanRuntime
) -> None:
    allocation, a = bound(
        node,
        image,
        {
            "command": ["/bin/busybox", "sh", "-c"],
            "args": [HTTPD],
            "ports": [{"containerPort": 8080}],
            "readinessProbe": {"httpGet": {"path": "/ping", "port": 8080}, "periodSeconds": 1},
            "resources": {"cpu": 0.5, "memoryMiB": 64},
            "env": {"API_KEY": "s3cret value=x", "NOTE": "two\nlines"},
        },
    )
    rc = RuntimeConverger(runtime, runtime.node, stop_timeout=1)
    reports = until(rc, a, allocation, lambda r: r["state"] == "ready")
    assert reports[0]["state"] == "created"
    ready = reports[-1]
    (found,) = runtime.list()
    assert found.state == "running" and found.allocation_id == allocation
    assert ready["address"] == f"127.0.0.1:{found.ports[8080]}"
    # Its CDI device is in it: the allocation's GPU node, not the other GPU's.
    assert runtime.exec(found.id, ["test", "-c", "/dev/nvidia1"], 30) == 0
    assert runtime.exec(found.id, ["test", "-e", "/dev/nvidia0"], 30) != 0
    # Its environment, passed in an env file (and a multi-line value as --env), is as given.
    check = 'test "$API_KEY" = "s3cret value=x" && test "$NOTE" = "$(printf "two\\nlines")"'
    assert runtime.exec(found.id, ["/bin/busybox", "sh", "-c", check], 30) == 0
    assert "serving" in runtime.logs(allocation, 5)
    host, port = ready["address"].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    conn.request("GET", "/ping")
    assert conn.getresponse().read() == b"ok\n"
    conn.close()

    # A new daemon adopts it: the same container, not a second.
    again = RuntimeConverger(runtime, runtime.node, stop_timeout=1)
    adopted = again.converge([a], {allocation})
    assert [f.id for f in runtime.list()] == [found.id]
    assert [r["state"] for r in adopted] == ["ready"]

    # Gone from the spec: stopped, removed, reported.
    assert again.converge([], set()) == [
        {"kind": "ReplicaState", "allocationId": allocation, "state": "removed", "restarts": 0}
    ]
    assert runtime.list() == []
    with pytest.raises(NoContainer):
        runtime.logs(allocation, 5)


def test_a_command_that_keeps_exiting_is_restarted_and_reported_crash_looping(
    node: Node, image: str, runtime: PodmanRuntime
) -> None:
    allocation, a = bound(node, image, {"command": ["/bin/busybox", "sh", "-c", "exit 3"]})
    clock = Clock()
    rc = RuntimeConverger(runtime, runtime.node, clock=clock, stop_timeout=1)
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + 90
    while not any(r.get("problem") == "crash-looping" for r in seen):
        assert time.monotonic() < deadline, seen
        seen += rc.converge([a], {allocation})
        time.sleep(0.3)
        clock.now += 2  # back-off passes in test time; the container exits in real time
    looping = next(r for r in seen if r.get("problem") == "crash-looping")
    assert looping["state"] == "exited" and looping["exitCode"] == 3 and looping["restarts"] == 3
    assert [r["restarts"] for r in seen if r["state"] == "exited"] == [0, 1, 2, 3]
    assert len(runtime.list()) == 1  # restarted in place, never doubled


def test_an_image_not_on_the_node_is_image_not_found(node: Node, image: str, runtime: PodmanRuntime) -> None:
    allocation, a = bound(node, "localhost/bc-test-absent:1", {})
    (report,) = RuntimeConverger(runtime, runtime.node).converge([a], {allocation})
    assert report["problem"] == "image-not-found" and "image not known" in report["detail"]
    assert runtime.list() == []


def test_the_container_a_slurm_job_runs_is_watched_ready_on_its_probe_and_removed_when_it_ends(
    node: Node, image: str, runtime: PodmanRuntime
) -> None:
    """The job's own `podman run` line (`slurm_replicas.podman_run`), detached as the job's shell
    would hold it: `bcd` finds it by its label, probes the loopback port it published, reports it
    ready, and `removed` once it ends (`--rm`), never making or removing a container itself."""
    allocation, a = bound(node, image, {})
    doc = {
        "image": image,
        "command": ["/bin/busybox", "sh", "-c"],
        "args": [HTTPD],
        "readinessProbe": {"httpGet": {"path": "/ping", "port": 8080}, "periodSeconds": 1},
    }
    watched = AssignmentPublic.model_validate(
        {**a.model_dump(by_alias=True, exclude={"container"}), "jobContainer": doc}
    )
    line = podman_run(allocation, parse_container(doc))
    started = subprocess.run(
        [*PODMAN, "run", "-d", *ULIMITS, *line[2:]], capture_output=True, text=True, timeout=120, check=False
    )
    assert started.returncode == 0, started.stderr
    try:
        rc = RuntimeConverger(runtime, runtime.node, stop_timeout=1)
        reports = until(rc, watched, allocation, lambda r: r["state"] == "ready")
        assert "address" not in reports[-1]
        (found,) = [f for f in runtime.jobs() if f.allocation_id == allocation]
        assert found.name == f"bc-slurm-{allocation}" and runtime.list() == []
        stopped = subprocess.run(
            [*PODMAN, "stop", "-t", "1", found.id], capture_output=True, text=True, timeout=60, check=False
        )
        assert stopped.returncode == 0, stopped.stderr
        assert until(rc, watched, allocation, lambda r: r["state"] == "removed")[-1]["state"] == "removed"
    finally:
        subprocess.run(
            [*PODMAN, "rm", "-f", "-t", "0", f"bc-slurm-{allocation}"], capture_output=True, check=False
        )
