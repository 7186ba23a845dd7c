"""`bills show`, `usage export` and `prices`, run through typer's CliRunner against the real app on both
stores: the client's transport hands each request to the app in-process (no sockets)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.client import Compute
from better_compute.storage.store import Store
from tests.api.test_billing import Billing
from tests.builders import admin_token, tenant_token

DAY = ["--from", "2026-12-01", "--to", "2026-12-02"]


class Live:
    def __init__(self, store: Store) -> None:
        self.world = Billing(store)
        self.admin = admin_token(store)
        self.platform = tenant_token(store, "platform")
        self.world.reserve(self.world.platform, "h100-timeslice", "gpu.slot", 2)
        self.world.reserve(self.world.platform, "h100-mig", "gpu.mig", profile="3g.40gb")
        self.world.reserve(self.world.platform, "l40s-mps", "gpu.slot", 3, duration="20m")

    def handle(self, request: httpx.Request) -> httpx.Response:
        answer = self.world.http.request(
            request.method, str(request.url), headers=dict(request.headers), content=request.content
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


@pytest.fixture
def live(store: Store, monkeypatch: pytest.MonkeyPatch) -> Live:
    world = Live(store)

    def connect(settings: config.Settings) -> Compute:
        transport = httpx.MockTransport(world.handle)
        return Compute(settings.server, settings.token, transport=transport, retries=1, sleep=lambda _: None)

    monkeypatch.setattr(config, "connect", connect)
    return world


def run(runner: CliRunner, token: str, *args: str) -> Any:
    return runner.invoke(app, [*args, "--token", token])


def test_bills_show_prints_the_bill_as_a_table_and_as_json(runner: CliRunner, live: Live) -> None:
    table = run(runner, live.admin, "bills", "show", "--tenant", "platform", *DAY)
    assert table.exit_code == 0, table.output
    assert "tenant platform, 2026-12-01T00:00:00Z to 2026-12-02T00:00:00Z" in table.stdout
    assert "gpu.h100.hours" in table.stdout and "0.928571" in table.stdout
    as_json = run(runner, live.admin, "bills", "show", "--tenant", "platform", *DAY, "--json")
    assert json.loads(as_json.stdout) == live.world.bill("platform").json()
    # A tenant's token reads its own bill without naming itself.
    own = run(runner, live.platform, "bills", "show", *DAY, "--json")
    assert own.exit_code == 0, own.output
    assert json.loads(own.stdout)["tenantId"] == "platform"


def test_bills_show_with_prices_shows_amounts_and_the_total(runner: CliRunner, live: Live) -> None:
    for meter, price in (("gpu.h100.hours", "2.50"), ("gpu.l40s.hours", "0.75")):
        made = run(
            runner, live.admin, "prices", "set", "--meter", meter, "--per-hour", price, "--currency", "USD"
        )
        assert made.exit_code == 0, made.output
        assert f"{meter}: {price} USD per hour" in made.stdout
    table = run(runner, live.admin, "bills", "show", "--tenant", "platform", *DAY)
    assert "2.32 USD" in table.stdout and "0.25 USD" in table.stdout  # 3 x 33/100 x 1/3 h x 0.75
    assert "2.57 USD" in table.stdout and "total" in table.stdout
    listed = run(runner, live.platform, "prices", "list")
    assert listed.exit_code == 0 and "gpu.l40s.hours" in listed.stdout and "0.75" in listed.stdout
    as_json = json.loads(run(runner, live.platform, "prices", "list", "--json").stdout)
    assert [p["perHour"] for p in as_json["items"]] == ["2.50", "0.75"]


def test_bills_show_refusals_speak_cli(runner: CliRunner, live: Live) -> None:
    admin = run(runner, live.admin, "bills", "show", *DAY)
    assert (
        admin.exit_code == 1 and "a fleet-admin token has no tenant of its own: pass --tenant" in admin.stderr
    )
    other = run(runner, live.platform, "bills", "show", "--tenant", "acme", *DAY)
    assert other.exit_code == 1 and "NOT_FOUND: tenant acme not found" in other.stderr
    backwards = run(
        runner,
        live.admin,
        "bills",
        "show",
        "--tenant",
        "platform",
        "--from",
        "2026-12-02",
        "--to",
        "2026-12-01",
    )
    assert backwards.exit_code == 1 and "INVALID_INPUT: from must be before to" in backwards.stderr
    price = run(runner, live.admin, "prices", "set", "--meter", "m", "--per-hour", "-1", "--currency", "USD")
    assert price.exit_code == 1 and "--per-hour must not be negative" in price.stderr


def test_usage_export_csv_streams_rows_then_totals_equal_to_the_bill(
    runner: CliRunner, live: Live, tmp_path: Path
) -> None:
    out = tmp_path / "usage.csv"
    result = run(runner, live.admin, "usage", "export", *DAY, "--format", "csv", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert f"6 rows written to {out}" in result.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    bookings = [r for r in rows if r["kind"] == "booking"]
    totals = {(r["tenantId"], r["meter"]): r["hours"] for r in rows if r["kind"] == "total"}
    assert len(bookings) == 6 and rows[-len(totals) :] == [r for r in rows if r["kind"] == "total"]
    assert sorted(r["share"] for r in bookings) == ["1/4", "1/4", "3/7", "33/100", "33/100", "33/100"]
    assert totals == {("platform", "gpu.h100.hours"): "0.928571", ("platform", "gpu.l40s.hours"): "0.330000"}
    bill = live.world.lines("platform")
    assert {meter: hours for (_, meter), hours in totals.items()} == bill


def test_usage_export_json_to_stdout_is_one_document(runner: CliRunner, live: Live) -> None:
    result = run(runner, live.platform, "usage", "export", *DAY, "--format", "json", "--pool", "h100-mig")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["from"], document["to"]) == ("2026-12-01", "2026-12-02")
    assert [r["share"] for r in document["rows"]] == ["3/7"]
    assert document["totals"] == [{"tenantId": "platform", "meter": "gpu.h100.hours", "hours": "0.428571"}]
    empty = json.loads(
        run(
            runner,
            live.admin,
            "usage",
            "export",
            "--from",
            "2030-01-01",
            "--to",
            "2030-01-02",
            "--format",
            "json",
        ).stdout
    )
    assert empty["rows"] == [] and empty["totals"] == []


def test_usage_export_refuses_a_format_it_does_not_write(
    runner: CliRunner, live: Live, tmp_path: Path
) -> None:
    result = run(runner, live.admin, "usage", "export", *DAY, "--format", "xml")
    assert result.exit_code == 2 and "must be csv or json" in result.output
    missing = run(
        runner, live.admin, "usage", "export", *DAY, "--out", str(tmp_path / "no" / "such" / "dir" / "f.csv")
    )
    assert missing.exit_code == 1 and "cannot write" in missing.stderr
    wrong = run(runner, live.admin, "usage", "export", "--from", "soon", "--to", "2026-12-02")
    assert wrong.exit_code == 1 and "from 'soon' is not a date" in wrong.stderr


def test_usage_export_shows_its_progress_on_a_terminal(
    runner: CliRunner, live: Live, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    from better_compute.cli import billing_cmd

    screen = io.StringIO()
    monkeypatch.setattr(billing_cmd, "stderr", lambda: Console(file=screen, force_terminal=True, width=80))
    monkeypatch.setattr(billing_cmd, "PROGRESS_EVERY", 1)
    out = tmp_path / "usage.json"
    result = run(runner, live.admin, "usage", "export", *DAY, "--format", "json", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "exporting usage: 6 rows" in screen.getvalue()
    assert len(json.loads(out.read_text(encoding="utf-8"))["rows"]) == 6


class _JobIds:
    """Slurm's job of one allocation, as the server's follower of a Slurm cluster records it."""

    def __init__(self, jobs: dict[str, int]) -> None:
        self.jobs = jobs
        self.asked: list[list[str]] = []

    def job_ids(self, allocation_ids: Sequence[str]) -> Mapping[str, int]:
        self.asked.append(list(allocation_ids))
        return {a: self.jobs[a] for a in allocation_ids if a in self.jobs}


def test_usage_export_adds_slurm_job_ids_empty_where_none(
    runner: CliRunner, live: Live, tmp_path: Path
) -> None:
    app_state = live.world.http.app.state  # type: ignore[attr-defined]
    plain = run(runner, live.admin, "usage", "export", *DAY)
    assert "slurmJobId" not in plain.stdout.splitlines()[0]
    mig = next(r for r in csv.DictReader(io.StringIO(plain.stdout)) if r["share"] == "3/7")
    ids = _JobIds({mig["reservationId"]: 4242})
    app_state.services = dataclasses.replace(app_state.services, slurm_job_ids=ids)

    result = run(runner, live.admin, "usage", "export", *DAY, "--slurm-job-ids")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert list(rows[0])[-1] == "slurmJobId"
    assert {(r["kind"], r["reservationId"], r["slurmJobId"]) for r in rows if r["slurmJobId"]} == {
        ("booking", mig["reservationId"], "4242")
    }
    assert sum(1 for r in rows if r["kind"] == "booking" and r["slurmJobId"] == "") == 5
    assert len(ids.asked) == 1  # one question per page
    document = json.loads(
        run(runner, live.admin, "usage", "export", *DAY, "--slurm-job-ids", "--format", "json").stdout
    )
    assert sorted((r["slurmJobId"] is None) for r in document["rows"]) == [False, *[True] * 5]
