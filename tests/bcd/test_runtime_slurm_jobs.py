"""The container a replica's Slurm job runs (docs/slurm.md#replicas-as-jobs), watched by `bcd` on
the node over the in-process fake runtime (podman's contract): found by its label, its readiness
probed and reported as a container of `bcd`'s own is, and never started, restarted, stopped or
removed by `bcd`. Time is a test clock: no sleep decides an outcome."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from better_compute.bcd import containers
from better_compute.bcd.containers import RuntimeFailure
from better_compute.bcd.fake_runtime import FakeRuntime
from better_compute.bcd.podman import PodmanRuntime
from better_compute.bcd.runtime import WATCH_EVERY, RuntimeConverger
from better_compute.domain.kernel.containers import parse_container
from better_compute.domain.placement import slurm_replicas
from better_compute.domain.placement.slurm_replicas import podman_run
from better_compute.wire.nodes import AssignmentPublic

NODE = "sn"
IMAGE = "localhost/llm:1"
R = "dep1.r0"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def job_container(**extra: Any) -> dict[str, Any]:
    return {"image": IMAGE, "ports": [{"containerPort": 8080}], **extra}


def assigned(doc: dict[str, Any]) -> AssignmentPublic:
    """A replica on a Slurm node as its spec gives it: devices and the container its job runs."""
    return AssignmentPublic.model_validate(
        {"allocationId": R, "atoms": ["gpu-1/gpu"], "env": {}, "tenantId": "acme", "jobContainer": doc}
    )


@pytest.fixture
def runtime() -> Iterator[FakeRuntime]:
    fake = FakeRuntime(NODE, images=[IMAGE])
    try:
        yield fake
    finally:
        fake.close()


def states(reports: list[dict[str, Any]]) -> list[str]:
    return [r["state"] for r in reports]


EXEC_PROBE = {"exec": {"command": ["test", "-f", "/ready"]}, "periodSeconds": 1, "failureThreshold": 1}


def test_a_slurm_jobs_container_is_watched_created_ready_not_ready_and_removed_never_run_by_bcd(
    runtime: FakeRuntime,
) -> None:
    clock = Clock()
    rc = RuntimeConverger(runtime, NODE, clock=clock)
    doc = job_container(readinessProbe=EXEC_PROBE)
    a = assigned(doc)
    # Bound, its job not started yet: nothing runs, so nothing is ready (and bcd makes nothing).
    assert states(rc.converge([a], {R})) == ["removed"]
    assert runtime.list() == [] and runtime.jobs() == []
    assert rc.converge([a], {R}) == []
    assert rc.due() == pytest.approx(WATCH_EVERY)  # a pass soon sees the job's container come
    # The job's `podman run` starts it; its probe fails: created, then not-ready.
    runtime.exec_status[R] = 1
    runtime.run_job(R, parse_container(doc))
    assert states(rc.converge([a], {R})) == ["not-ready"]
    runtime.exec_status[R] = 0
    clock.now += 1
    assert states(rc.converge([a], {R})) == ["ready"]
    assert rc.converge([a], {R}) == []  # nothing changed: nothing reported
    runtime.exec_status[R] = 1
    clock.now += 1
    assert states(rc.converge([a], {R})) == ["not-ready"]
    # The job ends (scancel, its command exited): `--rm` removes the container; bcd restarts nothing.
    runtime.end_job(R, 143)
    assert states(rc.converge([a], {R})) == ["removed"]
    assert runtime.jobs() == [] and runtime.list() == []
    # The replica's next job runs it again: watched from the start.
    runtime.exec_status[R] = 0
    runtime.run_job(R, parse_container(doc))
    clock.now += 1
    assert states(rc.converge([a], {R})) == ["ready"]
    # The replica leaves the node's spec: bcd stops watching and leaves the container to Slurm.
    assert rc.converge([], set()) == []
    assert [f.state for f in runtime.jobs()] == ["running"]


def test_an_http_probe_reaches_the_port_the_job_published_on_the_loopback(runtime: FakeRuntime) -> None:
    clock = Clock()
    calls: list[tuple[str, int, str]] = []

    def probe(host: str, port: int, path: str, timeout: float) -> bool:
        calls.append((host, port, path))
        return True

    rc = RuntimeConverger(runtime, NODE, clock=clock, probe_http=probe)
    doc = job_container(readinessProbe={"httpGet": {"path": "/ping", "port": 8080}})
    runtime.run_job(R, parse_container(doc))
    assert states(rc.converge([assigned(doc)], {R})) == ["ready"]
    [found] = runtime.jobs()
    assert calls == [("127.0.0.1", found.ports[8080], "/ping")]
    # A real probe reaches the fake container's server on that port.
    real = RuntimeConverger(runtime, NODE, clock=clock)
    assert states(real.converge([assigned(doc)], {R})) == ["ready"]


def test_a_watched_container_not_bound_yet_or_of_a_bcd_without_runtime_is_left_alone(
    runtime: FakeRuntime,
) -> None:
    rc = RuntimeConverger(runtime, NODE, clock=Clock())
    doc = job_container()
    runtime.run_job(R, parse_container(doc))
    assert rc.converge([assigned(doc)], set()) == []  # its devices not handed over: nothing said
    # bcd's own pass (prune, strays) never touches it: it is not one of the node's containers.
    assert rc.prune([], set()).reports == []
    assert [f.state for f in runtime.jobs()] == ["running"]


def test_the_jobs_podman_run_carries_the_label_bcd_watches_and_publishes_only_the_probe_port() -> None:
    assert slurm_replicas.JOB_LABEL == containers.JOB_LABEL
    spec = parse_container(job_container(readinessProbe={"httpGet": {"path": "/ping", "port": 9000}}))
    argv = podman_run(R, spec)
    assert argv[argv.index("--label") + 1] == f"better-compute.slurm-allocation={R}"
    assert argv[argv.index("--name") + 1] == f"bc-slurm-{R}"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--publish"] == ["127.0.0.1::9000"]
    assert "--publish" not in podman_run(R, parse_container(job_container()))


def test_podman_lists_the_slurm_jobs_containers_by_their_label() -> None:
    says = (
        '[{"Id": "j1", "Names": ["bc-slurm-dep1.r0"], "State": "running",'
        ' "Labels": {"better-compute.slurm-allocation": "dep1.r0"},'
        ' "Ports": [{"host_port": 41000, "container_port": 8080}]},'
        ' {"Id": "o1", "Names": ["other"], "State": "running", "Labels": {}}]'
    )
    podman = PodmanRuntime(NODE, argv=["sh", "-c", f"printf '%s' '{says}'"])
    [found] = podman.jobs()
    assert (found.id, found.allocation_id, found.state, dict(found.ports)) == (
        "j1",
        R,
        "running",
        {8080: 41000},
    )
    assert podman.list() == []  # none of them is the node's own
    broken = PodmanRuntime(NODE, argv=["sh", "-c", "printf '%s' '{\"Id\": 1}'"])
    with pytest.raises(RuntimeFailure, match="cannot read"):
        broken.jobs()
