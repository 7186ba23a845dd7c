"""A command run in a container through the node, through the real app: the node's `bcd` reports its
agent (a real listener on a local port, over an in-test runtime), and `workloads.exec` /
`endpoints.exec` run a command in a replica's or a copy's container on the node that holds it, for
its tenant (or the admin) alone, each logged as a `replica.exec` event naming its first argument."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import pytest

from better_compute.api.routes import container_exec
from better_compute.bcd.agent import Agent
from better_compute.bcd.logs import Log
from better_compute.client import Compute, InvalidInputError, NotFoundError, UnavailableError
from better_compute.domain.fleet.node_agents import EXEC_AT_ONCE, ExecResult
from better_compute.service.gate.mig_gate import Reconciler
from better_compute.storage.store import Store
from tests.api.test_logs import Fleet, Runtime, fleet, workload
from tests.builders import bearer, tenant_token
from tests.node_world import SERVER, NodeWorld

__all__ = ["fleet"]


class ExecRuntime(Runtime):
    """Logs as the logs tests' runtime; an exec answers the argv it ran, with the allocation, and
    exits with the number after `exit` (`["exit", "3"]`); `sleep` answers as a command killed past
    its timeout, `yes` as one whose output was cut."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[tuple[str, tuple[str, ...], float]] = []

    def run_in(self, allocation_id: str, argv: Sequence[str], timeout: float) -> ExecResult:
        if allocation_id not in self.texts:
            raise LookupError(allocation_id)
        self.runs.append((allocation_id, tuple(argv), timeout))
        if argv[0] == "sleep":  # what a command past its timeout answers
            return ExecResult(124, "begun\n", "", timed_out=True)
        if argv[0] == "yes":  # what a command past the output bound answers
            return ExecResult(0, "y\n" * 4, "", truncated=True)
        code = int(argv[1]) if argv[0] == "exit" else 0
        return ExecResult(code, f"{allocation_id}: {' '.join(argv)}\n", "on stderr\n")


def events(fleet: NodeWorld, headers: dict[str, str]) -> list[dict[str, object]]:
    got = fleet.http.get("/v1/events", params={"type": "replica.exec"}, headers=headers)
    assert got.status_code == 200, got.text
    items: list[dict[str, object]] = got.json()["items"]
    return items


@pytest.mark.both_stores
def test_a_command_runs_in_a_replicas_container_for_its_tenant_alone_and_is_logged(fleet: Fleet) -> None:
    fleet.runtimes = {n: ExecRuntime() for n in fleet.ids}
    w = workload(fleet, 2)
    replicas = fleet.replicas(w["id"])
    for node in fleet.ids:
        fleet.listen(node)
    for allocation, node in replicas.values():
        fleet.runtimes[node].texts[allocation] = "up\n"
    tenant = fleet.client(fleet.platform)
    got = tenant.workloads.exec(w["id"], ["busybox", "echo", "--secret=x"], replica=1, timeout_seconds=30)
    allocation, node = replicas[1]
    assert (got.allocation_id, got.node, got.exit_code) == (allocation, node, 0)
    assert (got.stdout, got.stderr, got.truncated, got.timed_out) == (
        f"{allocation}: busybox echo --secret=x\n",
        "on stderr\n",
        False,
        False,
    )
    assert fleet.runtimes[node].runs == [(allocation, ("busybox", "echo", "--secret=x"), 30.0)]
    # By name, no replica named: the first; 10 s by default; the command's exit code is answered.
    first = tenant.workloads.exec("w", ["exit", "3"])
    assert (first.allocation_id, first.exit_code) == (replicas[0][0], 3)
    assert fleet.runtimes[replicas[0][1]].runs[-1][2] == 10.0
    # The admin runs one too; another tenant learns nothing, and nothing runs for it.
    assert fleet.client(fleet.admin).workloads.exec(w["id"], ["true"], replica=0).exit_code == 0
    acme = bearer(tenant_token(fleet.store, "acme"))
    body = {"command": ["true"]}
    other = fleet.http.post(f"/v1/workloads/{w['id']}/exec", json=body, headers=acme)
    assert other.status_code == 404 and other.json()["error"]["code"] == "NOT_FOUND"
    assert fleet.http.post(f"/v1/workloads/{w['id']}/exec", json=body).status_code == 401
    # Each exec is logged: who, where, the first argument only, the exit code; never the output.
    logged = events(fleet, fleet.admin)
    assert [(e["subject"], e["payload"]["command"], e["payload"]["exitCode"]) for e in logged] == [  # type: ignore[index]
        (allocation, "busybox", 0),
        (replicas[0][0], "exit", 3),
        (replicas[0][0], "true", 0),
    ]
    payload = logged[0]["payload"]
    assert payload == {
        "node": node,
        "tenantId": w["tenantId"],
        "by": payload["by"],
        "command": "busybox",
        "exitCode": 0,
    }  # type: ignore[index]
    assert "secret" not in str(logged) and "on stderr" not in str(logged)
    # The tenant reads its own replicas' exec events; another tenant none of them.
    assert len(events(fleet, fleet.platform)) == 3
    assert events(fleet, acme) == []


def test_the_command_and_its_timeout_are_bounded_before_anything_runs(fleet: Fleet) -> None:
    fleet.runtimes = {n: ExecRuntime() for n in fleet.ids}
    w = workload(fleet, 1)
    ((allocation, node),) = fleet.replicas(w["id"]).values()
    fleet.listen(node)
    fleet.runtimes[node].texts[allocation] = "up\n"
    path = f"/v1/workloads/{w['id']}/exec"
    for bad in (
        {"command": []},
        {"command": "echo hi"},
        {"command": ["x"] * 65},
        {"command": ["x" * 4097]},
        {"command": ["echo", "a\x00b"]},
        {"command": ["echo"], "timeoutSeconds": 0},
        {"command": ["echo"], "timeoutSeconds": 61},
        {"command": ["echo"], "tty": True},
        {},
    ):
        refused = fleet.http.post(path, json=bad, headers=fleet.platform)
        assert refused.status_code == 400, (bad, refused.text)
        assert refused.json()["error"]["code"] == "INVALID_INPUT"
    with pytest.raises(NotFoundError, match="replica 7"):
        fleet.client(fleet.platform).workloads.exec(w["id"], ["true"], replica=7)
    # Execs under way in one server are bounded: one more is refused at once, not left to wait.
    taken = [container_exec._slots.acquire(blocking=False) for _ in range(EXEC_AT_ONCE)]
    try:
        assert all(taken)
        busy = fleet.http.post(path, json={"command": ["true"]}, headers=fleet.platform)
        assert busy.status_code == 503 and busy.json()["error"]["details"]["reason"] == "exec-busy"
    finally:
        for _ in taken:
            container_exec._slots.release()
    assert fleet.runtimes[node].runs == []
    assert events(fleet, fleet.admin) == []


@pytest.mark.both_stores
def test_a_node_without_an_agent_is_unavailable_and_one_gone_is_logged_with_no_exit_code(
    fleet: Fleet,
) -> None:
    fleet.runtimes = {n: ExecRuntime() for n in fleet.ids}
    w = workload(fleet, 1)
    ((allocation, node),) = fleet.replicas(w["id"]).values()
    answer = fleet.http.post(
        f"/v1/workloads/{w['id']}/exec", json={"command": ["true"]}, headers=fleet.platform
    )
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "UNAVAILABLE"
    assert answer.json()["error"]["message"] == f"node {node} does not serve exec (bcd run --listen)"
    assert events(fleet, fleet.admin) == []  # nothing was sent: nothing to log
    agent = fleet.listen(node)
    tenant = fleet.client(fleet.platform)
    with pytest.raises(NotFoundError, match="no container"):
        tenant.workloads.exec(w["id"], ["true"])  # the node runs no container for it
    fleet.runtimes[node].texts[allocation] = "up\n"
    assert tenant.workloads.exec(w["id"], ["true"]).exit_code == 0
    agent.stop()
    with pytest.raises(UnavailableError, match="did not answer"):
        tenant.workloads.exec(w["id"], ["true"])
    assert [e["payload"]["exitCode"] for e in events(fleet, fleet.admin)] == [0, None]  # type: ignore[index]


def test_a_command_runs_in_a_copys_container_on_the_node_the_copy_is_on(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    daemon, _ = world.daemon("n-1")
    assert daemon.step(False)
    endpoint = {
        "name": "chat",
        "variants": [
            {
                "name": "AllTraffic",
                "poolId": "p1",
                "instanceCount": 1,
                "acceleratorPartitionLayouts": [
                    {"acceleratorPartitionTypes": ["mig-3g.40gb", "mig-3g.40gb"]}
                ],
            }
        ],
    }
    assert world.http.post("/v1/endpoints", json=endpoint, headers=world.platform).status_code == 201
    assert daemon.step(True)
    Reconciler(store, world.clock, "r1").tick()
    component = {
        "name": "llama",
        "endpointName": "chat",
        "variantName": "AllTraffic",
        "model": "llama-3-8b",
        "partitionType": "mig-3g.40gb",
        "devicesRequired": 1,
        "cpuCores": 2,
        "memoryMiB": 16384,
        "copies": 2,
    }
    assert world.http.post("/v1/components", json=component, headers=world.platform).status_code == 201
    runtime = ExecRuntime()
    runtime.texts = {"copy:llama:0": "", "copy:llama:1": ""}
    with Agent(runtime, "127.0.0.1", 0, Log(io.StringIO())) as agent:
        daemon.agent = agent
        daemon.starting()
        assert daemon.step(True) is not None
        tenant = Compute(SERVER, world.platform["Authorization"][7:], transport=world.transport(), retries=0)
        got = tenant.endpoints.exec("chat", "llama", ["nvidia-smi", "-L"], copy=1)
        assert (got.allocation_id, got.node, got.stdout) == (
            "copy:llama:1",
            "n-1",
            "copy:llama:1: nvidia-smi -L\n",
        )
        assert tenant.endpoints.exec("chat", "llama", ["exit", "2"]).exit_code == 2
        with pytest.raises(NotFoundError):
            tenant.endpoints.exec("chat", "mistral", ["true"])
        with pytest.raises(NotFoundError):
            tenant.endpoints.exec("chat", "llama", ["true"], copy=5)
        with pytest.raises(InvalidInputError):
            tenant.endpoints.exec("chat", "llama", [])
        acme = bearer(tenant_token(store, "acme"))
        body = {"component": "llama", "command": ["true"]}
        assert world.http.post("/v1/endpoints/chat/exec", json=body, headers=acme).status_code == 404
        assert (
            world.http.post(
                "/v1/endpoints/chat/exec", json={"command": ["true"]}, headers=world.platform
            ).status_code
            == 400
        )
    logged = events(world, world.admin)
    assert [(e["subject"], e["payload"]["command"]) for e in logged] == [  # type: ignore[index]
        ("copy:llama:1", "nvidia-smi"),
        ("copy:llama:0", "exit"),
    ]
    assert len(events(world, world.platform)) == 2 and events(world, acme) == []
