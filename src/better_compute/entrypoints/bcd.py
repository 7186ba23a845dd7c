"""The `bcd` node daemon console script."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

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


@bcd_app.command()
def join(
    server: Annotated[str, typer.Option("--server", help="The control plane's URL.")],
    token: Annotated[str, typer.Option("--token", help="A join token from `nodes.joinToken`.")],
    node: Annotated[str, typer.Option("--node", help="This node's id, as the fleet names it.")],
    state_dir: Annotated[
        Path, typer.Option("--state-dir", help="Where the node's key and identity are kept.")
    ] = Path("/var/lib/bcd"),
) -> None:
    """Join the fleet: make this node's Ed25519 key, register its public half with a one-time join
    token, and keep the identity under the state directory (the private key in mode 0600)."""
    from better_compute.bcd.joining import join as join_node
    from better_compute.client import ComputeError

    try:
        identity = join_node(server, token, node, state_dir)
    except ComputeError as error:
        typer.echo(f"bcd join: {error}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"joined {identity.node} to {identity.server}; identity in {state_dir}")


def main() -> None:
    bcd_app()
