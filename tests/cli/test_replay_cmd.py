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
    rows += [f"pod-{i},1000,1024,1,100" for i in range(10_001)]
    (tmp_path / "openb_pod_list_big.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "openb_node_list_gpu_node.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,1,T4\n")
    big = ["replay", "--since", T0.isoformat(), "--until", at(60).isoformat()]
    big += ["--trace", str(tmp_path / "openb_pod_list_big.csv")]
    refused = run(runner, live.admin, *big)
    assert refused.exit_code == 2
    assert "10,001 tasks asking for GPUs" in refused.stderr and "at most 10,000 requests" in refused.stderr
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


def test_replay_of_the_synthetic_trace_on_mig_grants_and_refuses_what_is_worked_out_by_hand(
    runner: CliRunner, live: Live
) -> None:
    """The small trace with every GPU an A100-80GB (6 GPUs). Its shares map to one instance each
    (600 milli, above 4/7 of a GPU: 7g.80gb; 500: 4g.40gb; 400 and 300: 3g.40gb), its whole GPUs to
    7g.80gb instances (tests/domain/ops/test_trace_mig.py works out the default layouts: all-7g.80gb on
    both nodes). A replay counts a MIG instance as its profile's compute slices over its GPU's 7.

    All-7g.80gb (one instance a GPU, each a whole GPU): pod-0001 (190 s) and pod-0002 (280 s) take
    two GPUs and pod-0004 the other four (4 x 3,560 s): 14,710 GPU-seconds (4.09 GPU-hours); the
    4g.40gb and 3g.40gb shares find no such instance and are refused: 370 x 4/7 + (450 + 540) x 3/7
    = 4,450/7 (0.18).

    --mig-layout mixed:4g.40gb+3g.40gb (a 4g.40gb, 4/7 of a GPU, and a 3g.40gb, 3/7, on each GPU):
    the shares are granted, 370 x 4/7 + (450 + 540) x 3/7 = 4,450/7 GPU-seconds (0.18); every
    7g.80gb ask (a whole GPU, which no GPU of this layout has) is refused: 190 + 280 + 4 x 3,560 =
    14,710 (4.09).
    """
    head = (
        "trace openb_pod_list_small.csv: 6 task(s) asking for GPUs (1 without GPUs left out) on 2 GPU"
        " node(s) of openb_node_list_gpu_node.csv, each GPU an A100-80GB in MIG layout"
    )
    spec = "; gpu_spec left out of 1 task(s): no GPU is of a trace model"
    cases = [
        ([], " all-7g.80gb on 6 GPU(s) (chosen from the demand's profile mix)", 14710, 4450 / 7, {3, 5, 6}),
        (
            ["--mig-layout", "mixed:3g.40gb+4g.40gb"],
            " mixed:4g.40gb+3g.40gb on 6 GPU(s) (--mig-layout)",
            4450 / 7,
            14710,
            {1, 2, 4},
        ),
    ]
    for extra, layout, granted, refused, refused_pods in cases:
        args = trace_args("--as-mig", "a100-80gb", *extra)
        shown = run(runner, live.admin, *args, "-o", "wide")
        assert shown.exit_code == 0, shown.output
        assert shown.stdout.splitlines()[0] == head + layout + spec
        answer = json.loads(run(runner, live.admin, *args, "--json").stdout)
        overall = answer["runs"][0]["overall"]
        assert overall["gpuHoursGranted"] == pytest.approx(granted / 3600, abs=1e-6)
        assert overall["gpuHoursRefused"] == {
            "insufficient_capacity": pytest.approx(refused / 3600, abs=1e-6)
        }
        fates = {o["key"]: o.get("refusedReason") for o in answer["runs"][0]["outcomes"]}
        assert {int(k[-1]) for k, reason in fates.items() if reason} == refused_pods


def test_replay_on_mig_gives_each_node_the_layout_chosen_for_it(
    runner: CliRunner, live: Live, tmp_path: Path
) -> None:
    """Two whole GPUs (7g.80gb) and three 400-milli shares (3g.40gb) over three 1-GPU nodes: n1
    takes all-7g.80gb (7 slices served against all-3g.40gb's 2 x 3 = 6), n2 the same (one 7g.80gb
    still unserved), n3 all-3g.40gb (6 against 0). The pool names all-7g.80gb, n3 keeps its own: the
    whole GPUs take n1's and n2's 7g.80gb, two shares n3's two 3g.40gb, and the third share finds no
    3g.40gb left: refused."""
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time"]
    rows += ["w1,1,1,1,1000,,LS,Running,0,", "w2,1,1,1,1000,,LS,Running,1,"]
    rows += [f"s{i},1,1,1,400,,LS,Running,{i + 1}," for i in (1, 2, 3)]
    (tmp_path / "openb_pod_list_mix.csv").write_text("\n".join(rows) + "\n")
    nodes = "sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,1,T4\nn2,1,1,1,G2\nn3,1,1,1,T4\n"
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(nodes)
    args = ["replay", "--since", T0.isoformat(), "--until", at(60).isoformat()]
    args += ["--trace", str(tmp_path / "openb_pod_list_mix.csv"), "--as-mig", "H100-80GB"]
    shown = run(runner, live.admin, *args)
    assert shown.exit_code == 0, shown.output
    assert "MIG layout all-7g.80gb on 2 GPU(s), all-3g.40gb on 1 GPU(s) (chosen" in shown.stdout
    answer = json.loads(run(runner, live.admin, *args, "--json").stdout)
    fates = {o["key"]: o.get("refusedReason") for o in answer["runs"][0]["outcomes"]}
    assert fates == {"w1": None, "w2": None, "s1": None, "s2": None, "s3": "insufficient_capacity"}


@pytest.mark.parametrize(
    ("extra", "flag", "says"),
    [
        (["--as-mig", "L40S-48GB"], "--as-mig", "L40S-48GB does not support MIG"),
        (["--as-mig", "T4"], "--as-mig", "unknown GPU model 'T4'"),
        (["--as-mig", "A100-80GB", "--mig-layout", "mixed:2x4g.40gb"], "--mig-layout", "allows at most 1"),
        (["--as-mig", "A100-80GB", "--mig-layout", "all-disabled"], "--mig-layout", "turns MIG off"),
        (["--as-mig", "A100-80GB", "--slot-replicas", "10"], "--as-mig", "give one"),
        (["--mig-layout", "all-7g.80gb"], "--mig-layout", "goes with --as-mig"),
    ],
)
def test_replay_on_mig_refuses_what_it_cannot_replay_naming_the_flag(
    runner: CliRunner, live: Live, extra: list[str], flag: str, says: str
) -> None:
    refused = run(runner, live.admin, *trace_args(*extra))
    assert refused.exit_code == 2
    text = " ".join(refused.stderr.split())
    assert flag in text and says in text, refused.stderr


def test_replay_refuses_the_trace_options_without_a_trace(runner: CliRunner, live: Live) -> None:
    window = ["replay", "--since", T0.isoformat(), "--until", at(60).isoformat()]
    for extra in (["--as-mig", "A100-80GB"], ["--slot-replicas", "10"]):
        refused = run(runner, live.admin, *window, *extra)
        assert refused.exit_code == 2
        assert "go with --trace" in " ".join(refused.stderr.split())
