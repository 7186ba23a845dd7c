"""`bench/replay.py` on a small trace worked by hand: our admission's choice, FGD, best-fit and
random-fit, the marks it reads and the JSON it ends with.

The trace (tests/domain/ops/traces): node a has two T4s, node b four G2s (6 GPUs). The tasks, in
order: a CPU-only task (skipped), 1 whole GPU, 600 milli, 500 milli, 4 whole GPUs, 400 milli on a T4,
300 milli: 6,800 milli asked of 6,000.

By hand, for ours (10 slots a GPU, the exact slot for shares in hundreds): the whole GPU takes
a/gpu0 (the first GPU in the pool's order), 600 takes a/gpu1 (equal untouched GPUs: the first),
500 cannot go on a/gpu1 (4 slots left) and takes b/gpu0; 4 whole GPUs find three on b and are
refused (first refusal at 2,100 / 6,000); 400 on a T4 fills a/gpu1; 300 goes to the busiest GPU that
holds it, b/gpu0, leaving 200 there. FGD (worked out in the same file's comments) and best-fit make
the same choices here; FGD keeps node b whole for the 4-GPU task just the same, and fails it too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench import replay

from better_compute.domain.ops.traces import TraceNode, TraceTask, parse_nodes, parse_pods

TRACES = Path(__file__).parent / "traces"


def load() -> tuple[list[TraceTask], list[TraceNode]]:
    with (TRACES / "openb_pod_list_small.csv").open(newline="") as f:
        tasks = parse_pods(f)
    with (TRACES / "openb_node_list_gpu_node.csv").open(newline="") as f:
        nodes = parse_nodes(f)
    return tasks, nodes


def test_ours_fgd_and_bestfit_pack_the_small_trace_as_worked_by_hand() -> None:
    tasks, nodes = load()
    demand = replay.task_distribution(tasks)
    assert replay.exact_replicas(tasks) == 10
    ours = replay.Ours(nodes, 10, demand)
    policies: list[replay.Policy] = [ours, replay.Fgd(nodes, demand), replay.BestFit(nodes)]
    for policy in policies:
        run = replay.replay(policy, tasks, 6000, demand, [n.model for n in nodes])
        assert policy.free_milli() == [[0, 0], [200, 1000, 1000, 1000]], policy.name
        assert run.first_refusal == pytest.approx(2100 / 6000)
        # 90% of 6,800 is reached when the T4 task arrives (6,500 asked), 100% at the last.
        assert run.marks == pytest.approx({"90%": 2500 / 6000, "95%": 2500 / 6000, "100%": 2800 / 6000})
        assert (run.placed, run.refused) == (5, 1)
    assert (ours.spread, ours.slots_taken) == (0, 28)


def test_the_fragmentation_gradient_keeps_the_big_node_whole_as_fgd_does() -> None:
    # Node n1 (four G2s) comes first in the pool's order, then n2 (two T4s); a whole GPU arrives,
    # then four whole GPUs. Every untouched GPU is equal by rule 2; without the request distribution
    # the smallest id (n1's first GPU) is taken and the 4-GPU task is refused. With it, the tie goes
    # where the node's fragmentation grows least: on n2 (its two GPUs could not serve the 4-GPU task
    # anyway, so a GPU taken there strands nothing more), as FGD chooses; n1 stays whole.
    tasks = parse_pods(
        ["name,cpu_milli,memory_mib,num_gpu,gpu_milli", "t1,1,1,1,1000", "t2,1,1,4,1000"], "pods"
    )
    nodes = parse_nodes(["sn,cpu_milli,memory_mib,gpu,model", "n1,1,1,4,G2", "n2,1,1,2,T4"], "nodes")
    demand = replay.task_distribution(tasks)
    kept = [[0, 0, 0, 0], [0, 1000]]
    for policy in (replay.Fgd(nodes, demand), replay.Ours(nodes, 10, demand)):
        run = replay.replay(policy, tasks, 6000, demand, ["G2", "T4"])
        assert (run.placed, policy.free_milli()) == (2, kept), policy.name
    plain = replay.Ours(nodes, 10, None, name="ours-plain")
    run = replay.replay(plain, tasks, 6000, demand, ["G2", "T4"])
    assert (run.placed, plain.free_milli()) == (1, [[0, 1000, 1000, 1000], [1000, 1000]])


def test_every_policy_keeps_within_each_gpu_and_each_tasks_models() -> None:
    tasks, nodes = load()
    demand = replay.task_distribution(tasks)
    for policy in (
        replay.Ours(nodes, 10, demand),
        replay.RandomFit(nodes, seed=3),
        replay.Fgd(nodes, demand, 5),
    ):
        run = replay.replay(policy, tasks, 6000, demand, [n.model for n in nodes])
        free = policy.free_milli()
        assert all(0 <= f <= 1000 for gpus in free for f in gpus)
        placed_milli = 6000 - sum(map(sum, free))
        assert placed_milli == round((run.marks["100%"] or 0) * 6000)


def test_the_last_line_is_json_with_the_five_keys(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.argv", ["replay.py", "--trace", str(TRACES / "openb_pod_list_small.csv")])
    replay.main()
    lines = capsys.readouterr().out.strip().splitlines()
    out = {**json.loads(lines[-2]), **json.loads(lines[-1])}
    assert set(json.loads(lines[-1])) == {
        "allocation_ratio",
        "fgd_allocation_ratio",
        "bestfit_allocation_ratio",
        "random_allocation_ratio",
        "replay_s",
    }
    assert {k: out[k] for k in ("allocation_ratio", "fgd_allocation_ratio", "bestfit_allocation_ratio")} == {
        "allocation_ratio": 0.4667,
        "fgd_allocation_ratio": 0.4667,
        "bestfit_allocation_ratio": 0.4667,
    }
    assert 0 < out["random_allocation_ratio"] <= 0.4667
    assert out["replay_s"] >= 0
    assert out["policies"]["ours"]["first_refusal"] == 0.35


def test_inflation_repeats_the_trace_in_order_until_it_asks_enough() -> None:
    tasks, _ = load()
    # 6,800 milli a pass; 10,000 asked ends inside the second pass, at the 500-milli task (6,800 +
    # 1,000 + 600 + 500 = 8,900, then the 4-GPU task reaches 12,900).
    inflated = replay.inflate(tasks, 10_000)
    assert [t.name for t in inflated] == [t.name for t in tasks] + [t.name for t in tasks[:5]]
    assert replay.inflate(tasks[:1], 10) == tasks[:1]  # a CPU-only trace asks for nothing: once
