"""`better-compute replay` against the real app (the client's transport hands each request to the
app in-process): files read as YAML, both policy sets side by side with the differences, and a
refusal told in the command's terms."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from tests.builders import T0
from tests.cli.test_resources_cmd import Live, live, run
from tests.service.ops.test_replay import at, fleet_file, what_if_demand

__all__ = ["live"]


def files(tmp_path: Path) -> dict[str, str]:
    grant = {"tenantId": "globex", "poolId": "p1", "class": "gpu", "limit": 8}
    batch = {"name": "batch", "priority": 1, "preemptible": True}
    price = {"meter": "gpu.h100.hours", "perHour": "2.50", "currency": "USD"}
    floor = {
        "tenantId": "acme",
        "deviceClass": "h100",
        "scope": "cluster",
        "clusterId": "c1",
        "guaranteedDevices": 8,
        "floorDevices": 4,
    }
    contents = {
        "demand": what_if_demand(),
        "fleet": fleet_file(),
        "policy": {"priorityClasses": [batch], "quotas": [grant], "prices": [price]},
        "against": {"priorityClasses": [batch], "quotas": [grant, floor], "prices": [price]},
    }
    paths = {}
    for name, content in contents.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(content))
        paths[name] = str(path)
    return paths


def test_replay_prints_both_policy_sets_and_what_the_floor_changes(
    runner: CliRunner, live: Live, tmp_path: Path
) -> None:
    f = files(tmp_path)
    args = [
        "replay",
        "--since",
        T0.isoformat(),
        "--until",
        at(360).isoformat(),
        "--demand",
        f["demand"],
        "--fleet",
        f["fleet"],
        "--policy",
        f["policy"],
        "--against",
        f["against"],
    ]
    shown = run(runner, live.admin, *args, "-o", "wide")
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[0] == "replay of 2 request(s) from file, 2026-12-01 09:00:00Z to 2026-12-01 15:00:00Z"
    rows = [line.split() for line in lines]
    # the what-if of tests/service/ops/test_replay.py, whose docstring works it out by hand
    waiting = ["8.00", "(insufficient_capacity", "8.00)"]
    assert ["policy", "acme", "1", "0", "12.00", *waiting, "2h", "2h", "0", "30.00", "USD"] in rows
    assert ["policy", "globex", "1", "0", "24.00", "0.00", "0s", "0s", "0", "60.00", "USD"] in rows
    assert ["against", "acme", "1", "0", "20.00", "0.00", "0s", "0s", "0", "50.00", "USD"] in rows
    assert ["against", "globex", "1", "0", "16.00", *waiting, "0s", "0s", "4", "40.00", "USD"] in rows
    assert "policy: fragmentation 0.0% of free GPU capacity;" in shown.stdout
    diff = lines.index("against less policy:")
    assert rows[diff + 2 :] == [
        ["(all)", "0.00", "0.00", "0s", "-2h", "+4", "0.00"],
        ["acme", "+8.00", "-8.00", "-2h", "-2h", "0", "+20.00"],
        ["globex", "-8.00", "+8.00", "0s", "0s", "+4", "-20.00"],
    ]
    as_json = json.loads(run(runner, live.admin, *args, "--json").stdout)
    assert as_json["differences"]["globex"]["preemptions"] == 4
    assert as_json["differences"]["acme"]["waitP50Seconds"] == -7200.0


def test_replay_tells_a_tenant_token_and_a_backwards_window_apart(runner: CliRunner, live: Live) -> None:
    refused = run(runner, live.acme, "replay", "--since", T0.isoformat(), "--until", at(60).isoformat())
    assert refused.exit_code == 1
    assert "FORBIDDEN" in refused.stderr
    backwards = run(runner, live.admin, "replay", "--since", at(60).isoformat(), "--until", T0.isoformat())
    assert backwards.exit_code == 1
    assert "INVALID_INPUT" in backwards.stderr and "before it begins" in backwards.stderr
