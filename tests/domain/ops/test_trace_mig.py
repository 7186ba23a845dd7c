"""A trace on MIG: every GPU a GPU of one MIG-capable model, each node's layout chosen so the fleet's
instances follow the demand's profile mix, worked out by hand (docs/traces.md#replaying-a-trace-on-mig).

On an A100-80GB (7 compute slices) a share maps to the cheapest plain instance that gives it: up
to 142 milli 1g.10gb, 285 2g.20gb, 428 3g.40gb, 571 4g.40gb, above that 7g.80gb."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from better_compute.domain.catalog import get_model
from better_compute.domain.kernel.errors import DomainError, InvalidInput
from better_compute.domain.ops.trace_mig import (
    MigLayouts,
    default_layouts,
    given_layout,
    layout_text,
    mig_model,
    profile_mix,
)
from better_compute.domain.ops.trace_replay import trace_demand, trace_mig_fleet
from better_compute.domain.ops.traces import TraceNode, TraceTask, parse_nodes, parse_pods
from tests.builders import T0

TRACES = Path(__file__).parent / "traces"
A100 = get_model("A100-80GB")


def small() -> tuple[list[TraceTask], list[TraceNode]]:
    with (TRACES / "openb_pod_list_small.csv").open(newline="") as f:
        tasks = parse_pods(f)
    with (TRACES / "openb_node_list_gpu_node.csv").open(newline="") as f:
        nodes = parse_nodes(f)
    return tasks, nodes


def task(name: str, num_gpu: int, milli: int) -> TraceTask:
    return TraceTask(name, 1000, 1024, num_gpu, milli, creation_time=0, deletion_time=60)


def node(name: str, gpus: int) -> TraceNode:
    return TraceNode(name, 1000, 1024, gpus, "T4")


def test_the_small_traces_profile_mix_and_its_layouts_worked_by_hand() -> None:
    """1 GPU, 600 milli (above 571: a 7g.80gb) and 4 GPUs are six 7g.80gb; 500 a 4g.40gb; 400 and
    300 two 3g.40gb. Node a (2 GPUs) serves most with all-7g.80gb: 2 x 7 = 14 slices of the unserved
    (mixed:4g.40gb+3g.40gb: 4 + 2 x 3 = 10; all-3g.40gb: 2 x 3 = 6), leaving four 7g.80gb; node b
    (4 GPUs) again: 4 x 7 = 28 (against 10)."""
    tasks, nodes = small()
    assert profile_mix(tasks, A100) == {"7g.80gb": 6, "4g.40gb": 1, "3g.40gb": 2}
    chosen = default_layouts(tasks, nodes, A100)
    assert chosen.by_node == {"openb-node-a": "all-7g.80gb", "openb-node-b": "all-7g.80gb"}
    assert (chosen.pool_layout, chosen.gpus_by_layout(nodes)) == ("all-7g.80gb", {"all-7g.80gb": 6})


def test_the_layouts_follow_a_mix_of_shares() -> None:
    """Four 400-milli tasks (3g.40gb) and two 500s (4g.40gb). n1 (1 GPU): mixed:4g.40gb+3g.40gb
    serves 3 + 4 = 7 slices, all-3g.40gb 2 x 3 = 6: the mix, leaving three 3g and one 4g; n2 (2
    GPUs): the mix serves 2 x 3 + 4 = 10, all-3g.40gb 3 x 3 = 9 (three left of its four): the mix,
    leaving one 3g; n3: both serve 3, and the mix holds more slices of profiles the demand asks for
    (7 against 6)."""
    tasks = [task(f"s{i}", 1, 400) for i in range(4)] + [task(f"m{i}", 1, 500) for i in range(2)]
    nodes = [node("n1", 1), node("n2", 2), node("n3", 1)]
    chosen = default_layouts(tasks, nodes, A100)
    assert chosen.by_node == {n.name: "mixed:4g.40gb+3g.40gb" for n in nodes}


def test_a_fleet_larger_than_the_demand_repeats_its_mix() -> None:
    """One whole GPU (7g.80gb) and two 400s (3g.40gb) over three 1-GPU nodes: n1 all-7g.80gb (7
    slices against all-3g.40gb's 6), n2 all-3g.40gb (the two 3g.40gb, 6), and with nothing left
    unserved n3 starts over on the whole demand: all-7g.80gb. Two GPUs of three have it: the pool's
    layout; n2 keeps its own."""
    tasks = [task("w", 1, 1000), task("s1", 1, 400), task("s2", 1, 400), task("cpu", 0, 0)]
    nodes = [node("n1", 1), node("n2", 1), node("n3", 1), TraceNode("cpu-only", 1, 1, 0, "")]
    chosen = default_layouts(tasks, nodes, A100)
    assert chosen.by_node == {"n1": "all-7g.80gb", "n2": "all-3g.40gb", "n3": "all-7g.80gb"}
    assert chosen.pool_layout == "all-7g.80gb"
    fleet = trace_mig_fleet(nodes, A100, chosen)
    (pool,) = fleet["pools"]
    assert (pool["mode"], pool["policy"], pool["nodes"]) == (
        "mig",
        {"migLayout": "all-7g.80gb"},
        ["n1", "n2", "n3"],
    )
    assert "gpu.mig" in pool["ownerQuota"]
    listed = fleet["clusters"][0]["nodes"]
    assert listed[0] == {"name": "n1", "gpus": {"model": "A100-80GB", "count": 1}, "nvlink": False}
    assert listed[1] == {
        "name": "n2",
        "gpus": {"model": "A100-80GB", "count": 1, "migLayout": "all-3g.40gb"},
        "nvlink": False,
        "carriesPoolLayout": False,
    }
    assert "gpuModels" not in fleet  # every GPU is a catalog model's


def test_a_demand_asking_for_no_gpu_gives_whole_gpu_instances() -> None:
    chosen = default_layouts([task("cpu", 0, 0)], [node("n1", 2)], A100)
    assert chosen.by_node == {"n1": "all-7g.80gb"}


def test_mig_demand_lines_ask_for_one_profile_each_and_leave_gpu_spec_out() -> None:
    tasks = [task("w", 2, 1000), TraceTask("t4", 1, 1, 1, 250, gpu_spec=("T4",), creation_time=0)]
    mapped = trace_demand(tasks, T0, T0 + timedelta(hours=1), mig=A100)
    whole, share = mapped.demand["requests"]
    assert whole["devices"] == [
        {
            "class": "gpu.mig",
            "count": 2,
            "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["7g.80gb"]}]},
        }
    ]
    assert share["devices"] == [
        {
            "class": "gpu.mig",
            "count": 1,
            "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["2g.20gb"]}]},
        }
    ]


def test_the_model_must_be_a_mig_catalog_model_and_the_layout_must_place_on_it() -> None:
    assert mig_model("h100-80gb").id == "H100-80GB"
    with pytest.raises(InvalidInput, match="L40S-48GB does not support MIG: --as-mig takes"):
        mig_model("L40S-48GB")
    with pytest.raises(InvalidInput, match="unknown GPU model 'T4'"):
        mig_model("T4")
    assert given_layout("MIXED:3g.40gb+4g.40gb", A100) == "mixed:4g.40gb+3g.40gb"
    with pytest.raises(DomainError, match="allows at most 1"):
        given_layout("mixed:2x4g.40gb", A100)
    with pytest.raises(DomainError, match="does not exist on A100-80GB"):
        given_layout("all-1g.12gb", A100)
    with pytest.raises(InvalidInput, match="turns MIG off"):
        given_layout("all-disabled", A100)


def test_a_layout_is_written_as_all_when_it_is_as_many_of_one_profile_as_fit() -> None:
    assert layout_text((("3g.40gb", 2),), A100) == "all-3g.40gb"
    assert layout_text((("3g.40gb", 1),), A100) == "mixed:3g.40gb"
    assert layout_text((("1g.10gb", 4), ("3g.40gb", 1)), A100) == "mixed:3g.40gb+4x1g.10gb"
    given = MigLayouts.of({"n1": "all-3g.40gb"}, [node("n1", 2)])
    assert given.pool_layout == "all-3g.40gb"
