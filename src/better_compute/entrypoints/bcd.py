"""The `bcd` node daemon console script."""

from __future__ import annotations

import typer

bcd_app = typer.Typer(
    name="bcd", help="better-compute node daemon.", no_args_is_help=True, add_completion=False
)


@bcd_app.command()
def version() -> None:
    """Print the daemon's version."""
    from better_compute import __version__

    typer.echo(__version__)


def main() -> None:
    bcd_app()
