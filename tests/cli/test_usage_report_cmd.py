"""`usage report --month` through the CLI against the real app on both stores, at 80 columns and
piped: one table of every tenant's month, ids and numbers whole, and the API's answer with --json."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.client import Compute
from better_compute.storage.store import Store
from tests.api.test_usage_report import Month
from tests.builders import admin_token, tenant_token


class Live(Month):
    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.admin_token = admin_token(store)
        self.platform_token = tenant_token(store, "platform")

    def handle(self, request: httpx.Request) -> httpx.Response:
        answer = self.http.request(
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


def run(runner: CliRunner, token: str, *args: str, columns: int | None = 80) -> Any:
    env = {"COLUMNS": str(columns)} if columns else {}
    return runner.invoke(app, [*args, "--token", token], env=env)


def _cells(stdout: str, first: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if line.split()[:1] == [first]]


@pytest.mark.parametrize("columns", [80, None])
def test_usage_report_is_one_table_of_every_tenant(
    runner: CliRunner, live: Live, columns: int | None
) -> None:
    shown = run(runner, live.admin_token, "usage", "report", "--month", "2026-12", columns=columns)
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert out.splitlines()[0] == (
        "usage 2026-12: 2.500000 of 14.000000 GPU-hours of capacity (capacity counted to now in a month under way)"
    )
    assert all(len(line) <= 80 for line in out.splitlines()[1:]) or columns is None
    platform = _cells(out, "platform")
    assert [row[:3] for row in platform] == [
        ["platform", "gpu.a100.hours", "1.000000"],
        ["platform", "gpu.h100.hours", "0.500000"],
        ["platform", "(total)", "1.500000"],
    ]
    assert platform[2][3:5] == ["10.7%", "60.0%"]
    (acme,) = _cells(out, "acme")
    assert acme[:5] == ["acme", "gpu.a100.hours", "1.000000", "7.1%", "40.0%"]
    assert acme[-2:] == ["2.00", "USD"]
    (everyone,) = _cells(out, "(all")
    assert everyone[2:4] == ["2.500000", "17.9%"]


def test_usage_report_json_is_the_api_answer_and_refusals(runner: CliRunner, live: Live) -> None:
    as_json = run(runner, live.admin_token, "usage", "report", "--month", "2026-12", "--json", columns=None)
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == live.report(month="2026-12").json()
    empty = run(runner, live.admin_token, "usage", "report", "--month", "2026-11")
    assert empty.exit_code == 0 and "no tenant held GPUs in this month" in empty.stdout
    bad = run(runner, live.admin_token, "usage", "report", "--month", "2026-13")
    assert bad.exit_code == 1 and "--month 2026-13 is not YYYY-MM with MM from 01 to 12" in bad.stderr
    tenant = run(runner, live.platform_token, "usage", "report")
    assert tenant.exit_code == 1 and "FORBIDDEN" in tenant.stderr
