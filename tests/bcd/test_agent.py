"""bcd's agent (`bcd run --listen`): a real listener on a local port, over an in-test runtime that
keeps the runtime's contract (the newest `tail` lines; LookupError for an allocation it runs nothing
for)."""

from __future__ import annotations

import io
from collections.abc import Iterator

import httpx
import pytest

from better_compute.bcd.agent import Agent, parse_listen
from better_compute.bcd.logs import Log
from better_compute.domain.fleet.node_agents import LOG_BYTES_MAX


class Runtime:
    """Containers' logs by allocation id; records each read."""

    def __init__(self, logs: dict[str, str]) -> None:
        self.texts = logs
        self.reads: list[tuple[str, int]] = []

    def logs(self, allocation_id: str, tail: int) -> str:
        self.reads.append((allocation_id, tail))
        if allocation_id == "boom":
            raise RuntimeError("podman: cannot connect")
        lines = self.texts[allocation_id].splitlines(keepends=True)
        return "".join(lines[-tail:])


@pytest.fixture
def runtime() -> Runtime:
    lines = "".join(f"line {n}\n" for n in range(500))
    return Runtime(
        {
            "dep-1.r0": lines,
            "copy:llama:0": "ready\n",
            "big": "x" * 100 + "\n" + "y" * (2 * LOG_BYTES_MAX) + "\n",
        }
    )


@pytest.fixture
def agent(runtime: Runtime) -> Iterator[Agent]:
    with Agent(runtime, "127.0.0.1", 0, Log(io.StringIO())) as started:
        yield started


def get(agent: Agent, path: str, token: str | None = None) -> httpx.Response:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx.get(agent.url + path, headers=headers, timeout=5)


def test_only_a_request_with_the_processes_token_is_answered(agent: Agent, runtime: Runtime) -> None:
    assert len(agent.token) >= 43 and agent.url == f"http://127.0.0.1:{agent.port}"
    assert get(agent, "/v1/logs/dep-1.r0").status_code == 401
    assert get(agent, "/v1/logs/dep-1.r0", "x" * 43).status_code == 401
    assert get(agent, "/v1/logs/dep-1.r0", agent.token + "x").status_code == 401
    basic = httpx.get(agent.url + "/v1/logs/dep-1.r0", headers={"Authorization": f"Basic {agent.token}"})
    assert basic.status_code == 401
    assert runtime.reads == []  # nothing was read for any of them
    ok = get(agent, "/v1/logs/dep-1.r0", agent.token)
    assert ok.status_code == 200 and ok.headers["content-type"].startswith("text/plain")
    assert ok.text.splitlines() == [f"line {n}" for n in range(400, 500)]  # 100 by default
    assert agent.report() == {"kind": "Agent", "url": agent.url, "token": agent.token}


def test_a_second_agent_has_another_token(runtime: Runtime, agent: Agent) -> None:
    with Agent(runtime, "127.0.0.1", 0, Log(io.StringIO())) as other:
        assert other.token != agent.token
        assert get(other, "/v1/logs/dep-1.r0", agent.token).status_code == 401


def test_the_tail_is_bounded_and_the_answer_at_most_a_mebibyte(agent: Agent, runtime: Runtime) -> None:
    assert get(agent, "/v1/logs/dep-1.r0?tail=3", agent.token).text == "line 497\nline 498\nline 499\n"
    assert get(agent, "/v1/logs/dep-1.r0?tail=10000", agent.token).text.count("\n") == 500
    for bad in ("0", "10001", "-1", "abc", "1.5", "3&tail=4"):
        refused = get(agent, f"/v1/logs/dep-1.r0?tail={bad}", agent.token)
        assert refused.status_code == 400, bad
    assert get(agent, "/v1/logs/dep-1.r0?lines=3", agent.token).status_code == 400
    assert runtime.reads == [("dep-1.r0", 3), ("dep-1.r0", 10000)]
    big = get(agent, "/v1/logs/big?tail=2", agent.token)
    assert big.status_code == 200
    assert len(big.content) <= LOG_BYTES_MAX and big.content.endswith(b"y\n")  # its newest bytes stay


def test_an_allocation_without_a_container_is_404_and_a_runtime_failure_503(
    agent: Agent, runtime: Runtime
) -> None:
    assert get(agent, "/v1/logs/dep-9.r0", agent.token).status_code == 404
    assert get(agent, "/v1/logs/", agent.token).status_code == 404
    assert get(agent, "/v1/other", agent.token).status_code == 404
    failed = get(agent, "/v1/logs/boom", agent.token)
    assert failed.status_code == 503 and "cannot connect" in failed.text
    # A copy's name, percent-encoded in the path, reads that copy's log.
    assert get(agent, "/v1/logs/copy%3Allama%3A0", agent.token).text == "ready\n"


def test_listen_addresses(runtime: Runtime) -> None:
    assert parse_listen("10.0.0.5:7070") == ("10.0.0.5", 7070)
    assert parse_listen("[::1]:7070") == ("::1", 7070)
    for bad in ("7070", "host:", ":7070", "host:70000", "host:x"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_listen(bad)
    with pytest.raises(ValueError, match="--listen-url"):
        Agent(runtime, "0.0.0.0", 0, Log(io.StringIO()))
    with pytest.raises(ValueError, match="http"):
        Agent(runtime, "127.0.0.1", 0, Log(io.StringIO()), advertise="ftp://node-1:7070")
    told = Agent(runtime, "127.0.0.1", 0, Log(io.StringIO()), advertise="http://node-1.example:7070/")
    try:
        assert told.url == "http://node-1.example:7070"
    finally:
        told.stop()


def test_idle_or_trickling_connections_cannot_exhaust_the_agent(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket
    import time

    from better_compute.bcd import agent as agent_module

    monkeypatch.setattr(agent_module, "HANDLER_TIMEOUT", 1.5)
    with Agent(runtime, "127.0.0.1", 0, Log(io.StringIO())) as served:
        idle = [
            socket.create_connection(("127.0.0.1", served.port)) for _ in range(agent_module.MAX_CONNECTIONS)
        ]
        time.sleep(0.2)
        # One more than the bound is refused at once, not queued behind the idle ones.
        extra = socket.create_connection(("127.0.0.1", served.port))
        extra.settimeout(2)
        assert extra.recv(100).startswith(b"HTTP/1.1 503")
        extra.close()
        # An idle connection is closed after the handler's timeout, and its slot is free again.
        idle[0].settimeout(5)
        started = time.monotonic()
        assert idle[0].recv(100) == b""
        assert time.monotonic() - started < 3
        for s in idle:
            s.close()
        time.sleep(0.3)
        assert get(served, "/v1/logs/dep-1.r0?tail=1", served.token).status_code == 200
