"""Billing commands: `bills show`, `usage export`, and `prices set` / `prices list`.

`usage export` reads `usage.list` a page at a time (at most 1,000 rows each, following its cursor)
and writes each row as it arrives, so an export of a month of any size runs in the memory of one
page; the totals per tenant and meter are summed exactly on the way (`domain.metering.metering`), and equal
the bills' lines over the same period.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from fractions import Fraction
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich import box
from rich.table import Table

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.cli.calls import JsonFlag, call
from better_compute.cli.output import fail, print_json, stderr, stdout
from better_compute.cli.tables import Column, Output, OutputOption, json_wanted, print_fitted
from better_compute.cli.times import when

if TYPE_CHECKING:
    from better_compute.client import Compute
    from better_compute.wire.billing import BillPublic, UsageRowPublic

FromOption = Annotated[
    str | None,
    typer.Option(
        "--from", help="Start: a date (2030-01-01, UTC) or an ISO 8601 time with offset.", show_default=False
    ),
]
ToOption = Annotated[str | None, typer.Option("--to", help="End (excluded), as --from.", show_default=False)]
PERIOD_OPTIONS = {"tenantId": "--tenant", "poolId": "--pool"}
"""Body fields the commands fill from an option (a refusal naming one names the option); `from` and
`to` are named alike in both."""

EXPORT_PAGE = 1000
"""Rows per `usage.list` page while exporting: the most a page may hold."""

PROGRESS_EVERY = 100
"""Rows between two updates of the progress line."""

COLUMNS = (
    "kind",
    "bookingId",
    "reservationId",
    "tenantId",
    "poolId",
    "atomId",
    "class",
    "gpuModel",
    "meter",
    "share",
    "start",
    "end",
    "hours",
)
"""The export's columns: one `booking` row per booking and period, then one `total` row per tenant
and meter (its tenantId, meter and hours; the rest empty)."""

SLURM_COLUMN = "slurmJobId"
"""With `--slurm-job-ids`, the last column: the Slurm job that held the booking's allocation, empty
where none did."""


# -- bills ---------------------------------------------------------------------------------------
bills_app = typer.Typer(help="Show a tenant's bill for a period.", no_args_is_help=True)
app.add_typer(bills_app, name="bills")


@bills_app.command("show")
def bills_show(
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", help="Default: the token's own tenant.", show_default=False),
    ] = None,
    since: FromOption = None,
    until: ToOption = None,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """GPU-hours per meter for a tenant in a period (default: this calendar month, UTC), priced
    where the meter has a price."""

    def get(c: Compute) -> BillPublic:
        tenant_id = tenant
        if tenant_id is None:
            tenant_id = c.credentials.whoami().tenant_id
            if tenant_id is None:
                fail("a fleet-admin token has no tenant of its own: pass --tenant", as_json=as_json)
        return c.bills.get(tenant_id, from_=since, to=until)

    bill = call(server, token, as_json, get, PERIOD_OPTIONS)
    if as_json:
        print_json(bill.model_dump(mode="json", by_alias=True))
        return
    _print_bill(bill)


def _print_bill(bill: BillPublic) -> None:
    console = stdout()
    title = f"tenant {bill.tenant_id}, {_time(bill.from_)} to {_time(bill.to)}"
    if not bill.lines:
        console.print(f"{title}: no usage", markup=False)
        _print_showback(bill)
        return
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, show_footer=bill.total is not None)
    currency = next((line.currency for line in bill.lines if line.currency), "")
    table.add_column("meter", no_wrap=True, footer="total")
    table.add_column("GPU-hours", justify="right")
    table.add_column("amount", justify="right", footer=f"{bill.total} {currency}" if bill.total else "")
    for line in bill.lines:
        amount = f"{line.amount} {line.currency}" if line.amount is not None else "-"
        table.add_row(line.meter, line.hours, amount)
    console.print(table)
    _print_showback(bill)


def _print_showback(bill: BillPublic) -> None:
    """The endpoints' cost per component, beside the bill (not in its total)."""
    if not bill.showback:
        return
    table = Table(
        title="showback: endpoints' cost per component (not in the total)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("endpoint", no_wrap=True)
    table.add_column("component", no_wrap=True)
    table.add_column("GPU-hours", justify="right")
    table.add_column("amount", justify="right")
    for line in bill.showback:
        table.add_row(line.endpoint, line.component, line.gpu_hours, line.amount or "-")
    stdout().print(table)


def _time(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


# -- usage export --------------------------------------------------------------------------------
usage_app = typer.Typer(help="Export usage: GPU-hours per booking in a period.", no_args_is_help=True)
app.add_typer(usage_app, name="usage")


@usage_app.command("export")
def usage_export(
    since: Annotated[
        str,
        typer.Option(
            "--from", help="Start: a date (2030-01-01, UTC) or an ISO 8601 time.", show_default=False
        ),
    ],
    until: Annotated[str, typer.Option("--to", help="End (excluded), as --from.", show_default=False)],
    output_format: Annotated[str, typer.Option("--format", help="csv or json.", show_default=True)] = "csv",
    out: Annotated[
        Path | None, typer.Option("--out", help="Write to this file (default: stdout).", show_default=False)
    ] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", show_default=False)] = None,
    pool: Annotated[str | None, typer.Option("--pool", show_default=False)] = None,
    slurm_job_ids: Annotated[
        bool,
        typer.Option(
            "--slurm-job-ids",
            help=f"Add a `{SLURM_COLUMN}` column: the Slurm job that held each booking (empty where none).",
        ),
    ] = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """One row per booking with time held in the period, then the totals per tenant and meter,
    written as they arrive (a page of 1,000 rows in memory at a time); a progress bar on a terminal."""
    if output_format not in ("csv", "json"):
        raise typer.BadParameter("must be csv or json", param_hint="--format")
    kind: Literal["csv", "json"] = "csv" if output_format == "csv" else "json"

    def export(c: Compute) -> int:
        rows = c.usage.iter(
            from_=since,
            to=until,
            tenant_id=tenant,
            pool_id=pool,
            page_size=EXPORT_PAGE,
            slurm_job_ids=slurm_job_ids,
        )
        columns = (*COLUMNS, SLURM_COLUMN) if slurm_job_ids else COLUMNS
        with _target(out) as stream, _progress(stream) as advance:
            writer = (
                CsvExport(stream, columns) if kind == "csv" else JsonExport(stream, since, until, columns)
            )
            count = 0
            for row in rows:
                writer.row(row)
                count += 1
                advance(count)
            writer.close()
        return count

    count = call(server, token, False, export, PERIOD_OPTIONS)
    if out is not None:
        stderr().print(f"{count} rows written to {out}", markup=False)


@contextmanager
def _target(out: Path | None) -> Iterator[IO[str]]:
    if out is None:
        yield sys.stdout
        return
    try:
        stream = out.open("w", encoding="utf-8", newline="")
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}")
    with stream:
        yield stream


@contextmanager
def _progress(stream: IO[str]) -> Iterator[Callable[[int], None]]:
    """A progress line on stderr while rows are exported, on a terminal only, and never into the
    terminal the rows themselves are written to."""
    console = stderr()
    if not console.is_terminal or (stream is sys.stdout and sys.stdout.isatty()):
        yield lambda _: None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    # How many rows will come is not known before the last page, so the bar pulses and counts.
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console, transient=True
    ) as progress:
        task = progress.add_task("exporting usage: 0 rows", total=None)

        def advance(count: int) -> None:
            if count % PROGRESS_EVERY == 0:
                progress.update(task, description=f"exporting usage: {count:,} rows")

        yield advance


class Totals:
    """Exact GPU-hours per (tenant, meter) of the rows seen: share x held time, never the rounded
    hours of each row."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, str], Fraction] = {}

    def add(self, row: UsageRowPublic) -> None:
        from better_compute.domain.metering.metering import (  # the catalog: only when exporting
            hours,
            microseconds,
        )

        key = (row.tenant_id, row.meter)
        held = hours(Fraction(row.share), microseconds(row.end - row.start))
        self.by_key[key] = self.by_key.get(key, Fraction(0)) + held

    def rows(self) -> list[dict[str, str]]:
        from better_compute.domain.metering.metering import shown

        return [
            {"tenantId": tenant, "meter": meter, "hours": shown(total)}
            for (tenant, meter), total in sorted(self.by_key.items())
        ]


def _row(row: UsageRowPublic, columns: tuple[str, ...] = COLUMNS) -> dict[str, Any]:
    data = row.model_dump(mode="json", by_alias=True)
    return {key: data.get(key) for key in columns[1:]}


class CsvExport:
    def __init__(self, stream: IO[str], columns: tuple[str, ...] = COLUMNS) -> None:
        self.writer = csv.writer(stream, lineterminator="\n")
        self.columns = columns
        self.writer.writerow(columns)
        self.totals = Totals()

    def row(self, row: UsageRowPublic) -> None:
        self.totals.add(row)
        self.writer.writerow(["booking", *("" if v is None else v for v in _row(row, self.columns).values())])

    def close(self) -> None:
        for total in self.totals.rows():
            self.writer.writerow(["total", *(total.get(key, "") for key in self.columns[1:])])


class JsonExport:
    """`{"from", "to", "rows": [...], "totals": [...]}`, one JSON document written row by row."""

    def __init__(self, stream: IO[str], since: str, until: str, columns: tuple[str, ...] = COLUMNS) -> None:
        self.stream = stream
        self.columns = columns
        self.totals = Totals()
        self.first = True
        stream.write('{"from": ' + json.dumps(since) + ', "to": ' + json.dumps(until) + ', "rows": [')

    def row(self, row: UsageRowPublic) -> None:
        self.totals.add(row)
        row_json = json.dumps(_row(row, self.columns), ensure_ascii=False)
        self.stream.write(("\n  " if self.first else ",\n  ") + row_json)
        self.first = False

    def close(self) -> None:
        self.stream.write('\n], "totals": ' + json.dumps(self.totals.rows()) + "}\n")


# -- prices --------------------------------------------------------------------------------------
prices_app = typer.Typer(help="List and set prices per meter.", no_args_is_help=True)
app.add_typer(prices_app, name="prices")


@prices_app.command("list")
def prices_list(
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """What one hour of each priced meter costs."""
    as_json = json_wanted(as_json, output)

    def read(c: Compute) -> list[Any]:
        items: list[Any] = []
        cursor: str | None = None
        while True:
            page = c.prices.list(cursor=cursor, limit=1000)
            items.extend(page.items)
            if not page.next_cursor:
                return items
            cursor = page.next_cursor

    items = call(server, token, as_json, read)
    if as_json:
        print_json({"items": [i.model_dump(mode="json", by_alias=True) for i in items], "nextCursor": None})
        return
    if not items:
        stdout().print("no prices", markup=False)
        return
    columns = (Column("meter"), Column("per hour"), Column("currency"), Column("updated", drop=1))
    rows = [[p.meter, p.per_hour, p.currency, when(p.updated_at)] for p in items]
    print_fitted(stdout(), columns, rows, output)


@prices_app.command("set")
def prices_set(
    meter: Annotated[str, typer.Option("--meter", help="e.g. gpu.h100.hours.", show_default=False)],
    per_hour: Annotated[str, typer.Option("--per-hour", help="A decimal such as 2.50.", show_default=False)],
    currency: Annotated[str, typer.Option("--currency", help="ISO 4217, e.g. USD.", show_default=False)],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Set what one hour of a meter costs (admin); bills read afterwards use it."""
    options = {"meter": "--meter", "perHour": "--per-hour", "currency": "--currency"}
    price = call(
        server,
        token,
        as_json,
        lambda c: c.prices.set(meter=meter, per_hour=per_hour, currency=currency),
        options,
    )
    if as_json:
        print_json(price.model_dump(mode="json", by_alias=True))
        return
    stdout().print(f"{price.meter}: {price.per_hour} {price.currency} per hour", markup=False)
