"""`better-compute events` through typer's CliRunner against the real app on both stores (the
client's transport hands each request to the app in-process): lines for people, JSON lines for
scripts, filters, a tenant's own events, and `--follow` picking up what is written meanwhile."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from better_compute.cli import events_cmd
from better_compute.cli.app import app
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


WIDE = {"COLUMNS": "80"}
"""An 80-column terminal; CliRunner's output is a pipe, as `events | grep` is."""


def at80(runner: CliRunner, token: str, *args: str) -> Any:
    return runner.invoke(app, [*args, "--token", token], env=WIDE)


def _later_tenants(store: Store) -> None:
    """Three events after the fleet's: one at 10:00, two at 11:00."""
    with store.begin() as tx:
        tx.events.append(TenantCreated("early", "Early"), T0 + timedelta(hours=1))
    with store.begin() as tx:
        tx.events.append(TenantCreated("late1", "Late"), T0 + timedelta(hours=2))
        tx.events.append(TenantCreated("late2", "Late"), T0 + timedelta(hours=2))


def _subjects(output: str) -> list[str]:
    return [line.split()[3] for line in lines(output)]


def test_since_takes_a_time_or_a_duration_back_from_now(
    runner: CliRunner, live: Live, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _later_tenants(store)
    by_time = at80(runner, live.admin, "events", "--since", "2026-12-01T10:00:00Z")
    assert by_time.exit_code == 0, by_time.output
    assert _subjects(by_time.stdout) == ["early", "late1", "late2"]
    # Whole lines at 80 columns and piped: id, time to the second, type, subject; never cut.
    first = lines(by_time.stdout)[0].split()
    assert first[1:4] == ["2026-12-01T10:00:00Z", "tenant.created", "early"]
    monkeypatch.setattr(events_cmd, "clock", lambda: T0 + timedelta(hours=2, minutes=30))
    by_span = at80(runner, live.admin, "events", "--since", "1h", "--json")
    assert [json.loads(line)["subject"] for line in lines(by_span.stdout)] == ["late1", "late2"]
    local = at80(
        runner, live.admin, "events", "--since", "2026-12-01T11:00:00+01:00", "--type", "tenant.created"
    )
    assert _subjects(local.stdout) == ["early", "late1", "late2"]
    none = at80(runner, live.admin, "events", "--since", "2027-01-01T00:00Z")
    assert none.exit_code == 0 and none.stdout.strip() == "no events"


def test_last_shows_the_newest_n_oldest_first(runner: CliRunner, live: Live, store: Store) -> None:
    _later_tenants(store)
    newest = at80(runner, live.admin, "events", "--last", "2")
    assert newest.exit_code == 0, newest.output
    assert _subjects(newest.stdout) == ["late1", "late2"]
    ids = [int(line.split()[0]) for line in lines(newest.stdout)]
    assert ids == [e["id"] for e in stored_events(store)][-2:]
    # --limit keeps its meaning: the oldest N.
    oldest = at80(runner, live.admin, "events", "--limit", "2", "--json")
    assert [json.loads(line)["id"] for line in lines(oldest.stdout)] == [
        e["id"] for e in stored_events(store)
    ][:2]
    since = at80(runner, live.admin, "events", "--last", "5", "--since", "2026-12-01T10:30:00Z")
    assert _subjects(since.stdout) == ["late1", "late2"]
    everything = at80(runner, live.admin, "events", "--last", "1000", "--json")
    assert len(lines(everything.stdout)) == len(stored_events(store))


def test_last_then_follow_goes_on_after_the_newest(
    runner: CliRunner, live: Live, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _later_tenants(store)

    def meanwhile(_: float) -> None:
        with store.begin() as tx:
            tx.events.append(TenantCreated("next", "Next"), T0 + timedelta(hours=3))

    monkeypatch.setattr(events_cmd, "sleep", meanwhile)
    result = at80(runner, live.admin, "events", "--last", "1", "--follow", "--limit", "2")
    assert result.exit_code == 2  # --last and --limit are one or the other, following or not
    monkeypatch.setattr(events_cmd, "sleep", _interrupt_after(meanwhile))
    followed = at80(runner, live.admin, "events", "--last", "1", "--follow")
    assert followed.exit_code == 130
    assert _subjects(followed.stdout) == ["late2", "next"]


def _interrupt_after(first: Any) -> Any:
    calls: list[float] = []

    def wait(seconds: float) -> None:
        calls.append(seconds)
        if len(calls) > 1:
            raise KeyboardInterrupt
        first(seconds)

    return wait


def test_an_unknown_type_is_refused_listing_the_known_types(runner: CliRunner, live: Live) -> None:
    refused = at80(runner, live.admin, "events", "--type", "ledger.book")
    assert refused.exit_code == 1 and refused.stdout == ""
    assert "INVALID_INPUT: --type 'ledger.book' is not an event this server logs; known: " in refused.stderr
    assert "ledger.booked" in refused.stderr and "Traceback" not in refused.stderr
    as_json = at80(runner, live.acme, "events", "--type", "ledger.book", "--json")
    error = json.loads(as_json.stderr)["error"]
    assert error["code"] == "INVALID_INPUT" and "ledger.booked" in error["details"]["accepted"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--since", "yesterday"], "neither a time"),
        (["--since", "2026-13-01T00:00Z"], "is not an ISO 8601 time"),
        (["--since", "0m"], "neither a time"),
        (["--last", "0"], "--last"),
        (["--last", "1001"], "--last"),
        (["--last", "3", "--limit", "3"], "give one of them"),
    ],
)
def test_bad_since_or_last_is_a_usage_error(
    runner: CliRunner, live: Live, args: list[str], says: str
) -> None:
    result = at80(runner, live.admin, "events", *args)
    assert result.exit_code == 2, result.output
    assert says in result.stderr and "Traceback" not in result.output


def test_help_at_80_columns_names_since_and_last(runner: CliRunner) -> None:
    shown = runner.invoke(app, ["events", "--help"], env=WIDE)
    assert shown.exit_code == 0
    assert "--since" in shown.stdout and "--last" in shown.stdout and "--limit" in shown.stdout
