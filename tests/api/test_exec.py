"""A command run in a container through the node, through the real app: the node's `bcd` reports its
agent (a real listener on a local port, over an in-test runtime), and `workloads.exec` /
`endpoints.exec` run a command in a replica's or a copy's container on the node that holds it, for
its tenant (or the admin) alone, each logged as a `replica.exec` event naming its first argument
before the node is asked, and a `replica.exec_finished` with its exit code once it answered."""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from better_compute.api.node_agents import run_exec
from better_compute.api.routes import container_exec
from better_compute.bcd.agent import Agent
from better_compute.bcd.logs import Log
from better_compute.client import Compute, InvalidInputError, NotFoundError, UnavailableError
from better_compute.defaults import DEFAULT_MAX_BODY_BYTES
from better_compute.domain.fleet.node_agents import (
    EXEC_ARG_MAX,
    EXEC_ARGV_MAX,
    EXEC_AT_ONCE,
    EXEC_PER_TENANT,
    ExecResult,
    LogSource,
)
from better_compute.domain.kernel.errors import Unavailable
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


def events(fleet: NodeWorld, headers: dict[str, str], type_: str = "replica.exec") -> list[dict[str, object]]:
    got = fleet.http.get("/v1/events", params={"type": type_}, headers=headers)
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
    # Each exec is logged: who, where, the first argument only; then how it ended. Never the output.
    logged = events(fleet, fleet.admin)
    assert [(e["subject"], e["payload"]["command"]) for e in logged] == [  # type: ignore[index]
        (allocation, "busybox"),
        (replicas[0][0], "exit"),
        (replicas[0][0], "true"),
    ]
    payload = logged[0]["payload"]
    assert payload == {"node": node, "tenantId": w["tenantId"], "by": payload["by"], "command": "busybox"}  # type: ignore[index]
    finished = events(fleet, fleet.admin, "replica.exec_finished")
    assert [(e["subject"], e["payload"]["exitCode"], e["payload"]["timedOut"]) for e in finished] == [  # type: ignore[index]
        (allocation, 0, False),
        (replicas[0][0], 3, False),
        (replicas[0][0], 0, False),
    ]
    assert finished[0]["payload"] == {**payload, "exitCode": 0, "timedOut": False}
    assert "secret" not in str(logged + finished) and "on stderr" not in str(logged + finished)
    # The tenant reads its own replicas' exec events; another tenant none of them.
    assert len(events(fleet, fleet.platform)) == 3
    assert len(events(fleet, fleet.platform, "replica.exec_finished")) == 3
    assert events(fleet, acme) == [] and events(fleet, acme, "replica.exec_finished") == []


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
def test_a_node_without_an_agent_is_unavailable_and_one_gone_is_logged_with_no_end(
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
    # Each one sent is logged, before the node was asked; only the one answered says how it ended.
    assert len(events(fleet, fleet.admin)) == 3
    assert [e["payload"]["exitCode"] for e in events(fleet, fleet.admin, "replica.exec_finished")] == [0]  # type: ignore[index]


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


def _one_replica(fleet: Fleet) -> tuple[dict[str, object], str, str]:
    fleet.runtimes = {n: ExecRuntime() for n in fleet.ids}
    w = workload(fleet, 1)
    ((allocation, node),) = fleet.replicas(w["id"]).values()
    fleet.listen(node)
    fleet.runtimes[node].texts[allocation] = "up\n"
    return w, allocation, node


@pytest.mark.both_stores
def test_an_exec_is_logged_before_the_node_is_asked_so_a_crash_mid_exec_leaves_its_audit(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    w, allocation, _ = _one_replica(fleet)
    seen: list[dict[str, int]] = []

    def crash(source: LogSource, argv: Sequence[str], timeout: int) -> ExecResult:
        with fleet.store.begin() as tx:  # what the log holds as the node is asked
            seen.append(tx.events.count_by_type(None)[0])
        raise RuntimeError("the server stops mid-exec")

    monkeypatch.setattr(container_exec, "run_exec", crash)
    with pytest.raises(RuntimeError, match="mid-exec"):
        fleet.http.post(
            f"/v1/workloads/{w['id']}/exec", json={"command": ["rm", "-rf", "/x"]}, headers=fleet.platform
        )
    assert seen[0].get("replica.exec") == 1 and "replica.exec_finished" not in seen[0]
    ((logged,),) = [events(fleet, fleet.admin)]
    assert (logged["subject"], logged["payload"]["command"]) == (allocation, "rm")  # type: ignore[index]
    assert events(fleet, fleet.admin, "replica.exec_finished") == []


@pytest.mark.both_stores
def test_an_audit_write_failing_after_the_command_ran_still_answers_its_result(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    w, allocation, node = _one_replica(fleet)

    def fails(*args: object) -> None:
        raise Unavailable("the database is gone", retry_after=1)

    monkeypatch.setattr(container_exec, "record_exec_finished", fails)
    got = fleet.http.post(
        f"/v1/workloads/{w['id']}/exec", json={"command": ["exit", "4"]}, headers=fleet.platform
    )
    assert got.status_code == 200, got.text
    assert (got.json()["exitCode"], got.json()["stdout"]) == (4, f"{allocation}: exit 4\n")
    assert len(fleet.runtimes[node].runs) == 1  # ran once: no refusal to make the caller run it again
    assert len(events(fleet, fleet.admin)) == 1


def test_one_tenant_holding_its_share_of_execs_leaves_the_others_theirs(fleet: Fleet) -> None:
    w, _, node = _one_replica(fleet)
    path = f"/v1/workloads/{w['id']}/exec"
    tenant = w["tenantId"]
    assert isinstance(tenant, str)
    taken = [container_exec._shares.take(tenant) for _ in range(EXEC_PER_TENANT)]
    try:
        assert all(taken) and EXEC_PER_TENANT < EXEC_AT_ONCE
        busy = fleet.http.post(path, json={"command": ["true"]}, headers=fleet.platform)
        assert busy.status_code == 503, busy.text
        error = busy.json()["error"]
        assert error["details"]["reason"] == "exec-busy" and busy.headers["Retry-After"]
        assert error["message"].startswith(f"2 commands of tenant {tenant} are already running")
        assert fleet.runtimes[node].runs == []
        # The admin (a share of its own) still runs one, and the process's slots are not spent.
        admin = fleet.http.post(path, json={"command": ["true"]}, headers=fleet.admin)
        assert admin.status_code == 200, admin.text
    finally:
        for _ in taken:
            container_exec._shares.give(tenant)
    assert fleet.http.post(path, json={"command": ["true"]}, headers=fleet.platform).status_code == 200
    assert container_exec._shares.held == {}


def test_an_agent_answering_text_that_is_not_utf8_is_unavailable_not_a_500(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    w, _, node = _one_replica(fleet)
    lie = b'{"exitCode": 0, "stdout": "\\ud800", "stderr": "", "truncated": false, "timedOut": false}'
    transport = httpx.MockTransport(lambda request: httpx.Response(200, stream=httpx.ByteStream(lie)))
    monkeypatch.setattr(container_exec, "run_exec", functools.partial(run_exec, transport=transport))
    got = fleet.http.post(f"/v1/workloads/{w['id']}/exec", json={"command": ["true"]}, headers=fleet.platform)
    assert got.status_code == 503, got.text
    assert got.json()["error"]["details"] == {"node": node, "reason": "agent-unreachable"}
    assert "not an exec answer" in got.json()["error"]["message"]


def test_a_body_id_or_name_that_contradicts_the_path_is_refused(fleet: Fleet) -> None:
    w, _, node = _one_replica(fleet)
    path = f"/v1/workloads/{w['id']}/exec"
    other = fleet.http.post(path, json={"id": "other", "command": ["true"]}, headers=fleet.platform)
    assert other.status_code == 400 and other.json()["error"]["code"] == "INVALID_INPUT"
    assert other.json()["error"]["details"]["field"] == "id"
    same = fleet.http.post(path, json={"id": w["id"], "command": ["true"]}, headers=fleet.platform)
    assert same.status_code == 200, same.text
    body = {"name": "other", "component": "llama", "command": ["true"]}
    named = fleet.http.post("/v1/endpoints/chat/exec", json=body, headers=fleet.platform)
    assert named.status_code == 400 and named.json()["error"]["details"]["field"] == "name"
    assert len(fleet.runtimes[node].runs) == 1


def test_the_body_is_bounded_in_bytes_by_the_servers_cap_even_within_the_argument_limits(
    fleet: Fleet,
) -> None:
    w, allocation, node = _one_replica(fleet)
    path = f"/v1/workloads/{w['id']}/exec"
    headers = {**fleet.platform, "Content-Type": "application/json"}
    wide = "\N{GRINNING FACE}"  # 4 bytes in UTF-8

    def body(last: str) -> bytes:
        argv = [wide * EXEC_ARG_MAX] * (EXEC_ARGV_MAX - 1) + [last]
        return json.dumps({"command": argv}, ensure_ascii=False, separators=(",", ":")).encode()

    room = DEFAULT_MAX_BODY_BYTES - len(body(""))
    last = wide * (room // 4) + "a" * (room % 4)
    assert len(last) <= EXEC_ARG_MAX and len(body(last)) == DEFAULT_MAX_BODY_BYTES
    fits = fleet.http.post(path, content=body(last), headers=headers)
    assert fits.status_code == 200, fits.text[:300]
    assert fleet.runtimes[node].runs[-1][1][-1] == last  # reached the container whole
    over = fleet.http.post(path, content=body(last + "a"), headers=headers)
    assert over.status_code == 413 and over.json()["error"]["details"]["limit"] == DEFAULT_MAX_BODY_BYTES
    # 64 arguments of 4,096 4-byte characters are within the argument limits but over the bytes.
    whole = fleet.http.post(path, content=body(wide * EXEC_ARG_MAX), headers=headers)
    assert whole.status_code == 413
    assert len(fleet.runtimes[node].runs) == 1 and allocation


def test_an_exec_whose_audit_cannot_be_written_is_not_sent(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    w, _, node = _one_replica(fleet)

    def fails(*args: object) -> None:
        raise Unavailable("the database is gone", retry_after=1)

    monkeypatch.setattr(container_exec, "record_exec", fails)
    got = fleet.http.post(f"/v1/workloads/{w['id']}/exec", json={"command": ["true"]}, headers=fleet.platform)
    assert got.status_code == 503 and got.json()["error"]["code"] == "UNAVAILABLE"
    assert fleet.runtimes[node].runs == []  # no command runs unlogged
    assert container_exec._shares.held == {}  # its place is given back
