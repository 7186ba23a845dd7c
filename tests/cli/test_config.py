from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from better_compute.cli.app import app
from better_compute.cli.config import (
    DEFAULT_SERVER,
    Settings,
    config_path,
    read_config,
    resolve,
    write_config,
)


def test_default_path_follows_xdg_then_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert config_path({"BC_CONFIG": "/etc/bc.json"}) == Path("/etc/bc.json")
    assert config_path({"XDG_CONFIG_HOME": "/x"}) == Path("/x/better-compute/config.json")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert config_path({}) == tmp_path / ".config" / "better-compute" / "config.json"


def test_defaults_without_anything(isolated_config: Path) -> None:
    assert resolve(None, None, {"BC_CONFIG": str(isolated_config)}) == Settings(DEFAULT_SERVER, None)


def test_option_beats_environment_beats_file(isolated_config: Path) -> None:
    write_config(isolated_config, "http://file:8000", "file-token")
    env = {"BC_CONFIG": str(isolated_config)}
    assert resolve(None, None, env) == Settings("http://file:8000", "file-token")

    env |= {"BC_SERVER": "http://env:8000", "BC_TOKEN": "env-token"}
    assert resolve(None, None, env) == Settings("http://env:8000", "env-token")
    assert resolve("http://opt:8000", "opt-token", env) == Settings("http://opt:8000", "opt-token")
    assert resolve(None, "opt-token", env) == Settings("http://env:8000", "opt-token")


def test_file_token_is_sent_only_to_the_file_server(isolated_config: Path) -> None:
    write_config(isolated_config, "http://file:8000/", "file-token")
    env = {"BC_CONFIG": str(isolated_config)}
    assert resolve("http://other:8000", None, env) == Settings("http://other:8000", None)
    assert resolve("http://file:8000", None, env) == Settings("http://file:8000", "file-token")
    env |= {"BC_SERVER": "http://other:8000"}
    assert resolve(None, None, env).token is None


def test_written_file_is_private(isolated_config: Path) -> None:
    isolated_config.parent.mkdir(parents=True)
    isolated_config.write_text("{}")
    isolated_config.chmod(0o644)
    write_config(isolated_config, "http://s", "t")
    assert stat.S_IMODE(isolated_config.stat().st_mode) == 0o600
    assert json.loads(isolated_config.read_text()) == {"server": "http://s", "token": "t"}


def test_malformed_file_is_reported(isolated_config: Path) -> None:
    isolated_config.parent.mkdir(parents=True)
    isolated_config.write_text("[]")
    with pytest.raises(ValueError, match="JSON object"):
        read_config(isolated_config)
    isolated_config.write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_config(isolated_config)


def test_a_bc_server_without_scheme_or_with_v1_gets_a_hint(
    runner: CliRunner, isolated_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BC_SERVER", "compute.example.org")
    no_scheme = runner.invoke(app, ["reservations", "list", "--token", "t"])
    monkeypatch.setenv("BC_SERVER", "http://compute.example.org:8000/v1")
    with_v1 = runner.invoke(app, ["reservations", "list", "--token", "t"])

    assert no_scheme.exit_code == with_v1.exit_code == 2  # refused before anything is sent: usage
    assert no_scheme.stderr == (
        "error: BC_SERVER is 'compute.example.org': a server URL starts with http:// or https:// "
        "(such as https://compute.example.org)\n"
    )
    assert with_v1.stderr == (
        "error: BC_SERVER is 'http://compute.example.org:8000/v1': name the server's root, without /v1 "
        "(http://compute.example.org:8000); the client adds /v1 to every path\n"
    )
