"""`better-compute doctor` against the real app on both stores (the client's transport hands each
request to the app in-process): a table or JSON, exit status 1 while anything is found."""

from __future__ import annotations

import json
from datetime import timedelta

from sqlalchemy import insert
from typer.testing import CliRunner

from better_compute.storage.kernel.tables import capacity_mig_layouts
from better_compute.storage.store import Store
from tests.builders import T0
from tests.cli.test_resources_cmd import Live, live, run

__all__ = ["live"]


def _give_mig_quota(runner: CliRunner, live: Live) -> None:
    quota = {"tenantId": "acme", "poolId": "p1", "class": "gpu.mig", "limit": 4}
    assert run(runner, live.admin, "api", "quotas.set", "--json", json.dumps(quota)).exit_code == 0


def test_doctor_prints_findings_and_exits_1_then_0_once_all_is_well(runner: CliRunner, live: Live) -> None:
    shown = run(runner, live.admin, "doctor", "-o", "wide")
    assert shown.exit_code == 1, shown.output
    row = next(line for line in shown.stdout.splitlines() if "pool.fractional-without-quota" in line)
    assert row.split()[:2] == ["pool.fractional-without-quota", "p1"]
    assert "1 finding (checked 2026-12-01 09:00:00Z)" in shown.stdout
    answer = run(runner, live.admin, "doctor", "--json")
    assert answer.exit_code == 1
    parsed = json.loads(answer.stdout)
    assert [(f["code"], f["subject"]) for f in parsed["findings"]] == [
        ("pool.fractional-without-quota", "p1")
    ]
    assert "QUOTA_EXCEEDED" in parsed["findings"][0]["detail"]
    _give_mig_quota(runner, live)
    well = run(runner, live.admin, "doctor", "--silent-minutes", "60")
    assert well.exit_code == 0, well.output
    assert well.stdout.strip() == "no findings (checked 2026-12-01 09:00:00Z)"
    assert json.loads(run(runner, live.admin, "doctor", "--json").stdout)["findings"] == []


def test_doctor_refuses_a_tenant_and_a_bad_window(runner: CliRunner, live: Live) -> None:
    refused = run(runner, live.acme, "doctor")
    assert refused.exit_code == 1
    assert "FORBIDDEN: doctor.run needs a fleet-admin token" in refused.stderr
    as_json = run(runner, live.acme, "doctor", "--json")
    assert as_json.exit_code == 1
    assert json.loads(as_json.stderr)["error"]["code"] == "FORBIDDEN"
    bad = run(runner, live.admin, "doctor", "--silent-minutes", "0")
    assert bad.exit_code == 2
    assert "--silent-minutes" in bad.output


def test_doctor_mig_waiting_days_sets_how_long_a_layout_change_may_wait(
    runner: CliRunner, live: Live, store: Store
) -> None:
    """A change scheduled 30 days after its request is `capacity.mig.waiting` past the default 7
    days, not with `--mig-waiting-days 30`; the option's range is checked before any call."""
    _give_mig_quota(runner, live)
    row = {
        "node_id": "n",
        "pool_id": "p1",
        "frozen_layout": "all-1g.10gb",
        "pending_layout": "all-3g.40gb",
        "state": "scheduled",
        "requested_at": T0,
        "scheduled_from": T0 + timedelta(days=30),
    }
    with store.engine.begin() as conn:
        conn.execute(insert(capacity_mig_layouts).values(row))
    waiting = run(runner, live.admin, "doctor", "--json")
    assert waiting.exit_code == 1, waiting.output
    (finding,) = json.loads(waiting.stdout)["findings"]
    assert (finding["code"], finding["subject"]) == ("capacity.mig.waiting", "n")
    assert "30 days after its request" in finding["detail"]
    assert run(runner, live.admin, "doctor", "--mig-waiting-days", "30").exit_code == 0
    bad = run(runner, live.admin, "doctor", "--mig-waiting-days", "0")
    assert bad.exit_code == 2 and "--mig-waiting-days" in bad.output
