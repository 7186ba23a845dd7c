"""`better-compute capacity free|accounting|summary|timeline|by-pool`: what the fleet has free, and
where every GPU-hour went.

Each command is one call of its API method. `free`'s table is one row per kind of atom (a whole GPU
of a model, a MIG profile, a slot), the kinds a device request's class and selector choose between;
`accounting`'s and `timeline`'s are one row per bucket.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated

import typer

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.cli.calls import JsonFlag, call
from better_compute.cli.output import print_json, stdout
from better_compute.cli.tables import Column, Output, OutputOption, json_wanted, print_fitted
from better_compute.cli.times import parse_time, when
from better_compute.wire.capacity import AccountingBucket, StateHoursPublic
from better_compute.wire.quotas import AtomClass

capacity_app = typer.Typer(
    help="What the fleet has free, and where every GPU-hour went.", no_args_is_help=True
)
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
    as_json = json_wanted(as_json, output)
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


PoolFilter = Annotated[
    str | None,
    typer.Option(
        "--pool", help="Only this pool (default: every pool the token may see).", show_default=False
    ),
]
RangeStart = Annotated[str, typer.Option("--from", help="ISO 8601 start of the range.", show_default=False)]
RangeEnd = Annotated[str, typer.Option("--to", help="ISO 8601 end of the range.", show_default=False)]
Bucket = Annotated[str, typer.Option("--bucket", help="Length of each row: 1h, 1d, 30m (at most 1000 rows).")]
_RANGE_OPTIONS = {"poolId": "--pool", "from": "--from", "to": "--to", "bucket": "--bucket"}

_ACCOUNTING_COLUMNS = (
    Column("from"),
    Column("capacity"),
    Column("booked"),
    Column("free"),
    Column("changing"),
    Column("unhealthy"),
    Column("cordoned"),
)
"""No state column is ever dropped: a row's five states add up to its capacity, so a table that
left one out (`changing` went first at 80 columns) would show rows that do not add up."""


def _range(start: str, end: str) -> tuple[datetime, datetime]:
    first, last = parse_time(start, "--from"), parse_time(end, "--to")
    assert first is not None and last is not None
    return first, last


def _scope(pool: str | None) -> str:
    return f"pool {pool}" if pool else "every pool"


@capacity_app.command("accounting")
def accounting(
    start: RangeStart,
    end: RangeEnd,
    pool: PoolFilter = None,
    bucket: Bucket = "1h",
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Every GPU-hour from --from to --to, per --bucket, in exactly one state: booked, free,
    changing (a partition change holds the GPU), unhealthy or cordoned. Hours are rounded to 6
    places; unrounded, the states sum to capacity."""
    as_json = json_wanted(as_json, output)
    first, last = _range(start, end)
    answer = call(
        server,
        token,
        as_json,
        lambda c: c.capacity.accounting(start=first, end=last, bucket=bucket, pool_id=pool),
        _RANGE_OPTIONS,
    )
    if as_json:
        print_json(answer.model_dump(mode="json"))
        return
    console = stdout()
    console.print(
        f"{_scope(answer.pool_id)}, {when(answer.from_)} → {when(answer.to)}, GPU-hours per {answer.bucket}",
        markup=False,
    )
    rows = [[_bucket_start(b.from_, answer.buckets), *_hours(b.hours)] for b in answer.buckets]
    rows.append(["total", *_hours(answer.total)])
    print_fitted(console, _ACCOUNTING_COLUMNS, rows, output)


def _bucket_start(at: datetime, buckets: Sequence[AccountingBucket]) -> str:
    """A bucket's start: its time of day (`09:00:00Z`) when every bucket starts on one UTC day (the
    line above the table names it), so that the six states fit beside it in 80 columns; else whole."""
    days = {b.from_.astimezone(UTC).date() for b in buckets}
    return at.astimezone(UTC).strftime("%H:%M:%SZ") if len(days) == 1 else when(at)


def _hours(h: StateHoursPublic) -> list[str]:
    return [h.capacity, h.booked, h.free, h.changing, h.unhealthy, h.cordoned]


@capacity_app.command("summary")
def summary(
    pool: PoolFilter = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Whole GPUs per model now: how many, how many can be booked whole, how many are booked whole,
    how many are unhealthy. A GPU split into MIG instances or slots is not bookable whole."""
    as_json = json_wanted(as_json, output)
    answer = call(server, token, as_json, lambda c: c.capacity.summary(pool_id=pool), {"poolId": "--pool"})
    if as_json:
        print_json(answer.model_dump(mode="json"))
        return
    console = stdout()
    if not answer.models:
        console.print("no GPUs", markup=False)
        return
    columns = (Column("model"), Column("gpus"), Column("bookable"), Column("booked"), Column("unhealthy"))
    rows = [[m.model, str(m.total), str(m.bookable), str(m.booked), str(m.unhealthy)] for m in answer.models]
    print_fitted(console, columns, rows, output)


@capacity_app.command("timeline")
def timeline(
    start: RangeStart,
    end: RangeEnd,
    pool: PoolFilter = None,
    bucket: Bucket = "1h",
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Whole GPUs booked per --bucket from --from to --to: the most at once, and their GPU-hours."""
    as_json = json_wanted(as_json, output)
    first, last = _range(start, end)
    answer = call(
        server,
        token,
        as_json,
        lambda c: c.capacity.timeline(start=first, end=last, bucket=bucket, pool_id=pool),
        _RANGE_OPTIONS,
    )
    if as_json:
        print_json(answer.model_dump(mode="json"))
        return
    console = stdout()
    console.print(
        f"{_scope(answer.pool_id)}, {when(answer.from_)} → {when(answer.to)}, whole GPUs per {answer.bucket}",
        markup=False,
    )
    columns = (Column("from"), Column("booked"), Column("gpu-hours"))
    rows = [[when(b.from_), str(b.booked), b.hours] for b in answer.buckets]
    print_fitted(console, columns, rows, output)


@capacity_app.command("by-pool")
def by_pool(
    pool: PoolFilter = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Atoms per pool and class now (gpu, gpu.mig, gpu.slot): how many, how many are bookable,
    how many are booked. A split GPU's parent counts under gpu, unbookable."""
    as_json = json_wanted(as_json, output)
    answer = call(server, token, as_json, lambda c: c.capacity.by_pool(pool_id=pool), {"poolId": "--pool"})
    if as_json:
        print_json(answer.model_dump(mode="json"))
        return
    console = stdout()
    if not answer.rows:
        console.print("no pools", markup=False)
        return
    columns = (Column("pool"), Column("class"), Column("atoms"), Column("bookable"), Column("booked"))
    rows = [[r.pool_id, r.cls, str(r.total), str(r.bookable), str(r.booked)] for r in answer.rows]
    print_fitted(console, columns, rows, output)
