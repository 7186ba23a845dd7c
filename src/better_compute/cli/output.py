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
