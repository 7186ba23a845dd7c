"""`better-compute replay` against the real app (the client's transport hands each request to the
app in-process): files read as YAML, both policy sets side by side with the differences, and a
refusal told in the command's terms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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


TRACES = Path(__file__).parents[1] / "domain" / "ops" / "traces"
SMALL = str(TRACES / "openb_pod_list_small.csv")


def trace_args(*extra: str) -> list[str]:
    return ["replay", "--since", T0.isoformat(), "--until", at(60).isoformat(), "--trace", SMALL, *extra]


def test_replay_of_the_synthetic_trace_grants_and_refuses_the_gpu_hours_worked_out_by_hand(
    runner: CliRunner, live: Live
) -> None:
    """The small trace (tests/domain/ops/traces) over its node list (2 T4s and 4 G2s, 20 slots a
    GPU), in an hour from T0; times are seconds after T0, the trace's first creation:

    - pod-0000 asks for no GPU: left out;
    - pod-0001, 1 GPU, 10 s to 200 s: 190 GPU-seconds;
    - pod-0002, 600 milli = 12 slots on one GPU, 20 s to 300 s: 12/20 x 280 = 168;
    - pod-0003, 500 milli = 10 slots, 30 s to 400 s: 10/20 x 370 = 185 (12 + 10 > 20: another GPU);
    - pod-0004, 4 whole GPUs from 40 s, no deletion: only 3 GPUs are wholly free, refused: 4 GPUs
      for the 3,560 s left, 14,240 GPU-seconds refused for capacity;
    - pod-0005, 400 milli = 8 slots on a T4, 50 s to 500 s: a T4 has room, 8/20 x 450 = 180;
    - pod-0006, 300 milli = 6 slots, 60 s to 600 s: 6/20 x 540 = 162.

    Granted 885 GPU-seconds (0.25 GPU-hours), refused 14,240 (3.96 GPU-hours), one request refused.
    """
    shown = run(runner, live.admin, *trace_args("-o", "wide"))
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[0] == (
        "trace openb_pod_list_small.csv: 6 task(s) asking for GPUs (1 without GPUs left out) on 2 GPU"
        " node(s) of openb_node_list_gpu_node.csv, 20 slots a GPU"
    )
    assert lines[1] == "replay of 6 request(s) from file, 2026-12-01 09:00:00Z to 2026-12-01 10:00:00Z"
    rows = [line.split() for line in lines]
    refused = ["3.96", "(insufficient_capacity", "3.96)"]
    assert ["policy", "trace", "6", "1", "0.25", *refused] == rows[3][:8]
    answer = json.loads(run(runner, live.admin, *trace_args("--json")).stdout)
    overall = answer["runs"][0]["overall"]
    assert overall["gpuHoursGranted"] == pytest.approx(885 / 3600, abs=1e-6)
    assert overall["gpuHoursRefused"] == {"insufficient_capacity": pytest.approx(14240 / 3600, abs=1e-6)}
    fates = {o["key"]: o for o in answer["runs"][0]["outcomes"]}
    assert fates["openb-pod-0004"]["refusedReason"] == "insufficient_capacity"


def test_replay_of_a_trace_past_the_request_limit_is_refused_naming_it_and_first_replays_a_part(
    runner: CliRunner, live: Live, tmp_path: Path
) -> None:
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli"]
    rows += [f"pod-{i},1000,1024,1,100" for i in range(5001)]
    (tmp_path / "openb_pod_list_big.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "openb_node_list_gpu_node.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,1,T4\n")
    big = ["replay", "--since", T0.isoformat(), "--until", at(60).isoformat()]
    big += ["--trace", str(tmp_path / "openb_pod_list_big.csv")]
    refused = run(runner, live.admin, *big)
    assert refused.exit_code == 2
    assert "5,001 tasks asking for GPUs" in refused.stderr and "at most 5,000 requests" in refused.stderr
    assert "--first N" in refused.stderr
    part = run(runner, live.admin, *big, "--first", "30", "--json")
    assert part.exit_code == 0, part.output
    overall = json.loads(part.stdout)["runs"][0]["overall"]
    # 30 tasks of 100 milli (2 slots of 20) from the same instant to the window's end: 10 fit the T4
    assert (overall["requests"], overall["refusedRequests"]) == (30, 20)


def test_replay_refuses_a_trace_with_a_demand_file(runner: CliRunner, live: Live, tmp_path: Path) -> None:
    f = files(tmp_path)
    refused = run(runner, live.admin, *trace_args("--demand", f["demand"]))
    assert refused.exit_code == 2
    assert "leave out --demand and --fleet" in refused.stderr
