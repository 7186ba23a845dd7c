"""`better-compute wait --for=CONDITION KIND/NAME`: block until an object reaches a state, as
`kubectl wait` does, so a script can go on when a workload runs or an endpoint is InService.

A condition is `delete` (the object is gone) or `FIELD=VALUE`, read from the object's API answer:
FIELD is a key of the answer (camelCase or snake_case, any case; dotted for a nested one), VALUE is
compared without regard to case. Where the path meets a list, every element must match and there must
be at least one (`deployments.phase=running`: every cluster's deployment runs). A workload's `phase`
is its deployments' phase. The object is polled (`watch.clock`, `watch.sleep`); exit statuses: 0 when
the condition holds, 4 when `--timeout` passes first, 1 when the object is not there to wait on (or the
server refuses), 2 for a bad command line, 3 when the server cannot be reached.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from better_compute.cli import config, watch
from better_compute.cli.app import app
from better_compute.cli.calls import call
from better_compute.cli.output import fail_json

if TYPE_CHECKING:
    from pydantic import BaseModel

    from better_compute.client import Compute

KINDS: dict[str, str] = {
    "reservation": "reservation",
    "reservations": "reservation",
    "rsv": "reservation",
    "workload": "workload",
    "workloads": "workload",
    "wl": "workload",
    "endpoint": "endpoint",
    "endpoints": "endpoint",
    "ep": "endpoint",
    "component": "component",
    "components": "component",
    "node": "node",
    "nodes": "node",
}
"""The kinds `wait` knows, by the names a user types (singular, plural, short)."""

ALIASES: dict[tuple[str, str], str] = {("workload", "phase"): "deployments.phase"}
"""Fields a kind has in words but not at the top of its answer."""

MAX_TIMEOUT_S = 7 * 24 * 3600.0
"""The longest `--timeout`: one week."""


@dataclass(frozen=True)
class Condition:
    """`delete`, or `path` (keys, lowercased without `_`) equal to `value` (lowercased)."""

    delete: bool
    path: tuple[str, ...] = ()
    value: str = ""
    text: str = ""


def parse_condition(text: str, kind: str) -> Condition:
    """`--for` read for `kind`; a malformed one is a usage error naming what is accepted."""
    raw = text.strip()
    if raw.lower() == "delete":
        return Condition(delete=True, text="delete")
    field, sep, value = raw.partition("=")
    if not sep or not field.strip() or not value.strip():
        raise typer.BadParameter(
            f"{text!r} is not a condition: give delete or FIELD=VALUE (phase=running, state=InService,"
            " status=active)",
            param_hint="--for",
        )
    field = ALIASES.get((kind, field.strip().lower()), field.strip())
    path = tuple(_key(part) for part in field.split("."))
    if any(not part for part in path):
        raise typer.BadParameter(f"{field!r} has an empty key", param_hint="--for")
    return Condition(delete=False, path=path, value=value.strip().lower(), text=raw)


def _key(name: str) -> str:
    return name.replace("_", "").lower()


def _state_alias(kind: str, path: tuple[str, ...]) -> tuple[str, ...]:
    # An endpoint's state is its `status` (InService ...): `--for=state=InService` reads it.
    if kind == "endpoint" and path == ("state",):
        return ("status",)
    return path


def holds(answer: Any, path: tuple[str, ...], value: str) -> bool | None:
    """Whether `answer` at `path` equals `value`; None when the answer has no such field (a typo, not
    a condition still to come)."""
    if not path:
        if isinstance(answer, list):
            return bool(answer) and all(holds(item, path, value) for item in answer)
        text = "" if answer is None else str(answer).lower()
        if isinstance(answer, bool):
            text = "true" if answer else "false"
        return text == value
    if isinstance(answer, list):
        found = [holds(item, path, value) for item in answer]
        if any(f is None for f in found):
            return None
        return bool(found) and all(found)
    if not isinstance(answer, dict):
        return None
    keys = {_key(k): k for k in answer}
    if path[0] not in keys:
        return None
    return holds(answer[keys[path[0]]], path[1:], value)


def fetcher(compute: Compute, kind: str, name: str) -> Callable[[], BaseModel]:
    """The `get` of `kind` for `name`."""
    getters: dict[str, Callable[[str], BaseModel]] = {
        "reservation": compute.reservations.get,
        "workload": compute.workloads.get,
        "endpoint": compute.endpoints.get,
        "component": compute.components.get,
        "node": compute.nodes.get,
    }
    get = getters[kind]
    return lambda: get(name)


def _timeout_seconds(text: str) -> float:
    from better_compute.domain.kernel.errors import InvalidInput
    from better_compute.domain.kernel.timewin import parse_duration

    try:
        seconds = parse_duration(text, "--timeout").total_seconds()
    except InvalidInput as exc:
        raise typer.BadParameter(exc.message, param_hint="--timeout") from None
    if seconds > MAX_TIMEOUT_S:
        raise typer.BadParameter("at most 1w", param_hint="--timeout")
    return seconds


def _target(text: str) -> tuple[str, str]:
    kind, sep, name = text.partition("/")
    known = KINDS.get(kind.strip().lower())
    if not sep or known is None or not name.strip():
        raise typer.BadParameter(
            f"{text!r} is not KIND/NAME; KIND is one of reservation, workload, endpoint, component, node",
            param_hint="KIND/NAME",
        )
    return known, name.strip()


def _wait(
    compute: Compute, kind: str, name: str, condition: Condition, timeout: float, interval: float
) -> str:
    """Poll until the condition holds (returns what held) or the deadline passes (returns '')."""
    from better_compute.client import NotFoundError

    get = fetcher(compute, kind, name)
    path = _state_alias(kind, condition.path)
    deadline = watch.clock() + timeout
    first = True
    while True:
        try:
            answer = watch.plain(get())
        except NotFoundError:
            if condition.delete:
                return f"{kind}/{name} deleted"
            raise
        if not condition.delete:
            met = holds(answer, path, condition.value)
            if met is None and first:
                raise typer.BadParameter(
                    f"a {kind} has no field {'.'.join(condition.path)!r}"
                    f" (its fields: {', '.join(sorted(answer))})",
                    param_hint="--for",
                )
            if met:
                return f"{kind}/{name} condition met: {condition.text}"
        first = False
        left = deadline - watch.clock()
        if left <= 0:
            return ""
        watch.sleep(min(interval, left))


@app.command("wait")
def wait(
    target: Annotated[
        str,
        typer.Argument(
            metavar="KIND/NAME",
            help="What to wait on: reservation/ID, workload/ID, endpoint/NAME, component/NAME, node/NAME.",
            show_default=False,
        ),
    ],
    for_: Annotated[
        str,
        typer.Option(
            "--for",
            help="delete, or FIELD=VALUE read from the object's answer: phase=running (a workload),"
            " state=InService (an endpoint), status=active (a reservation).",
            show_default=False,
        ),
    ],
    timeout: Annotated[
        str, typer.Option("--timeout", help="Give up after this long (90s, 5m, 1h; at most 1w).")
    ] = "30s",
    interval: Annotated[
        float, typer.Option("--interval", min=0.1, max=3600, help="Seconds between polls.")
    ] = 2.0,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="JSON: {met, kind, name} when met; a refusal or timeout as an error object."
        ),
    ] = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Wait until an object meets a condition, as `kubectl wait`: exit 0 when it does, 4 when
    --timeout passes first (1 when the object is not there; a refusal 1, unreachable 3)."""
    kind, name = _target(target)
    condition = parse_condition(for_, kind)
    seconds = _timeout_seconds(timeout)
    try:
        said = call(server, token, as_json, lambda c: _wait(c, kind, name, condition, seconds, interval))
    except KeyboardInterrupt:
        raise typer.Exit(watch.INTERRUPTED) from None
    if not said:
        message = f"timed out after {timeout} waiting for {kind}/{name}: {condition.text}"
        if as_json:
            fail_json(
                {"error": {"code": "TIMEOUT", "message": message, "details": {"timeout": timeout}}},
                watch.EXIT_TIMEOUT,
            )
        from better_compute.cli.output import stderr

        stderr().print(f"error: {message}", markup=False)
        raise typer.Exit(watch.EXIT_TIMEOUT)
    if as_json:
        from better_compute.cli.output import print_json

        print_json({"met": condition.text, "kind": kind, "name": name})
    else:
        typer.echo(said)
