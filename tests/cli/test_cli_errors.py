"""Defect 7 of issue 11: CLI errors speak CLI.

A missing token says how to give one, a field the command fills from an option names the option, and
no answer names the server tried.
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from better_compute.cli.app import app
from tests.client.fakes import FakeServer, error_json

NO_TOKEN = "set BC_TOKEN, pass --token or run `better-compute login`"


def test_no_token_says_how_to_give_one(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("GET", "/v1/reservations")] = (401, error_json("UNAUTHENTICATED", "missing bearer token"))

    result = runner.invoke(app, ["reservations", "list"])

    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == f"error: UNAUTHENTICATED: no token given: {NO_TOKEN}"


def test_no_token_says_how_to_give_one_in_the_api_command(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("GET", "/v1/clusters")] = (401, error_json("UNAUTHENTICATED", "missing bearer token"))

    result = runner.invoke(app, ["api", "clusters.list"])

    assert result.exit_code == 1
    error = json.loads(result.stderr)["error"]
    assert error["code"] == "UNAUTHENTICATED"
    assert NO_TOKEN in error["message"]


def test_a_wrong_token_keeps_the_servers_reason(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("GET", "/v1/reservations")] = (401, error_json("UNAUTHENTICATED", "unknown token"))

    result = runner.invoke(app, ["reservations", "list", "--token", "bc_wrong"])

    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == "error: UNAUTHENTICATED: unknown token"


def test_admin_reserve_without_tenant_names_the_tenant_option(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("POST", "/v1/reservations")] = (
        400,
        error_json("INVALID_INPUT", "tenantId is required with an admin credential", field="tenantId"),
    )

    result = runner.invoke(
        app, ["reserve", "--pool", "h100-a", "--gpus", "1", "--duration", "1h", "--token", "bc_admin"]
    )

    assert result.exit_code == 1
    first = result.stderr.splitlines()[0]
    assert first == "error: INVALID_INPUT: --tenant is required with an admin credential"
    assert "tenantId" not in first


def test_transport_error_names_the_server_tried(runner: CliRunner, server: FakeServer) -> None:
    server.fail_first = 10

    result = runner.invoke(app, ["reservations", "list", "--server", "http://bc.test:9", "--token", "t"])

    assert result.exit_code == 3
    first = result.stderr.splitlines()[0]
    assert first.startswith("error: TRANSPORT: reservations.list: no answer from http://bc.test:9 (")
    assert "set BC_SERVER or pass --server" in first


def test_transport_error_names_the_server_in_the_api_command(runner: CliRunner, server: FakeServer) -> None:
    server.fail_first = 10

    result = runner.invoke(app, ["api", "clusters.list", "--server", "http://bc.test:9"])

    assert result.exit_code == 3
    error = json.loads(result.stderr)["error"]
    assert error["code"] == "TRANSPORT"
    assert "http://bc.test:9" in error["message"]
    assert error["details"]["server"] == "http://bc.test:9"
