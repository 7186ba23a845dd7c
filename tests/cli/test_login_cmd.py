from __future__ import annotations

import json
import stat
from pathlib import Path

from typer.testing import CliRunner

from better_compute.cli.app import app
from tests.client.fakes import FakeServer, error_json


def test_login_checks_the_token_then_writes_the_config(
    runner: CliRunner, server: FakeServer, isolated_config: Path
) -> None:
    server.routes[("GET", "/v1/clusters")] = {"items": [], "nextCursor": None}

    result = runner.invoke(app, ["login", "--server", "http://bc.test:8000", "--token", "sekret"])

    assert result.exit_code == 0, result.output
    assert server.requests[0].headers["authorization"] == "Bearer sekret"
    assert json.loads(isolated_config.read_text()) == {"server": "http://bc.test:8000", "token": "sekret"}
    assert stat.S_IMODE(isolated_config.stat().st_mode) == 0o600


def test_later_commands_use_the_saved_login(
    runner: CliRunner, server: FakeServer, isolated_config: Path
) -> None:
    server.routes[("GET", "/v1/clusters")] = {"items": [], "nextCursor": None}
    runner.invoke(app, ["login", "--server", "http://bc.test:8000", "--token", "sekret"])
    runner.invoke(app, ["api", "clusters.list"])
    assert str(server.requests[1].url) == "http://bc.test:8000/v1/clusters"
    assert server.requests[1].headers["authorization"] == "Bearer sekret"


def test_a_rejected_token_is_not_saved(runner: CliRunner, server: FakeServer, isolated_config: Path) -> None:
    server.routes[("GET", "/v1/clusters")] = (401, error_json("UNAUTHENTICATED", "unknown token"))
    result = runner.invoke(app, ["login", "--server", "http://bc.test:8000", "--token", "wrong"])
    assert result.exit_code == 1
    assert "UNAUTHENTICATED" in result.stderr
    assert not isolated_config.exists()


def test_a_token_that_may_not_read_the_inventory_is_still_genuine(
    runner: CliRunner, server: FakeServer, isolated_config: Path
) -> None:
    server.routes[("GET", "/v1/clusters")] = (403, error_json("FORBIDDEN", "fleet admins only"))
    result = runner.invoke(app, ["login", "--token", "tenant-token"])
    assert result.exit_code == 0, result.output
    assert json.loads(isolated_config.read_text())["server"] == "http://127.0.0.1:8000"


def test_token_is_prompted_when_not_given(
    runner: CliRunner, server: FakeServer, isolated_config: Path
) -> None:
    server.routes[("GET", "/v1/clusters")] = {"items": [], "nextCursor": None}
    result = runner.invoke(app, ["login"], input="typed-token\n")
    assert result.exit_code == 0, result.output
    assert "typed-token" not in result.stdout
    assert json.loads(isolated_config.read_text())["token"] == "typed-token"
