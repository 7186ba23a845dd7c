"""Alibaba's openb pod and node lists read into our terms: tasks as device lines, nodes as GPUs of a
named model split into slots (docs/traces.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from better_compute.domain.catalog import get_model
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.selectors import EVERYTHING
from better_compute.domain.ledger import choose
from better_compute.domain.ops.traces import (
    TraceTask,
    mig_profile_for,
    mig_requests,
    parse_nodes,
    parse_pods,
    slot_atoms,
    slot_requests,
    slots_for,
)
from better_compute.domain.placement.fragmentation import TaskShape

TRACES = Path(__file__).parent / "traces"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"


def pods() -> list[TraceTask]:
    with (TRACES / "openb_pod_list_small.csv").open(newline="") as f:
        return parse_pods(f)


def test_pods_are_read_in_the_file_order_with_their_shapes() -> None:
    tasks = pods()
    assert [t.name for t in tasks] == [f"openb-pod-{i:04}" for i in range(7)]
    assert [t.shape for t in tasks] == [
        None,
        TaskShape(gpus=1),
        TaskShape(milli=600),
        TaskShape(milli=500),
        TaskShape(gpus=4),
        TaskShape(milli=400, models=("T4",)),
        TaskShape(milli=300),
    ]
    pending = tasks[4]
    assert (pending.pod_phase, pending.creation_time, pending.deletion_time, pending.scheduled_time) == (
        "Pending",
        40,
        None,
        None,
    )
    assert sum(t.gpu_demand_milli for t in tasks) == 6800


def test_nodes_are_gpus_of_the_named_model() -> None:
    with (TRACES / "openb_node_list_gpu_node.csv").open(newline="") as f:
        nodes = parse_nodes(f)
    assert [(n.name, n.gpus, n.model) for n in nodes] == [
        ("openb-node-a", 2, "T4"),
        ("openb-node-b", 4, "G2"),
    ]
    atoms = slot_atoms(nodes, replicas=20)
    assert len(atoms) == 6 * 20
    first = atoms[0]
    assert (first.id, first.gpu_id, first.node, first.cls, first.attributes["gpuModel"]) == (
        "openb-node-a/gpu0/slot:0",
        "openb-node-a/gpu0",
        "openb-node-a",
        "gpu.slot",
        "T4",
    )


def test_the_multigpu_lists_without_the_trailing_columns_are_read() -> None:
    # openb_pod_list_multigpu*.csv stop after gpu_milli.
    lines = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli", "openb-pod-0000,12000,16384,8,1000"]
    (task,) = parse_pods(lines)
    assert (task.shape, task.gpu_spec, task.creation_time) == (TaskShape(gpus=8), (), None)


def test_a_share_is_the_fewest_slots_that_give_it_all_on_one_gpu() -> None:
    assert [slots_for(m) for m in (50, 51, 470, 810, 999)] == [1, 2, 10, 17, 20]
    assert slots_for(470, replicas=100) == 47
    share = TraceTask("p", 1000, 1, 1, 470, gpu_spec=("V100M16", "V100M32"))
    (line,) = slot_requests(share)
    assert (line.cls, line.count, line.same_gpu) == ("gpu.slot", 10, True)
    (expr,) = line.selector.match_expressions
    assert (expr.key, expr.op, expr.values) == ("gpuModel", "In", ("V100M16", "V100M32"))


def test_whole_gpus_are_all_of_one_gpus_slots_each() -> None:
    lines = slot_requests(TraceTask("p", 1000, 1, 2, 1000), replicas=20)
    assert [(r.count, r.same_gpu, r.selector) for r in lines] == [(20, True, EVERYTHING)] * 2
    assert slot_requests(TraceTask("cpu", 1000, 1, 0, 0)) == []


def test_a_whole_gpu_task_is_never_split_over_gpus_by_choose() -> None:
    with (TRACES / "openb_node_list_gpu_node.csv").open(newline="") as f:
        atoms = slot_atoms(parse_nodes(f), replicas=4)
    # Half of each GPU of node b is busy: two slots free on each of four GPUs, eight in all, yet no
    # GPU can be a whole GPU; node a's T4s can.
    busy = {f"openb-node-b/gpu{g}/slot:{s}" for g in range(4) for s in (0, 1)}
    free = [a for a in atoms if a.id not in busy]
    busy_by_gpu = {f"openb-node-b/gpu{g}": 2 for g in range(4)}
    result = choose.choose(slot_requests(TraceTask("p", 1, 1, 1, 1000), replicas=4), free, busy_by_gpu)
    assert isinstance(result, choose.Chosen)
    assert {a.rsplit("/", 1)[0] for a in result.atom_ids} == {"openb-node-a/gpu0"}
    two = choose.choose(slot_requests(TraceTask("p", 1, 1, 3, 1000), replicas=4), free, busy_by_gpu)
    assert isinstance(two, choose.NoFit)
    assert "wanted on one GPU" in two.reason


def test_a_share_as_the_cheapest_mig_instance_that_gives_it() -> None:
    a100 = get_model("A100-80GB")
    # A100's seven compute slices: 1g gives 142.9 milli, 2g 285.7, 3g 428.6, 4g 571.4, 7g all.
    assert [mig_profile_for(m, a100).name for m in (50, 142, 143, 285, 286, 460, 580, 810, 1000)] == [
        "1g.10gb",
        "1g.10gb",
        "2g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
        "7g.80gb",
        "7g.80gb",
    ]
    # gpu_spec names the trace's models, which no GPU is under the MIG mapping: it is left out
    (line,) = mig_requests(TraceTask("p", 1, 1, 1, 460, gpu_spec=("G2",)), a100)
    assert (line.cls, line.count) == ("gpu.mig", 1)
    assert [(e.key, e.values) for e in line.selector.match_expressions] == [("migProfile", ("4g.40gb",))]
    (whole,) = mig_requests(TraceTask("p", 1, 1, 2, 1000), a100)
    assert (whole.count, whole.selector.match_expressions[0].values) == (2, ("7g.80gb",))
    with pytest.raises(InvalidInput, match="does not support MIG"):
        mig_profile_for(500, get_model("L40S-48GB"))


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("p,1,1,2,500,,,,,,", "line 2: a share of one GPU \\(gpu_milli 500\\) with num_gpu 2"),
        ("p,1,1,0,300,,,,,,", "line 2: gpu_milli 300 with num_gpu 0"),
        ("p,1,1,1,0,,,,,,", "line 2: num_gpu 1 with gpu_milli 0"),
        ("p,1,1,x,1000,,,,,,", "line 2: num_gpu must be a whole number, not 'x'"),
        ("p,1,1,99,1000,,,,,,", "line 2: num_gpu must be from 0 to 64, not 99"),
        ("p,1,1,1,1200,,,,,,", "line 2: gpu_milli must be from 0 to 1000, not 1200"),
        (",1,1,1,1000,,,,,,", "line 2: name is empty"),
    ],
)
def test_a_bad_pod_row_is_refused_with_its_line(row: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_pods([POD_HEADER, row], "pods.csv")


def test_a_file_without_the_columns_is_refused_naming_them() -> None:
    with pytest.raises(InvalidInput, match="the header lacks num_gpu, gpu_milli"):
        parse_pods(["name,cpu_milli,memory_mib", "p,1,1"], "pods.csv")
    with pytest.raises(InvalidInput, match="node list: the header lacks model"):
        parse_nodes(["sn,cpu_milli,memory_mib,gpu", "n,1,1,2"])


def test_a_node_listed_twice_or_without_a_model_is_refused() -> None:
    header = "sn,cpu_milli,memory_mib,gpu,model"
    with pytest.raises(InvalidInput, match="line 3: node n is listed twice"):
        parse_nodes([header, "n,1,1,2,T4", "n,1,1,2,T4"])
    with pytest.raises(InvalidInput, match="line 2: node n has 2 GPUs and no model"):
        parse_nodes([header, "n,1,1,2,nan"])
    # The all-node list's CPU nodes (gpu 0, model nan) are read, with no GPUs.
    (cpu,) = parse_nodes([header, "c,32000,262144,0,nan"])
    assert (cpu.gpus, cpu.model, cpu.gpu_ids) == (0, "", ())


def test_replicas_out_of_range_are_refused() -> None:
    with pytest.raises(InvalidInput, match="replicas must be from 1 to 1000"):
        slots_for(500, replicas=0)
