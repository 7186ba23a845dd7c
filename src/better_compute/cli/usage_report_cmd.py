"""`better-compute usage report [--month YYYY-MM]`: every tenant's GPU-hours of a month in one table,
as Slurm's `sreport cluster AccountUtilizationByUser` (admin).

A row per tenant and meter, the tenant's total under its meters when it used several, then the
fleet's: GPU-hours, share of the fleet's capacity that month (up to now), share of all use, and cost
where the meter has a price. `--json` prints the API's answer (`usage.report`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from better_compute.cli import config
from better_compute.cli.billing_cmd import usage_app
from better_compute.cli.calls import JsonFlag, call
from better_compute.cli.output import print_json, stdout
from better_compute.cli.tables import Column, Output, OutputOption, print_fitted

if TYPE_CHECKING:
    from better_compute.wire.billing import UsageReportPublic

COLUMNS = [
    Column("tenant"),
    Column("meter", drop=2),
    Column("GPU-hours"),
    Column("fleet %"),
    Column("use %", drop=1),
    Column("bookings", drop=3),
    Column("cost"),
]


def _percent(share: str | None) -> str:
    return "-" if share is None else f"{float(share) * 100:.1f}%"


def _cost(amount: str | None, currency: str | None) -> str:
    return "-" if amount is None else f"{amount} {currency or ''}".strip()


def rows(report: UsageReportPublic) -> list[list[str]]:
    """The table's rows: per tenant its meters (a total row under them when it has several), then the
    fleet's total."""
    out: list[list[str]] = []
    for t in report.tenants:
        several = len(t.lines) > 1
        for line in t.lines:
            share = None if several else t.share_of_fleet
            use = None if several else t.share_of_use
            shown_share = _percent(share) if not several else ""
            shown_use = _percent(use) if not several else ""
            bookings = "" if several else str(t.bookings)
            out.append(
                [
                    t.tenant_id,
                    line.meter,
                    line.hours,
                    shown_share,
                    shown_use,
                    bookings,
                    _cost(line.amount, line.currency),
                ]
            )
        if several:
            out.append(
                [
                    t.tenant_id,
                    "(total)",
                    t.hours,
                    _percent(t.share_of_fleet),
                    _percent(t.share_of_use),
                    str(t.bookings),
                    _cost(t.total, t.currency),
                ]
            )
    used = float(report.used_hours)
    capacity = float(report.capacity_hours)
    fleet_share = f"{used / capacity * 100:.1f}%" if capacity > 0 else "-"
    out.append(
        [
            "(all tenants)",
            "",
            report.used_hours,
            fleet_share,
            "100.0%" if report.tenants else "-",
            str(sum(t.bookings for t in report.tenants)),
            _cost(report.total, report.currency),
        ]
    )
    return out


@usage_app.command("report")
def usage_report(
    month: Annotated[
        str | None,
        typer.Option(
            "--month", help="The calendar month, YYYY-MM (UTC; default: this one).", show_default=False
        ),
    ] = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Every tenant's GPU-hours, share of the fleet and cost for one month, in one table (admin)."""
    report = call(server, token, as_json, lambda c: c.usage.report(month=month), {"month": "--month"})
    if as_json:
        print_json(report.model_dump(mode="json", by_alias=True))
        return
    console = stdout()
    console.print(
        f"usage {report.month}: {report.used_hours} of {report.capacity_hours} GPU-hours of capacity"
        " (capacity counted to now in a month under way)",
        markup=False,
    )
    if not report.tenants:
        console.print("no tenant held GPUs in this month", markup=False)
        return
    print_fitted(console, COLUMNS, rows(report), output)
