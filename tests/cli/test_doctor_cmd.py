"""`better-compute doctor` against the real app on both stores (the client's transport hands each
request to the app in-process): a table or JSON, exit status 1 while anything is found."""

from __future__ import annotations

import json

from typer.testing import CliRunner

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
    assert "1 finding (checked 2026-12-01 09:00Z)" in shown.stdout
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
    assert well.stdout.strip() == "no findings (checked 2026-12-01 09:00Z)"
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
