"""Following one object until it reaches a state: `--watch` on the show commands and `wait`.

The server has no stream per object (the events stream is a log of the ledger, paged by id), so both
poll the object's own `get`: `--watch` prints the view again whenever the answer changes and stops at a
state the object does not leave (a reservation ended, cancelled or released; an endpoint InService or
Failed; any object deleted), `wait` prints nothing until its condition holds or `--timeout` passes.
The poll interval, the sleep and the clock are module attributes so a test runs a watch without
waiting.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

if TYPE_CHECKING:
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")

INTERRUPTED = 130
"""The exit status of a command ended by Ctrl-C (128 + SIGINT), as shells report it."""

EXIT_TIMEOUT = 4
"""`wait` gave up: the condition did not hold within `--timeout` (docs/cli.md, exit statuses)."""

sleep: Callable[[float], None] = time.sleep
"""How a watch waits between polls (a test replaces it)."""

clock: Callable[[], float] = time.monotonic
"""What `wait --timeout` is measured on (a test replaces it)."""

WatchOption = Annotated[
    bool,
    typer.Option(
        "--watch",
        "-w",
        help="Then show it again each time it changes, until it reaches a final state or Ctrl-C.",
    ),
]

IntervalOption = Annotated[
    float, typer.Option("--interval", min=0.1, max=3600, help="Seconds between polls with --watch.")
]


def plain(model: BaseModel) -> dict[str, Any]:
    """An answer as the API's JSON (camelCase keys), what conditions and changes are read from."""
    return model.model_dump(mode="json", by_alias=True)


def _emit_json(model: BaseModel) -> None:
    # One object per line, flushed: a watch piped into jq shows each change as it comes.
    sys.stdout.write(json.dumps(plain(model), ensure_ascii=False) + "\n")
    sys.stdout.flush()


def follow(
    fetch: Callable[[], M],
    render: Callable[[M], None],
    final: Callable[[M], bool],
    *,
    what: str,
    interval: float,
    as_json: bool,
) -> None:
    """Show `fetch()` now, then again each time its answer changes, until `final` holds for it or it
    is deleted (`what` is then said to be gone: `endpoint e1 deleted`). With `as_json`, each view
    is one JSON object per line. Ctrl-C ends the watch with status 130. A refusal other than NOT_FOUND
    after the first view propagates to the caller (`calls.call` reports it)."""
    from better_compute.client import NotFoundError

    try:
        current = fetch()
        seen = plain(current)
        _render(current, render, as_json)
        while not final(current):
            sleep(interval)
            try:
                current = fetch()
            except NotFoundError:
                if as_json:
                    sys.stdout.write(json.dumps({"deleted": what}) + "\n")
                else:
                    sys.stdout.write(f"{what} deleted\n")
                sys.stdout.flush()
                return
            now = plain(current)
            if now != seen:
                seen = now
                if not as_json:
                    sys.stdout.write("\n")
                _render(current, render, as_json)
    except KeyboardInterrupt:
        raise typer.Exit(INTERRUPTED) from None


def _render(model: M, render: Callable[[M], None], as_json: bool) -> None:
    if as_json:
        _emit_json(model)
    else:
        render(model)
        sys.stdout.flush()
