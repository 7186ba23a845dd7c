"""`better-compute capacity free`: what a pool could book for a window, and when.

One call to `capacity.free`; the table is one row per kind of atom (a whole GPU of a model, a MIG
profile, a slot), the kinds a device request's class and selector choose between.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.cli.calls import JsonFlag, call
from better_compute.cli.output import print_json, stdout
from better_compute.cli.tables import Column, Output, OutputOption, print_fitted
from better_compute.cli.times import parse_time, when
from better_compute.wire.quotas import AtomClass

capacity_app = typer.Typer(help="What the fleet has free, and when.", no_args_is_help=True)
app.add_typer(capacity_app, name="capacity")

_FREE_COLUMNS = (
    Column("class"),
    Column("model", drop=2, wrap=True),
    Column("profile"),
    Column("atoms", drop=1),
    Column("free"),
    Column("earliest start"),
)


def _earliest(value: datetime | None, *, asked_now: bool) -> str:
    if value is None:
        return "never"  # too few such atoms, or bookings that never end
    return "now" if asked_now else when(value)


@capacity_app.command("free")
def free(
    pool: Annotated[str, typer.Option("--pool", help="The pool to look in.", show_default=False)],
    cls: Annotated[
        AtomClass | None, typer.Option("--class", help="Only atoms of this class.", show_default=False)
    ] = None,
    start: Annotated[
        str | None,
        typer.Option("--from", help="ISO 8601 start of the window (default: now).", show_default=False),
    ] = None,
    end: Annotated[
        str | None,
        typer.Option(
            "--to", help="ISO 8601 end of the window (default: an hour after --from).", show_default=False
        ),
    ] = None,
    count: Annotated[
        int, typer.Option("--count", min=1, max=4096, help="How many atoms of a kind must start together.")
    ] = 1,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """What a pool could book from --from to --to: per kind of atom, how many are free for the whole
    window, and when busy the earliest start at which --count of them are free for as long."""
    window_start, window_end = parse_time(start, "--from"), parse_time(end, "--to")
    answer = call(
        server,
        token,
        as_json,
        lambda c: c.capacity.free(pool=pool, cls=cls, start=window_start, end=window_end, count=count),
        {"pool": "--pool", "class": "--class", "from": "--from", "to": "--to", "count": "--count"},
    )
    if as_json:
        print_json(answer.model_dump(mode="json"))
        return
    console = stdout()
    console.print(f"pool {answer.pool_id}, {when(answer.from_)} → {when(answer.to)}", markup=False)
    if not answer.kinds:
        console.print("no bookable atoms" + (f" of class {cls}" if cls else ""), markup=False)
        return
    rows = [
        [
            k.cls,
            k.gpu_model or "-",
            k.mig_profile or "-",
            str(k.atoms),
            str(k.free),
            _earliest(k.earliest_start, asked_now=start is None and k.free >= answer.count),
        ]
        for k in answer.kinds
    ]
    print_fitted(console, _FREE_COLUMNS, rows, output)
