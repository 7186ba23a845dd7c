"""`better-compute events`: the events stream, one line per event, and with `--follow` the new ones
as they come.

It spells `events.list` through the typed client: page after page from `--after` (the start without
it), then, with `--follow`, the same call again every `--interval` seconds after the last id
received. The server serves events in an order no later commit can get in front of, so following
the last id skips nothing and repeats nothing. `--json` prints each event as the API answers it, one
JSON object per line, for scripts. Ctrl-C ends a follow with status 130, as a shell expects of an
interrupted command.

`--since` is turned into one time here, before the first call, so that every page and every poll
of a follow filters from the same moment; `--last N` asks the server for the stream's newest N
(one call, as `tail` reads a file from its end) and a follow goes on after the last of them.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.cli.calls import call
from better_compute.cli.times import parse_time

if TYPE_CHECKING:
    from better_compute.client import Compute
    from better_compute.wire.events import EventPublic

PAGE = 500
"""Events asked for per call."""

MAX_LAST = 1000
"""The most `--last` asks for: the server's most for one call (`events.list`'s `last`)."""


def _now() -> datetime:
    return datetime.now(UTC)


clock: Callable[[], datetime] = _now
"""What `--since 1h` counts back from (a test replaces it)."""

INTERRUPTED = 130
"""The exit status of a command ended by Ctrl-C (128 + SIGINT), as shells report it."""

sleep: Callable[[float], None] = time.sleep
"""How `--follow` waits between polls (a test replaces it)."""

_OPTIONS = {
    "type": "--type",
    "subject": "--subject",
    "after": "--after",
    "since": "--since",
    "last": "--last",
}
"""The request fields this command fills from an option: a refusal naming one names the option."""


_LOOKS_LIKE_A_DATE = re.compile(r"\s*\d{4}-")


def since_time(text: str | None) -> datetime | None:
    """`--since` as one time: an RFC 3339 / ISO 8601 time (without a zone, the local one, as for
    every time the CLI reads), or a duration (`1h`, `30m`, `2d`, `PT4H`) back from now."""
    if text is None:
        return None
    if _LOOKS_LIKE_A_DATE.match(text):
        return parse_time(text.strip(), "--since")
    from better_compute.domain.kernel.errors import InvalidInput  # only with --since
    from better_compute.domain.kernel.timewin import parse_duration

    try:
        return clock() - parse_duration(text, "--since")
    except (InvalidInput, OverflowError):
        raise typer.BadParameter(
            f"{text!r} is neither a time (such as 2030-01-01T10:00Z) nor a duration back from now"
            " (such as 1h, 30m or 2d)",
            param_hint="--since",
        ) from None


def _value(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(_value(v) for v in value) or "[]"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return "-" if value is None else str(value)


def line(event: EventPublic) -> str:
    """One event for people: id, time, type, subject, then its payload as key=value pairs."""
    payload = " ".join(f"{key}={_value(value)}" for key, value in event.payload.items())
    when = event.time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # one token, to the second
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
    since: datetime | None,
    last: int | None,
    limit: int | None,
    follow: bool,
    interval: float,
    as_json: bool,
) -> int:
    """Print events until the stream's end (or, following, until `limit`); returns how many. With
    `last`, the stream's newest `last` events first, then (following) what comes after them."""
    printed = 0
    cursor = after
    if last is not None:
        newest = compute.events.list(type=type_, subject=subject, after=cursor, since=since, last=last)
        for event in newest.items:
            _print(event, as_json)
            printed += 1
            cursor = str(event.id)
        if not follow:
            return printed
        sleep(interval)
    while True:
        size = PAGE if limit is None else min(PAGE, limit - printed)
        page = compute.events.list(type=type_, subject=subject, after=cursor, since=since, limit=size)
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
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Only events logged at or after this: a time (2026-12-01T09:00Z) or a duration back"
            " from now (1h, 30m, 2d).",
            show_default=False,
        ),
    ] = None,
    last: Annotated[
        int | None,
        typer.Option(
            "--last",
            min=1,
            max=MAX_LAST,
            help=f"Only the newest N events (1 to {MAX_LAST}), still shown oldest first.",
            show_default=False,
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", min=1, help="Stop after this many events (the oldest N).", show_default=False
        ),
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
    if last is not None and limit is not None:
        raise typer.BadParameter(
            "give one of them: --last N shows the newest N events, --limit N stops after the oldest N",
            param_hint="--last / --limit",
        )
    since_at = since_time(since)
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
                since=since_at,
                last=last,
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
