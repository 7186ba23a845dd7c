"""The `bcd` node daemon console script."""

from __future__ import annotations

import typer

from better_compute.cli.version import VersionOption

bcd_app = typer.Typer(
    name="bcd", help="better-compute node daemon.", no_args_is_help=True, add_completion=False
)


@bcd_app.callback()
def _root(version: VersionOption = False) -> None:
    """better-compute node daemon.

    A callback makes `bcd` a group even while it has one command, so `bcd version` is that command
    (Typer runs a lone command as the app itself, which took `version` for an extra argument).
    """


@bcd_app.command()
def version() -> None:
    """Print the daemon's version."""
    from better_compute import __version__

    typer.echo(__version__)


def main() -> None:
    bcd_app()
