"""`--version` for both console scripts: one eager option, so that it answers before any command runs."""

from __future__ import annotations

from typing import Annotated

import typer

from better_compute import __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


VersionOption = Annotated[
    bool,
    typer.Option(
        "--version",
        help="Print the version and exit.",
        callback=_print_version,
        is_eager=True,
        show_default=False,
    ),
]
"""The `--version` option of an app's callback (eager: it runs before a command or a missing one is
looked at)."""
