"""The systemd units under deploy/ parse as INI and start commands that exist: each `ExecStart` names
a console script of pyproject.toml, a subcommand it has, and only options that subcommand takes, so
renaming a flag breaks this test rather than a node's boot."""

from __future__ import annotations

import configparser
import shlex
import tomllib
from pathlib import Path

import pytest
import typer

from better_compute.cli.app import app
from better_compute.entrypoints import server_commands  # noqa: F401  (registers serve)
from better_compute.entrypoints.bcd import bcd_app

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
APPS = {"better-compute": app, "bcd": bcd_app}


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    parser.read_string((DEPLOY / name).read_text(encoding="utf-8"), source=name)
    return parser


def options_of(script: str, subcommand: str) -> set[str]:
    group = typer.main.get_command(APPS[script])
    assert isinstance(group, typer.core.TyperGroup)
    command = group.commands.get(subcommand)
    assert command is not None, f"{script} has no command {subcommand}"
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts)}


def test_the_scripts_are_the_packages_console_scripts() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert set(APPS) <= set(pyproject["project"]["scripts"])


@pytest.mark.parametrize(
    ("name", "script", "subcommand"),
    [("bcd.service", "bcd", "run"), ("better-compute.service", "better-compute", "serve")],
)
def test_each_unit_starts_a_command_that_exists(name: str, script: str, subcommand: str) -> None:
    parsed = unit(name)
    assert {"Unit", "Service", "Install"} <= set(parsed.sections())
    service = parsed["Service"]
    assert service["Restart"] == "always"
    assert service["KillSignal"] == "SIGTERM"
    argv = shlex.split(service["ExecStart"])
    assert argv[0] == f"/usr/local/bin/{script}"
    assert argv[1] == subcommand
    known = options_of(script, subcommand)
    flags = [a for a in argv[2:] if a.startswith("-")]
    assert flags, service["ExecStart"]
    for flag in flags:
        assert flag.split("=", 1)[0] in known, f"{name}: {script} {subcommand} has no {flag}"


def test_bcd_keeps_its_state_and_specs_where_it_says() -> None:
    service = unit("bcd.service")["Service"]
    argv = shlex.split(service["ExecStart"])
    assert argv[argv.index("--state-dir") + 1] == "/var/lib/bcd"
    assert argv[argv.index("--cdi-root") + 1] == "/var/run/cdi"
    assert service["StateDirectory"] == "bcd"


def test_the_server_reads_its_database_from_the_environment_file() -> None:
    service = unit("better-compute.service")["Service"]
    assert service["EnvironmentFile"] == "/etc/better-compute/env"
    assert service["User"] == "better-compute"
    argv = shlex.split(service["ExecStart"])
    assert argv[argv.index("--database-url") + 1] == "${BC_DATABASE_URL}"
