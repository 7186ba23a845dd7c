"""Defect 1 of issue 11: `--help` works on every command and sub-command of both console scripts.

The tree is walked from the click command Typer builds, so a command added later is covered without
editing this file. The CLI imports a top-level command's module only when it runs (`cli/lazy.py`), so the
walk imports every one first (`load_all`).
"""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from better_compute.cli.app import load_all
from better_compute.entrypoints.bcd import bcd_app
from better_compute.entrypoints.cli import app


def _paths(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path under `command`, itself first (a group is anything with `commands`: Typer
    builds on a click of its own, so the check is by shape, not by class)."""
    found = [path]
    subcommands: dict[str, Any] = getattr(command, "commands", None) or {}
    if subcommands:
        for name, sub in sorted(subcommands.items()):
            found.extend(_paths(sub, (*path, name)))
    return found


def _cases() -> list[tuple[typer.Typer, tuple[str, ...]]]:
    load_all()
    return [
        (typer_app, path)
        for typer_app in (app, bcd_app)
        for path in _paths(typer.main.get_command(typer_app))
    ]


@pytest.mark.parametrize(
    ("typer_app", "path"),
    _cases(),
    ids=lambda value: " ".join(value) or "(top)" if isinstance(value, tuple) else value.info.name,
)
def test_help_works_on_every_command(typer_app: typer.Typer, path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(typer_app, [*path, "--help"], terminal_width=80)

    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_advise_help_shows_the_price_format() -> None:
    result = CliRunner().invoke(app, ["advise", "--help"], env={"COLUMNS": "250"})

    assert result.exit_code == 0, result.output
    assert "MODEL=USD/GPUS" in result.output


def test_serve_help_shows_each_limits_default() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "250"})

    assert result.exit_code == 0, result.output
    for variable in ("BC_MAX_BODY_BYTES", "BC_TIMEOUT_KEEP_ALIVE", "BC_TIMEOUT_REQUEST"):
        assert variable in result.output
