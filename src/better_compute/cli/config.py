"""Where the CLI finds its server and token.

The order (option, environment, the file `better-compute login` writes, the default server) and the
file itself are `better_compute.login_config`'s, shared with `Compute.from_env()`; this module adds
the command-line options and the seam through which commands get their client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from better_compute.login_config import (
    DEFAULT_SERVER,
    Settings,
    check_server,
    config_path,
    forget_token,
    read_config,
    resolve,
    write_config,
)

if TYPE_CHECKING:
    from better_compute.client import Compute

__all__ = [
    "DEFAULT_SERVER",
    "ServerOption",
    "Settings",
    "TokenOption",
    "check_server",
    "config_path",
    "connect",
    "forget_token",
    "read_config",
    "resolve",
    "write_config",
]

ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        help="Server URL (default: $BC_SERVER, the login config, or http://127.0.0.1:8000).",
        show_default=False,
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token", help="Bearer token (default: $BC_TOKEN or the login config).", show_default=False
    ),
]


def connect(settings: Settings) -> Compute:
    """The client for resolved settings (tests replace this to use a mock transport).

    The client (httpx, the wire models) is imported here, by the commands that talk to a server, so
    that the catalog commands start without it."""
    from better_compute.client import Compute

    return Compute(settings.server, settings.token)
