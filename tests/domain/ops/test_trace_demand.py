"""A trace's tasks as a replay's demand: times placed from the window's start, compressed into it by
one factor when the trace is longer, and a task without a deletion held to the window's end."""

from __future__ import annotations

from datetime import timedelta

from better_compute.domain.ops.trace_replay import trace_demand, trace_fleet
from better_compute.domain.ops.traces import TraceNode, TraceTask
from tests.builders import T0


def task(
    name: str, created: int | None, deleted: int | None, num_gpu: int = 1, milli: int = 1000
) -> TraceTask:
    return TraceTask(name, 1000, 1024, num_gpu, milli, creation_time=created, deletion_time=deleted)


def test_a_trace_longer_than_the_window_is_compressed_into_it_by_one_factor() -> None:
    tasks = [task("a", 100, 7300), task("b", 3700, None, milli=250), task("c", None, 100)]
    mapped = trace_demand(tasks, T0, T0 + timedelta(hours=1))
    assert mapped.scale == 0.5  # 7,200 trace seconds into 3,600
    a, b, c = mapped.demand["requests"]
    assert (a["at"], a["end"]) == (T0.isoformat(), (T0 + timedelta(hours=1)).isoformat())
    assert (b["at"], b["end"]) == (
        (T0 + timedelta(seconds=1800)).isoformat(),
        (T0 + timedelta(hours=1)).isoformat(),
    )
    assert b["devices"] == [{"class": "gpu.slot", "count": 5, "sameGpu": True}]
    assert (c["at"], c["end"]) == (T0.isoformat(), (T0 + timedelta(seconds=1)).isoformat())


def test_a_trace_that_fits_keeps_its_seconds_and_whole_gpus_are_same_gpu_lines_of_every_slot() -> None:
    mapped = trace_demand([task("w", 50, 150, num_gpu=2)], T0, T0 + timedelta(hours=1), replicas=4)
    assert mapped.scale == 1.0
    (w,) = mapped.demand["requests"]
    assert (w["at"], w["end"]) == (T0.isoformat(), (T0 + timedelta(seconds=100)).isoformat())
    assert w["devices"] == [{"class": "gpu.slot", "count": 4, "sameGpu": True}] * 2


def test_a_node_list_becomes_one_timeslice_pool_declaring_its_models() -> None:
    fleet = trace_fleet(
        [TraceNode("n1", 1, 1, 2, "V100M32"), TraceNode("cpu", 1, 1, 0, ""), TraceNode("n2", 1, 1, 1, "G1")]
    )
    assert fleet["gpuModels"] == [{"name": "G1", "memoryGiB": 16}, {"name": "V100M32", "memoryGiB": 32}]
    assert [n["name"] for n in fleet["clusters"][0]["nodes"]] == ["n1", "n2"]
    assert fleet["pools"][0]["policy"] == {"replicas": 20} and fleet["pools"][0]["nodes"] == ["n1", "n2"]
