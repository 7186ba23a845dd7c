"""`better-compute events`: the events stream, one line per event, and with `--follow` the new ones
as they come.

It spells `events.list` through the typed client: page after page from `--after` (the start without
it), then, with `--follow`, the same call again every `--interval` seconds after the last id
received. The server serves events in an order no later commit can get in front of, so following
the last id skips nothing and repeats nothing. `--json` prints each event as the API answers it, one
JSON object per line, for scripts. Ctrl-C ends a follow with status 130, as a shell expects of an
interrupted command.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.cli.calls import call

if TYPE_CHECKING:
    from better_compute.client import Compute
    from better_compute.wire.events import EventPublic

PAGE = 500
"""Events asked for per call."""

INTERRUPTED = 130
"""The exit status of a command ended by Ctrl-C (128 + SIGINT), as shells report it."""

sleep: Callable[[float], None] = time.sleep
"""How `--follow` waits between polls (a test replaces it)."""

_OPTIONS = {"type": "--type", "subject": "--subject", "after": "--after"}
"""The request fields this command fills from an option: a refusal naming one names the option."""


def _value(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(_value(v) for v in value) or "[]"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return "-" if value is None else str(value)


def line(event: EventPublic) -> str:
    """One event for people: id, time, type, subject, then its payload as key=value pairs."""
    payload = " ".join(f"{key}={_value(value)}" for key, value in event.payload.items())
    when = event.time.isoformat().replace("+00:00", "Z")
    return f"{event.id}  {when}  {event.type}  {event.subject}" + (f"  {payload}" if payload else "")


def _emit(text: str) -> None:
    # Flushed line by line: a follower piped into another command shows each event as it comes.
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _print(event: EventPublic, as_json: bool) -> None:
    if as_json:
        _emit(json.dumps(event.model_dump(mode="json", by_alias=True), ensure_ascii=False))
    else:
        _emit(line(event))


def _stream(
    compute: Compute,
    *,
    type_: str | None,
    subject: str | None,
    after: str | None,
    limit: int | None,
    follow: bool,
    interval: float,
    as_json: bool,
) -> int:
    """Print events until the stream's end (or, following, until `limit`); returns how many."""
    printed = 0
    cursor = after
    while True:
        size = PAGE if limit is None else min(PAGE, limit - printed)
        page = compute.events.list(type=type_, subject=subject, after=cursor, limit=size)
        for event in page.items:
            _print(event, as_json)
            printed += 1
            cursor = str(event.id)
            if limit is not None and printed >= limit:
                return printed
        if page.next_cursor:
            continue
        if not follow:
            return printed
        sleep(interval)


@app.command("events")
def events(
    type_: Annotated[
        str | None,
        typer.Option("--type", help="Only events of this type, e.g. ledger.booked.", show_default=False),
    ] = None,
    subject: Annotated[
        str | None,
        typer.Option(
            "--subject",
            help="Only events about this: a reservation, pool, tenant or node id.",
            show_default=False,
        ),
    ] = None,
    after: Annotated[
        str | None,
        typer.Option(
            "--after", help="Start after this event id (default: the first event).", show_default=False
        ),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Stop after this many events.", show_default=False)
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Then keep printing new events as they come, until Ctrl-C.")
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", min=0.1, help="Seconds between polls with --follow.")
    ] = 2.0,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per line: each event as the API answers it.")
    ] = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Events the token may read, oldest first: the admin sees every event, a tenant those about itself."""
    try:
        printed = call(
            server,
            token,
            as_json,
            lambda c: _stream(
                c,
                type_=type_,
                subject=subject,
                after=after,
                limit=limit,
                follow=follow,
                interval=interval,
                as_json=as_json,
            ),
            _OPTIONS,
        )
    except KeyboardInterrupt:
        raise typer.Exit(INTERRUPTED) from None
    if printed == 0 and not as_json:
        _emit("no events")
