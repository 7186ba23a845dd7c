"""`better-compute doctor`: what in the fleet needs an operator (admin; docs/operations.md#doctor).

One call of `doctor.run`: a table of findings (code, subject, detail, action), or the API's JSON
with `--json`. The exit status is 1 when there is any finding, 0 when there is none, so a cron job
or a monitoring check can run it as it is.
"""

from __future__ import annotations

from typing import Annotated

import typer

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.cli.calls import JsonFlag, call
from better_compute.cli.output import print_json, stdout
from better_compute.cli.tables import Column, Output, OutputOption, json_wanted, print_fitted
from better_compute.cli.times import when
from better_compute.wire.doctor import (
    MIG_WAITING_DAYS_DEFAULT,
    MIG_WAITING_DAYS_MAX,
    SILENT_MINUTES_DEFAULT,
    SILENT_MINUTES_MAX,
)

_COLUMNS = (
    Column("code"),
    Column("subject"),
    Column("detail", wrap=True),
    Column("action", drop=1, wrap=True),
)


@app.command("doctor")
def doctor(
    silent_minutes: Annotated[
        int,
        typer.Option(
            "--silent-minutes",
            min=1,
            max=SILENT_MINUTES_MAX,
            help="Minutes without a signed report or spec read that make a joined node node.silent.",
        ),
    ] = SILENT_MINUTES_DEFAULT,
    mig_waiting_days: Annotated[
        int,
        typer.Option(
            "--mig-waiting-days",
            min=1,
            max=MIG_WAITING_DAYS_MAX,
            help="Days a layout change may wait from its request before it is capacity.mig.waiting.",
        ),
    ] = MIG_WAITING_DAYS_DEFAULT,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """What in the fleet needs an operator (admin): stuck or long-waiting MIG layout changes,
    waiting endpoints, silent nodes, unhealthy GPUs, reboots, refused layout changes, pools without
    fractional quota, and the ledger's self-check. Exits with status 1 when anything is found."""
    as_json = json_wanted(as_json, output)
    answer = call(
        server,
        token,
        as_json,
        lambda c: c.doctor.run(silent_minutes=silent_minutes, mig_waiting_days=mig_waiting_days),
        {"silentMinutes": "--silent-minutes", "migWaitingDays": "--mig-waiting-days"},
    )
    if as_json:
        print_json(answer.model_dump(mode="json"))
    else:
        console = stdout()
        if not answer.findings:
            console.print(f"no findings (checked {when(answer.checked_at)})", markup=False)
        else:
            rows = [[f.code, f.subject, f.detail, f.action] for f in answer.findings]
            print_fitted(console, _COLUMNS, rows, output)
            count = len(answer.findings)
            console.print(
                f"{count} finding{'' if count == 1 else 's'} (checked {when(answer.checked_at)})",
                markup=False,
            )
    if answer.findings:
        raise typer.Exit(1)
