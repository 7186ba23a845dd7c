"""`better-compute api <resource>.<method>`: call any API method with a raw JSON body."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.cli.output import (
    EXIT_USAGE,
    error_object,
    exit_status,
    fail_json,
    in_cli_terms,
    print_json,
)
from better_compute.wire import codes


def _read_body(raw: str | None) -> dict[str, Any]:
    """`{...}` as is, `@path` from a file, `@-` from stdin; nothing means `{}`."""
    if raw is None:
        return {}
    if raw.startswith("@"):
        source = raw[1:]
        try:
            raw = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            fail_json(
                error_object(codes.INVALID_INPUT, f"cannot read {source}: {exc.strerror or exc}"), EXIT_USAGE
            )
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as exc:
        # Say where, as an editor would: a long body pasted on one line is otherwise a hunt.
        fail_json(
            error_object(
                codes.INVALID_INPUT,
                f"--json is not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                {"line": exc.lineno, "column": exc.colno},
            ),
            EXIT_USAGE,
        )
    if not isinstance(body, dict):
        fail_json(error_object(codes.INVALID_INPUT, "--json must be a JSON object"), EXIT_USAGE)
    return body


@app.command("api")
def api(
    method: Annotated[str, typer.Argument(help="The method, <resource>.<method>, e.g. reservations.create.")],
    json_body: Annotated[
        str | None,
        typer.Option(
            "--json", help="The request body: a JSON object, @file.json, or @- for stdin.", show_default=False
        ),
    ] = None,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Call an API method; print its JSON answer, or its error object on stderr (exit status 1 for
    a refusal, 2 for a command line refused before sending, 3 for no answer).

    Methods are listed in docs/api.md; the body uses the API's camelCase names, e.g.

        better-compute api reservations.create --json '{"poolId": "mig-a", "duration": "4h",
          "devices": [{"class": "gpu.mig", "count": 1}]}'
    """
    from better_compute.client import ComputeError  # imported by the commands that use it: see config
    from better_compute.wire.methods import METHODS, close_methods, unknown_method

    if method not in METHODS:
        fail_json(
            error_object(
                codes.INVALID_INPUT,
                unknown_method(method),
                {"methods": sorted(METHODS), "didYouMean": close_methods(method)},
            ),
            EXIT_USAGE,
        )
    body = _read_body(json_body)
    try:
        settings = config.resolve(server, token)
    except ValueError as exc:
        fail_json(error_object(codes.INVALID_INPUT, str(exc)), EXIT_USAGE)
    try:
        with config.connect(settings) as compute:
            result = compute.call(method, body)
    except ComputeError as exc:
        fail_json(in_cli_terms(exc, token=settings.token).to_dict(), exit_status(exc))
    except ValueError as exc:
        fail_json(error_object(codes.INVALID_INPUT, str(exc)), EXIT_USAGE)
    print_json(result)
