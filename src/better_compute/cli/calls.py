"""How a command calls the server: resolve where and as whom, run one client action, and turn a refusal
into the command line's words (`output.in_cli_terms`). Every server-talking command goes through here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from better_compute.cli import config
from better_compute.cli.output import EXIT_USAGE, fail, in_cli_terms

if TYPE_CHECKING:
    from better_compute.client import Compute

T = TypeVar("T")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print the API's JSON instead of a table.")]


def call(
    server: str | None,
    token: str | None,
    as_json: bool,
    action: Callable[[Compute], T],
    options: Mapping[str, str] | None = None,
) -> T:
    """Run `action` with a client for the resolved server and token. `options` maps the body fields
    a command fills from an option to that option, so a refusal naming one names the option."""
    from better_compute.client import ComputeError  # imported only by commands that call a server

    try:
        settings = config.resolve(server, token)
    except ValueError as exc:
        fail(str(exc), as_json=as_json, status=EXIT_USAGE)
    try:
        with config.connect(settings) as compute:
            return action(compute)
    except ComputeError as exc:
        told = in_cli_terms(exc, token=settings.token, options=dict(options or {}))
        fail(told, as_json=as_json)
