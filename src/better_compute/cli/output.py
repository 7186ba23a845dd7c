"""How CLI commands print results and refusals."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console

from better_compute.wire import codes

if TYPE_CHECKING:
    from better_compute.client import ComputeError


class CliConsole(Console):
    """rich's Console, leaving a closed output pipe to the CLI's one handler (`errors.CliGroup`):
    rich's own ends the process with status 1, where `| head -1` is no error."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def stdout() -> Console:
    return CliConsole(highlight=False, soft_wrap=True)


def stderr() -> Console:
    return CliConsole(stderr=True, highlight=False, soft_wrap=True)


def print_json(value: Any) -> None:
    """JSON on stdout, exactly as given (no colour, no wrapping), for scripts."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


LogTailOption = Annotated[
    int | None,
    typer.Option(
        "--tail", min=1, max=10_000, help="How many of the newest lines (default 100).", show_default=False
    ),
]
"""`--tail` of the log commands (`workloads logs`, `endpoints logs`): the server's bounds."""


def print_log(allocation_id: str, node: str, lines: str, as_json: bool) -> None:
    """A container log read through its node: the text as it is on stdout (nothing added, so that
    it pipes into grep), or with `--json` the whole answer."""
    if as_json:
        print_json({"allocationId": allocation_id, "node": node, "lines": lines})
        return
    sys.stdout.write(lines if not lines or lines.endswith("\n") else lines + "\n")


def error_object(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


EXIT_REFUSED = 1
"""The server (or the command, on what the server answered) refused: the request was heard."""
EXIT_USAGE = 2
"""The command line was refused before any request: bad arguments, as click's own usage errors."""
EXIT_UNREACHABLE = 3
"""No answer: the server could not be reached, so a retry later may succeed (docs/cli.md)."""


def exit_status(error: ComputeError) -> int:
    """The exit status for `error` by its class, so a script can tell "fix the command" (2) from "the
    server said no" (1) from "try again later" (3). The client's own INVALID_INPUT (no HTTP status:
    its wire models refused the arguments before sending) is a usage error."""
    if error.code == codes.TRANSPORT:
        return EXIT_UNREACHABLE
    if error.code == codes.INVALID_INPUT and error.status_code is None:
        return EXIT_USAGE
    return EXIT_REFUSED


def fail_json(error: dict[str, Any], status: int = EXIT_REFUSED) -> NoReturn:
    """Print an error object on stderr and exit with `status`."""
    sys.stderr.write(json.dumps(error, indent=2, ensure_ascii=False) + "\n")
    raise typer.Exit(status)


def fail(error: ComputeError | str, *, as_json: bool = False, status: int | None = None) -> NoReturn:
    """Report a refusal on stderr (as the API's error object with --json) and exit with `status`,
    by default the error's class (`exit_status`; 1 for a plain message)."""
    from better_compute.client import ComputeError  # with the client: not for catalog commands

    if status is None:
        status = exit_status(error) if isinstance(error, ComputeError) else EXIT_REFUSED
    if as_json:
        if isinstance(error, ComputeError):
            fail_json(error.to_dict(), status)
        fail_json(error_object(codes.INVALID_INPUT, error), status)
    if isinstance(error, ComputeError):
        text = f"error: {error.code}: {error.message}" + plain_details(error.details)
    else:
        text = f"error: {error}"
    stderr().print(text, markup=False)
    raise typer.Exit(status)


def plain_details(details: dict[str, Any]) -> str:
    """An error's details for a reader, after its one-line message: the JSON of what the API said,
    less the validator's internals. `errors` (the list pydantic produced: `type`, `loc`, `input`...)
    becomes one `field: message` line per fault; `--json` keeps the full object for scripts."""
    errors = details.get("errors")
    shown = {key: value for key, value in details.items() if key != "errors"}
    lines = ""
    if isinstance(errors, list) and len(errors) > 1:
        lines = "".join(f"\n  {described}" for described in map(described_fault, errors))
    if list(shown) == ["field"]:
        shown = {}  # the message already names the field
    return lines + ("\n" + json.dumps(shown, indent=2, ensure_ascii=False) if shown else "")


def described_fault(fault: Any) -> str:
    """One validation fault as `field: message` (`devices[0].count: Input should be ...`)."""
    if not isinstance(fault, dict):
        return str(fault)
    field = ""
    for part in fault.get("loc") or ():
        field += f"[{part}]" if isinstance(part, int) else (f".{part}" if field else str(part))
    message = str(fault.get("msg", ""))
    return f"{field}: {message}" if field else message


NO_TOKEN_HINT = "set BC_TOKEN, pass --token or run `better-compute login`"
"""What a user without a token does next: the three ways the CLI finds one (cli/config.py)."""


def in_cli_terms(
    error: ComputeError,
    *,
    token: str | None,
    options: dict[str, str] | None = None,
) -> ComputeError:
    """`error` told in the command line's words rather than the API's.

    The server speaks of headers and body fields; a CLI user has options and variables. A refusal
    for a missing token says how to give one; one naming a body field the command fills from an
    option (`options`: field -> option, e.g. `{"tenantId": "--tenant"}`) names the option; no
    answer says how to choose another server (the client's message names the one tried). (A server
    URL that cannot be a server's root never gets this far: `login_config.check_server` refuses it
    before anything is sent.) The code and details stay the API's, so `--json` output remains the
    API's error object.
    """
    message = error.message
    field = error.details.get("field")
    if error.code == codes.UNAUTHENTICATED and token is None:
        message = f"no token given: {NO_TOKEN_HINT}"
    elif error.code == codes.INVALID_INPUT and options and isinstance(field, str) and field in options:
        message = message.replace(field, options[field])
    elif error.code == codes.TRANSPORT:
        message = f"{message}; is it running? set BC_SERVER or pass --server for another server"
    if message == error.message:
        return error
    return type(error)(message, code=error.code, details=error.details, status_code=error.status_code)
