"""`better-compute login`: check a token against a server and remember both."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.cli.output import EXIT_USAGE, fail, in_cli_terms, stdout


@app.command("login")
def login(
    server: Annotated[
        str | None,
        typer.Option(
            "--server", help="Server URL (default: $BC_SERVER or http://127.0.0.1:8000).", show_default=False
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token", help="Bearer token (default: $BC_TOKEN, else asked for).", show_default=False
        ),
    ] = None,
) -> None:
    """Check the token with one read call, then write the server and token to the config file (0600)."""
    from better_compute.client import ComputeError, ForbiddenError  # see config.connect

    if server is None and os.environ.get("BC_SERVER"):
        server, source = os.environ["BC_SERVER"], "BC_SERVER"
    else:
        server, source = server or config.DEFAULT_SERVER, "--server"
    try:
        config.check_server(server, source)
    except ValueError as exc:
        fail(str(exc), status=EXIT_USAGE)
    token = token or os.environ.get("BC_TOKEN") or typer.prompt("Token", hide_input=True)
    settings = config.Settings(server=server, token=token)
    try:
        with config.connect(settings) as compute:
            compute.clusters.list(limit=1)
    except ForbiddenError:
        pass  # the token is genuine; it may just not read the inventory
    except ComputeError as exc:
        fail(in_cli_terms(exc, token=token))
    path = config.config_path()
    config.write_config(path, server, token)
    stdout().print(f"Logged in to {server}; saved to {path}", markup=False)
