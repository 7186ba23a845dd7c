"""Defect 9 of issue 11: `bcd version` (named in the README), `bcd --version` and
`better-compute --version` print the package's version."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from better_compute import __version__
from better_compute.entrypoints.bcd import bcd_app
from better_compute.entrypoints.cli import app


@pytest.mark.parametrize(
    ("typer_app", "args"),
    [(bcd_app, ["version"]), (bcd_app, ["--version"]), (app, ["--version"])],
    ids=["bcd version", "bcd --version", "better-compute --version"],
)
def test_version_is_printed(typer_app: typer.Typer, args: list[str]) -> None:
    result = CliRunner().invoke(typer_app, args)

    assert result.exit_code == 0, result.output
    assert result.stdout == f"{__version__}\n"
