"""How CLI commands print results and refusals."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console

from better_compute.wire import codes

if TYPE_CHECKING:
    from better_compute.client import ComputeError


def stdout() -> Console:
    return Console(highlight=False, soft_wrap=True)


def stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(value: Any) -> None:
    """JSON on stdout, exactly as given (no colour, no wrapping), for scripts."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def error_object(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def fail_json(error: dict[str, Any]) -> NoReturn:
    """Print an error object on stderr and exit with status 1."""
    sys.stderr.write(json.dumps(error, indent=2, ensure_ascii=False) + "\n")
    raise typer.Exit(1)


def fail(error: ComputeError | str, *, as_json: bool = False) -> NoReturn:
    """Report a refusal on stderr (as the API's error object with --json) and exit with status 1."""
    from better_compute.client import ComputeError  # with the client: not for catalog commands

    if as_json:
        if isinstance(error, ComputeError):
            fail_json(error.to_dict())
        fail_json(error_object(codes.INVALID_INPUT, error))
    if isinstance(error, ComputeError):
        text = f"error: {error.code}: {error.message}"
        if error.details:
            text += "\n" + json.dumps(error.details, indent=2, ensure_ascii=False)
    else:
        text = f"error: {error}"
    stderr().print(text, markup=False)
    raise typer.Exit(1)


NO_TOKEN_HINT = "set BC_TOKEN, pass --token or run `better-compute login`"
"""What a user without a token does next: the three ways the CLI finds one (cli/config.py)."""


def in_cli_terms(
    error: ComputeError, *, token: str | None, options: dict[str, str] | None = None
) -> ComputeError:
    """`error` told in the command line's words rather than the API's.

    The server speaks of headers and body fields; a CLI user has options and variables. A refusal
    for a missing token says how to give one; one naming a body field the command fills from an
    option (`options`: field -> option, e.g. `{"tenantId": "--tenant"}`) names the option; no
    answer says how to choose another server (the client's message names the one tried). The code
    and details stay the API's, so `--json` output remains the API's error object.
    """
    message = error.message
    field = error.details.get("field")
    if error.code == codes.UNAUTHENTICATED and token is None:
        message = f"no token given: {NO_TOKEN_HINT}"
    elif error.code == codes.INVALID_INPUT and options and isinstance(field, str) and field in options:
        message = message.replace(field, options[field])
    elif error.code == codes.TRANSPORT:
        message = f"{message}; is it running? set BC_SERVER or pass --server for another server"
    else:
        return error
    return type(error)(message, code=error.code, details=error.details, status_code=error.status_code)
