"""bcd's agent runs a command in a container (`POST /v1/exec/{allocationId}`): a real listener on a
local port, over an in-test runtime that keeps the runtime's contract (an `ExecResult`; LookupError
for an allocation it runs nothing for), and over the fake runtime's model of `podman exec`."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest

from better_compute.bcd.agent import Agent, NoContainers
from better_compute.bcd.fake_runtime import FakeRuntime
from better_compute.bcd.logs import Log
from better_compute.domain.fleet.node_agents import EXEC_BODY_MAX, EXEC_OUTPUT_MAX, ExecResult
from better_compute.domain.kernel.containers import parse_container


class Runtime:
    """Runs nothing: answers what it was asked, and records each exec."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, tuple[str, ...], float]] = []

    def logs(self, allocation_id: str, tail: int) -> str:
        raise LookupError(allocation_id)

    def run_in(self, allocation_id: str, argv: Sequence[str], timeout: float) -> ExecResult:
        self.runs.append((allocation_id, tuple(argv), timeout))
        if allocation_id == "boom":
            raise RuntimeError("podman: cannot connect")
        if allocation_id not in ("dep-1.r0", "copy:llama:0"):
            raise LookupError(allocation_id)
        return ExecResult(7, " ".join(argv) + "\n", "warn\n")


@pytest.fixture
def runtime() -> Runtime:
    return Runtime()


@pytest.fixture
def agent(runtime: Runtime) -> Iterator[Agent]:
    with Agent(runtime, "127.0.0.1", 0, Log(io.StringIO())) as started:
        yield started


def post(agent: Agent, path: str, body: Any, token: str | None = None) -> httpx.Response:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(agent.url + path, content=content, headers=headers, timeout=5)


def test_an_exec_is_run_for_the_processes_token_alone(agent: Agent, runtime: Runtime) -> None:
    body = {"command": ["busybox", "echo", "hi"]}
    assert post(agent, "/v1/exec/dep-1.r0", body).status_code == 401
    assert post(agent, "/v1/exec/dep-1.r0", body, "x" * 43).status_code == 401
    assert runtime.runs == []
    ok = post(agent, "/v1/exec/dep-1.r0", body, agent.token)
    assert ok.status_code == 200 and ok.headers["content-type"] == "application/json"
    assert ok.json() == {
        "exitCode": 7,
        "stdout": "busybox echo hi\n",
        "stderr": "warn\n",
        "truncated": False,
        "timedOut": False,
    }
    assert runtime.runs == [("dep-1.r0", ("busybox", "echo", "hi"), 10.0)]  # 10 s by default
    copy = post(agent, "/v1/exec/copy%3Allama%3A0", {**body, "timeoutSeconds": 60}, agent.token)
    assert copy.status_code == 200 and runtime.runs[-1] == ("copy:llama:0", ("busybox", "echo", "hi"), 60.0)


def test_the_command_and_its_timeout_are_bounded_before_anything_runs(agent: Agent, runtime: Runtime) -> None:
    for bad in (
        {"command": []},
        {"command": "echo hi"},
        {"command": ["x"] * 65},
        {"command": ["x" * 4097]},
        {"command": ["echo", "a\x00b"]},
        {"command": ["echo"], "timeoutSeconds": 0},
        {"command": ["echo"], "timeoutSeconds": 61},
        {"command": ["echo"], "timeoutSeconds": "5"},
        {"command": ["echo"], "tty": True},
        ["echo"],
    ):
        refused = post(agent, "/v1/exec/dep-1.r0", bad, agent.token)
        assert refused.status_code == 400, bad
    assert post(agent, "/v1/exec/dep-1.r0", b"{not json", agent.token).status_code == 400
    assert post(agent, "/v1/exec/dep-1.r0", b"[" * 100_000, agent.token).status_code == 400
    too_big = post(agent, "/v1/exec/dep-1.r0", b" " * (EXEC_BODY_MAX + 1), agent.token)
    assert too_big.status_code == 413
    assert runtime.runs == []


def test_no_container_is_404_a_runtime_failure_503_and_other_routes_404(
    agent: Agent, runtime: Runtime
) -> None:
    body = {"command": ["true"]}
    assert post(agent, "/v1/exec/dep-9.r0", body, agent.token).status_code == 404
    assert post(agent, "/v1/exec/", body, agent.token).status_code == 404
    assert post(agent, "/v1/logs/dep-1.r0", body, agent.token).status_code == 404
    failed = post(agent, "/v1/exec/boom", body, agent.token)
    assert failed.status_code == 503 and "cannot connect" in failed.text
    with Agent(NoContainers(), "127.0.0.1", 0, Log(io.StringIO())) as none:
        assert post(none, "/v1/exec/dep-1.r0", body, none.token).status_code == 404


def test_the_agent_logs_the_commands_first_argument_never_the_others(runtime: Runtime) -> None:
    stream = io.StringIO()
    with Agent(runtime, "127.0.0.1", 0, Log(stream)) as served:
        body = {"command": ["mysql", "--password=hunter2"]}
        assert post(served, "/v1/exec/dep-1.r0", body, served.token).status_code == 200
    logged = stream.getvalue()
    assert '"agent.exec"' in logged and '"mysql"' in logged and "hunter2" not in logged


@pytest.fixture
def fake() -> Iterator[FakeRuntime]:
    runtime = FakeRuntime("n-1")
    spec = parse_container({"image": "busybox", "env": {"MODEL": "llama"}})
    runtime.start(runtime.create("dep-1.r0", spec))
    runtime.create("dep-1.r1", spec)  # created, never started
    yield runtime
    runtime.close()


def test_the_fake_runtime_answers_as_podman_exec_does(fake: FakeRuntime) -> None:
    assert fake.run_in("dep-1.r0", ["busybox", "echo", "hi"], 10) == ExecResult(0, "hi\n", "")
    assert fake.run_in("dep-1.r0", ["env"], 10).stdout == "MODEL=llama\n"
    assert fake.run_in("dep-1.r0", ["sh", "-c", "exit 3"], 10).exit_code == 3
    assert fake.run_in("dep-1.r0", ["false"], 10).exit_code == 1
    missing = fake.run_in("dep-1.r0", ["nosuch"], 10)
    assert missing.exit_code == 127 and "executable file `nosuch` not found" in missing.stderr
    stopped = fake.run_in("dep-1.r1", ["true"], 10)
    assert stopped.exit_code == 125 and "container state improper" in stopped.stderr
    slow = fake.run_in("dep-1.r0", ["sleep", "30"], 10)
    assert (slow.exit_code, slow.timed_out) == (124, True)
    assert fake.run_in("dep-1.r0", ["sleep", "1"], 10) == ExecResult(0, "", "")
    endless = fake.run_in("dep-1.r0", ["yes"], 10)
    assert endless.truncated and endless.timed_out and len(endless.stdout) == EXEC_OUTPUT_MAX
    with pytest.raises(LookupError):
        fake.run_in("dep-9.r0", ["true"], 10)


def test_an_exec_through_the_agent_over_the_fake_runtime(fake: FakeRuntime) -> None:
    with Agent(fake, "127.0.0.1", 0, Log(io.StringIO())) as served:
        got = post(served, "/v1/exec/dep-1.r0", {"command": ["echo", "hi", "there"]}, served.token)
        assert got.json() == {
            "exitCode": 0,
            "stdout": "hi there\n",
            "stderr": "",
            "truncated": False,
            "timedOut": False,
        }
        big = post(served, "/v1/exec/dep-1.r0", {"command": ["yes"], "timeoutSeconds": 1}, served.token)
        assert big.json()["truncated"] and len(big.json()["stdout"]) == EXEC_OUTPUT_MAX
