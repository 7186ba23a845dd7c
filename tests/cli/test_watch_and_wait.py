"""`--watch` on `reservations show`, `workloads show` and `endpoints show`, and `wait --for` (issue 39,
item 3): through the CLI at 80 columns and piped, with the poll's sleep and clock replaced so that
nothing waits. The workload stories run against the real app on both stores."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from better_compute.cli import watch
from better_compute.cli.app import app
from tests.cli.test_workloads_cmd import SHAPE, Fleet, world  # noqa: F401  (fixture)
from tests.client.fakes import FakeServer, error_json, reservation_json

RSV = ("GET", "/v1/reservations/rsv-1")


def at80(runner: CliRunner, *args: str) -> Any:
    return runner.invoke(app, [*args], env={"COLUMNS": "80"})


def piped(runner: CliRunner, *args: str) -> Any:
    # CliRunner's output is not a terminal: what a pipe gets.
    return runner.invoke(app, [*args])


def _fake_time(monkeypatch: pytest.MonkeyPatch, each: Callable[[int], None]) -> list[float]:
    """Replace the watch's sleep and clock: each sleep advances the clock and calls `each(n)`."""
    slept: list[float] = []
    now = [1000.0]

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds
        each(len(slept))

    monkeypatch.setattr(watch, "sleep", sleep)
    monkeypatch.setattr(watch, "clock", lambda: now[0])
    return slept


@pytest.mark.parametrize("invoke", [at80, piped])
def test_reservations_show_watch_prints_each_change_and_stops_when_released(
    invoke: Callable[..., Any], runner: CliRunner, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.routes[RSV] = reservation_json(status="scheduled")

    def meanwhile(n: int) -> None:
        # unchanged on the first poll, active on the second, released on the third
        if n == 2:
            server.routes[RSV] = reservation_json(status="active")
        if n == 3:
            server.routes[RSV] = reservation_json(status="released")

    slept = _fake_time(monkeypatch, meanwhile)
    result = invoke(runner, "reservations", "show", "rsv-1", "--watch", "--interval", "0.5", "--token", "t")
    assert result.exit_code == 0, result.output
    statuses = [
        line.split()[1]
        for line in result.stdout.splitlines()
        if line.split() and line.split()[0].lower() == "status"
    ]
    assert statuses == ["scheduled", "active", "released"]  # the unchanged poll printed nothing
    assert slept == [0.5, 0.5, 0.5]
    assert all(len(line) <= 80 for line in result.stdout.splitlines()) or invoke is piped


def test_reservations_get_is_show_and_a_final_status_is_not_watched(
    runner: CliRunner, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.routes[RSV] = reservation_json(status="ended")
    slept = _fake_time(monkeypatch, lambda n: None)
    result = piped(runner, "reservations", "get", "rsv-1", "-w", "--json", "--token", "t")
    assert result.exit_code == 0, result.output
    (only,) = result.stdout.splitlines()
    assert json.loads(only)["status"] == "ended"
    assert slept == []


def test_watch_ctrl_c_exits_130(
    runner: CliRunner, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.routes[RSV] = reservation_json(status="active")

    def interrupt(n: int) -> None:
        raise KeyboardInterrupt

    _fake_time(monkeypatch, interrupt)
    result = piped(runner, "reservations", "show", "rsv-1", "--watch", "--token", "t")
    assert result.exit_code == 130
    assert "active" in result.stdout


def test_watch_of_a_missing_reservation_is_refused(runner: CliRunner, server: FakeServer) -> None:
    server.routes[RSV] = (404, error_json("NOT_FOUND", "reservation rsv-1 not found"))
    result = piped(runner, "reservations", "show", "rsv-1", "--watch", "--token", "t")
    assert result.exit_code == 1
    assert "reservation rsv-1 not found" in result.stderr


def test_endpoints_show_watch_stops_at_in_service(
    runner: CliRunner, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def endpoint(status: str) -> dict[str, Any]:
        return {
            "name": "e1",
            "tenantId": "acme",
            "status": status,
            "variants": [],
            "instances": [],
            "createdAt": "2030-01-01T00:00:00Z",
            "updatedAt": "2030-01-01T00:00:00Z",
        }

    path = ("GET", "/v1/endpoints/e1")
    server.routes[path] = endpoint("Creating")

    def meanwhile(n: int) -> None:
        server.routes[path] = endpoint("InService")

    _fake_time(monkeypatch, meanwhile)
    result = piped(runner, "endpoints", "show", "e1", "--watch", "--json", "--token", "t")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["status"] for line in result.stdout.splitlines()] == ["Creating", "InService"]


def _endpoint(status: str) -> dict[str, Any]:
    return {
        "name": "e1",
        "tenantId": "acme",
        "status": status,
        "variants": [],
        "instances": [],
        "createdAt": "2030-01-01T00:00:00Z",
        "updatedAt": "2030-01-01T00:00:00Z",
    }


def test_wait_for_an_endpoints_state_reads_its_status(
    runner: CliRunner, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = ("GET", "/v1/endpoints/e1")
    server.routes[path] = _endpoint("Creating")

    def meanwhile(n: int) -> None:
        if n == 3:
            server.routes[path] = _endpoint("InService")

    slept = _fake_time(monkeypatch, meanwhile)
    result = at80(runner, "wait", "--for=state=inservice", "ep/e1", "--timeout", "1m", "--token", "t")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "endpoint/e1 condition met: state=inservice"
    assert len(slept) == 3 and len(server.requests) == 4


def _create(runner: CliRunner, world: Fleet) -> str:  # noqa: F811
    made = runner.invoke(
        app, ["workloads", "create", "train", *SHAPE, "--replicas", "2", "--json", "--token", world.acme]
    )
    assert made.exit_code == 0, made.output
    return str(json.loads(made.stdout)["id"])


def test_workloads_show_watch_ends_when_the_workload_is_deleted(
    runner: CliRunner,
    world: Fleet,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wid = _create(runner, world)

    def meanwhile(n: int) -> None:
        if n == 1:
            world.http.request(
                "POST", f"/v1/workloads/{wid}/scale", json={"replicas": 1}, headers=_auth(world)
            )
        if n == 3:
            world.http.request("DELETE", f"/v1/workloads/{wid}", headers=_auth(world))

    _fake_time(monkeypatch, meanwhile)
    result = at80(runner, "workloads", "show", wid, "--watch", "--token", world.acme)
    assert result.exit_code == 0, result.output
    assert result.stdout.count(wid) >= 2  # shown, then shown again after the scale
    assert result.stdout.rstrip().endswith(f"workload {wid} deleted")


def _auth(world: Fleet) -> dict[str, str]:  # noqa: F811
    return {"Authorization": f"Bearer {world.acme}"}


def test_wait_for_a_workloads_phase_is_met_at_once(runner: CliRunner, world: Fleet) -> None:  # noqa: F811
    wid = _create(runner, world)
    shown = json.loads(runner.invoke(app, ["workloads", "show", wid, "--json", "--token", world.acme]).stdout)
    phase = shown["deployments"][0]["phase"]
    result = piped(runner, "wait", f"--for=phase={phase.upper()}", f"workload/{wid}", "--token", world.acme)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"workload/{wid} condition met: phase={phase.upper()}"
    as_json = piped(
        runner, "wait", f"--for=phase={phase}", f"workloads/{wid}", "--json", "--token", world.acme
    )
    assert json.loads(as_json.stdout) == {"met": f"phase={phase}", "kind": "workload", "name": wid}


def test_wait_times_out_with_status_4_and_says_what_it_waited_for(
    runner: CliRunner,
    world: Fleet,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wid = _create(runner, world)
    slept = _fake_time(monkeypatch, lambda n: None)
    result = at80(
        runner, "wait", "--for=reason=never", f"workload/{wid}", "--timeout", "10s", "--token", world.acme
    )
    assert result.exit_code == 4
    assert f"timed out after 10s waiting for workload/{wid}: reason=never" in result.stderr
    assert sum(slept) == 10  # polled every 2 s, the last wait cut to the deadline
    as_json = piped(
        runner,
        "wait",
        "--for=reason=never",
        f"workload/{wid}",
        "--timeout=1s",
        "--json",
        "--token",
        world.acme,
    )
    assert as_json.exit_code == 4
    assert json.loads(as_json.stderr)["error"]["code"] == "TIMEOUT"


def test_wait_for_delete_returns_when_the_workload_is_gone(
    runner: CliRunner,
    world: Fleet,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wid = _create(runner, world)

    def meanwhile(n: int) -> None:
        if n == 2:
            world.http.request("DELETE", f"/v1/workloads/{wid}", headers=_auth(world))

    slept = _fake_time(monkeypatch, meanwhile)
    result = piped(runner, "wait", "--for=delete", f"wl/{wid}", "--interval", "1", "--token", world.acme)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"workload/{wid} deleted"
    assert slept == [1, 1]


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["--for=phase", "workload/w1"], "not a condition"),
        (["--for=phase=running", "pod/w1"], "not KIND/NAME"),
        (["--for=phase=running", "workload"], "not KIND/NAME"),
        (["--for=delete", "workload/w1", "--timeout", "soon"], "--timeout"),
        (["--for=delete", "workload/w1", "--timeout", "2w"], "at most 1w"),
    ],
)
def test_wait_refuses_a_bad_command_line_with_status_2(
    runner: CliRunner, server: FakeServer, args: list[str], hint: str
) -> None:
    result = at80(runner, "wait", *args, "--token", "t")
    assert result.exit_code == 2, result.output
    assert hint in result.output
    assert server.requests == []


def test_wait_names_a_field_the_object_does_not_have(runner: CliRunner, server: FakeServer) -> None:
    server.routes[RSV] = reservation_json(status="active")
    result = at80(runner, "wait", "--for=phse=running", "reservation/rsv-1", "--token", "t")
    assert result.exit_code == 2
    assert "has no field 'phse'" in result.output


def test_wait_on_a_missing_object_is_refused_not_timed_out(runner: CliRunner, server: FakeServer) -> None:
    server.routes[RSV] = (404, error_json("NOT_FOUND", "reservation rsv-1 not found"))
    result = at80(runner, "wait", "--for=status=active", "reservation/rsv-1", "--token", "t")
    assert result.exit_code == 1
    assert "reservation rsv-1 not found" in result.stderr
