from __future__ import annotations

import json

from typer.testing import CliRunner

from better_compute.cli.app import app
from tests.client.fakes import FakeServer, error_json, reservation_json


def test_reserve_asks_for_whole_gpus_only(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("POST", "/v1/reservations")] = (201, reservation_json())

    result = runner.invoke(
        app,
        ["reserve", "--pool", "h100-a", "--gpus", "2", "--duration", "4h", "--idempotency-key", "k-1"],
    )

    assert result.exit_code == 0, result.output
    assert server.bodies() == [
        {
            "poolId": "h100-a",
            "devices": [{"class": "gpu", "count": 2}],
            "duration": "4h",
            "idempotencyKey": "k-1",
        }
    ]
    assert "rsv-1" in result.stdout
    assert "atom-2" in result.stdout


def test_reserve_with_tenant_start_and_json(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("POST", "/v1/reservations")] = (201, reservation_json())

    result = runner.invoke(
        app,
        [
            "reserve",
            "--pool=h100-a",
            "--gpus=1",
            "--duration=30m",
            "--tenant=acme",
            "--start=2030-01-01T10:00:00Z",
            "--json",
        ],
    )

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["id"] == "rsv-1"
    (body,) = server.bodies()
    assert body["tenantId"] == "acme"
    assert body["start"] == "2030-01-01T10:00:00Z"
    assert body["devices"] == [{"class": "gpu", "count": 1}]
    assert body["idempotencyKey"]  # generated


def test_reserve_refusal_exits_1_with_the_reason(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("POST", "/v1/reservations")] = (
        409,
        error_json("QUOTA_EXCEEDED", "tenant acme may hold 2 gpu in pool h100-a", limit=2),
    )
    result = runner.invoke(app, ["reserve", "--pool", "h100-a", "--gpus", "4", "--duration", "4h"])
    assert result.exit_code == 1
    assert "QUOTA_EXCEEDED: tenant acme may hold 2 gpu in pool h100-a" in result.stderr

    as_json = runner.invoke(app, ["reserve", "--pool", "h100-a", "--gpus", "4", "--duration", "4h", "--json"])
    assert as_json.exit_code == 1
    assert json.loads(as_json.stderr)["error"]["code"] == "QUOTA_EXCEEDED"


def test_reserve_refuses_bad_arguments_before_calling(runner: CliRunner, server: FakeServer) -> None:
    for args in (["--gpus", "0"], ["--gpus", "1", "--start", "tomorrow"]):
        result = runner.invoke(app, ["reserve", "--pool", "p", "--duration", "1h", *args])
        assert result.exit_code == 2, args
    assert server.requests == []


def test_list_shows_a_table_and_passes_filters(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("GET", "/v1/reservations")] = {
        "items": [reservation_json(), reservation_json(id="rsv-2", status="active")],
        "nextCursor": "c2",
    }
    result = runner.invoke(app, ["reservations", "list", "--pool", "h100-a", "--status", "active"])
    assert result.exit_code == 0, result.output
    assert "rsv-1" in result.stdout
    assert "rsv-2" in result.stdout
    assert "--cursor c2" in result.stdout
    assert dict(server.requests[0].url.params) == {"poolId": "h100-a", "status": "active"}


def test_list_json_and_status_check(runner: CliRunner, server: FakeServer) -> None:
    page = {"items": [reservation_json()], "nextCursor": None}
    server.routes[("GET", "/v1/reservations")] = page
    result = runner.invoke(app, ["reservations", "list", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["items"][0]["id"] == "rsv-1"

    bad = runner.invoke(app, ["reservations", "list", "--status", "booked"])
    assert bad.exit_code == 2


def test_show_cancel_release(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("GET", "/v1/reservations/rsv-1")] = reservation_json()
    server.routes[("POST", "/v1/reservations/rsv-1/cancel")] = reservation_json(status="cancelled")
    server.routes[("POST", "/v1/reservations/rsv-1/release")] = reservation_json(status="released")

    shown = runner.invoke(app, ["reservations", "show", "rsv-1"])
    assert shown.exit_code == 0, shown.output
    assert "GPU-1" in shown.stdout
    cancelled = runner.invoke(app, ["reservations", "cancel", "rsv-1", "--json"])
    assert json.loads(cancelled.stdout)["status"] == "cancelled"
    released = runner.invoke(app, ["reservations", "release", "rsv-1"])
    assert "released" in released.stdout
    assert [(r.method, r.url.path) for r in server.requests] == [
        ("GET", "/v1/reservations/rsv-1"),
        ("POST", "/v1/reservations/rsv-1/cancel"),
        ("POST", "/v1/reservations/rsv-1/release"),
    ]


def test_not_found_is_reported(runner: CliRunner, server: FakeServer) -> None:
    result = runner.invoke(app, ["reservations", "show", "rsv-9"])
    assert result.exit_code == 1
    assert "NOT_FOUND" in result.stderr


def test_reservations_extend_sends_the_duration_and_shows_the_new_end(
    runner: CliRunner, server: FakeServer
) -> None:
    server.routes[("POST", "/v1/reservations/rsv-1/extend")] = (200, reservation_json())
    result = runner.invoke(app, ["reservations", "extend", "rsv-1", "--by", "2h"])
    assert result.exit_code == 0, result.output
    assert server.bodies() == [{"id": "rsv-1", "duration": "2h"}]
    assert "rsv-1" in result.stdout


def test_reservations_extend_refused_names_the_atom(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("POST", "/v1/reservations/rsv-1/extend")] = (
        409,
        error_json("CONFLICT", "atom atm-1 is booked by another reservation from 13:00", atomId="atm-1"),
    )
    result = runner.invoke(app, ["reservations", "extend", "rsv-1", "--by", "2h"])
    assert result.exit_code == 1
    assert "CONFLICT: atom atm-1 is booked by another reservation" in result.stderr
