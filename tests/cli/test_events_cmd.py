"""`better-compute events` through typer's CliRunner against the real app on both stores (the
client's transport hands each request to the app in-process): lines for people, JSON lines for
scripts, filters, a tenant's own events, and `--follow` picking up what is written meanwhile."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from better_compute.cli import events_cmd
from better_compute.domain.tenancy.events import TenantCreated
from better_compute.storage.store import Store
from tests.builders import T0, stored_events
from tests.cli.test_resources_cmd import Live, live, run

__all__ = ["live"]  # the fixture: the real app on each store, with an admin and acme's token


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_events_prints_one_line_per_event_in_log_order(runner: CliRunner, live: Live, store: Store) -> None:
    result = run(runner, live.admin, "events")
    assert result.exit_code == 0, result.output
    logged = stored_events(store)
    shown = lines(result.stdout)
    assert [int(line.split()[0]) for line in shown] == [e["id"] for e in logged]
    pool = next(line for line in shown if " pool.created " in line)
    assert pool.split()[1:4] == ["2026-12-01T09:00:00Z", "pool.created", "p1"]
    assert "mode=mig" in pool and "ownerTenantId=platform" in pool and "nodes=n" in pool


def test_events_json_lines_filters_and_limit(runner: CliRunner, live: Live) -> None:
    result = run(runner, live.admin, "events", "--json", "--type", "credential.created")
    assert result.exit_code == 0, result.output
    items = [json.loads(line) for line in lines(result.stdout)]
    assert len(items) == 2 and {i["type"] for i in items} == {"credential.created"}
    assert set(items[0]) == {"id", "type", "subject", "time", "payload"}
    first = run(runner, live.admin, "events", "--json", "--limit", "1")
    (only,) = [json.loads(line) for line in lines(first.stdout)]
    rest = run(runner, live.admin, "events", "--json", "--after", str(only["id"]))
    assert only["id"] not in [json.loads(line)["id"] for line in lines(rest.stdout)]
    about = run(runner, live.admin, "events", "--subject", "p1", "--json")
    assert {json.loads(line)["subject"] for line in lines(about.stdout)} == {"p1"}


def test_a_tenant_sees_only_its_own_events(runner: CliRunner, live: Live) -> None:
    result = run(runner, live.acme, "events", "--json")
    assert result.exit_code == 0, result.output
    items = [json.loads(line) for line in lines(result.stdout)]
    assert [i["type"] for i in items] == ["credential.created"]
    assert items[0]["payload"]["tenantId"] == "acme"
    none = run(runner, live.acme, "events", "--type", "fleet.registered")
    assert none.exit_code == 0 and none.stdout.strip() == "no events"


def test_follow_prints_events_written_while_it_waits(
    runner: CliRunner, live: Live, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    existing = len(stored_events(store))
    waits: list[float] = []

    def meanwhile(seconds: float) -> None:
        waits.append(seconds)
        with store.begin() as tx:
            tx.events.append(TenantCreated(f"t{len(waits)}", "T"), T0)

    monkeypatch.setattr(events_cmd, "sleep", meanwhile)
    result = run(
        runner, live.admin, "events", "--follow", "--interval", "0.5", "--limit", str(existing + 2), "--json"
    )
    assert result.exit_code == 0, result.output
    items = [json.loads(line) for line in lines(result.stdout)]
    assert len(items) == existing + 2 and len({i["id"] for i in items}) == len(items)
    assert [i["subject"] for i in items[-2:]] == ["t1", "t2"]
    assert waits == [0.5, 0.5]


def test_ctrl_c_ends_a_follow_with_status_130(
    runner: CliRunner, live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(_: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(events_cmd, "sleep", interrupted)
    result = run(runner, live.admin, "events", "--follow")
    assert result.exit_code == 130
    assert "Traceback" not in result.output and "pool.created" in result.stdout


def test_a_refused_filter_names_the_option(runner: CliRunner, live: Live) -> None:
    bad = run(runner, live.admin, "events", "--type", "Nope")
    assert bad.exit_code == 1
    assert "INVALID_INPUT: --type must be dotted lowercase words" in bad.stderr
    unknown = run(runner, live.admin, "events", "--after", "999999")
    assert unknown.exit_code == 1 and "--after: no event has id 999999" in unknown.stderr
    as_json = run(runner, live.admin, "events", "--after", "x", "--json")
    assert as_json.exit_code == 1 and json.loads(as_json.stderr)["error"]["code"] == "INVALID_INPUT"
