"""Alibaba's openb trace as a replay's demand and fleet (`better-compute replay --trace`; docs/traces.md).

The mapping of a task to device lines and of a node to GPUs is `domain.ops.traces`'s (`slot_requests`,
the nodes' models as generic models by name); this only writes its results in the shapes `replay.run`
takes: a fleet file (one cluster, one `timeslice` pool of `replicas` slots a GPU over every GPU node,
owned by one tenant, `trace`, with the trace's models declared in `gpuModels`) and a demand file (each
task asking for GPUs a reservation of its device lines, asked at its `creation_time` and ending at its
`deletion_time`, both mapped onto the replay window; a task without a deletion holds to the window's end).

On MIG (`--as-mig MODEL`): every GPU node's GPUs are `MODEL`s in one `mig` pool, each node in the
layout `trace_mig` gives it, and each task's device lines are `mig_requests`' (the cheapest instance
that gives its share, k whole-GPU instances for k GPUs; its `gpu_spec` left out).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from better_compute.domain.catalog import GpuModel
from better_compute.domain.kernel.selectors import document
from better_compute.domain.ops.trace_mig import MigLayouts
from better_compute.domain.ops.traces import (
    DEFAULT_REPLICAS,
    TraceNode,
    TraceTask,
    mig_requests,
    slot_requests,
)
from better_compute.domain.tenancy.quota import MAX_LIMIT

TENANT = "trace"
CLUSTER = "trace"
POOL = "trace"

MEMORY_GIB = {"T4": 16, "P100": 16, "V100M16": 16, "V100M32": 32, "A10": 24}
"""The data sheets' memory of the trace's NVIDIA models; G1, G2 and G3 are undisclosed, and declared
with GENERIC_MEMORY_GIB (memory only sets their slots' `vramGiB`, which the trace's tasks do not ask)."""
GENERIC_MEMORY_GIB = 16


@dataclass(frozen=True)
class TraceDemand:
    """A trace's tasks as a demand file, with what the mapping of its times did."""

    demand: dict[str, Any]
    tasks: int
    """Tasks asking for GPUs, each a request."""
    without_gpus: int
    """Tasks asking for no GPU (CPU only): left out, they take no GPU."""
    scale: float
    """Replay seconds per trace second: 1 when the trace's span fits the window, less when it is
    compressed into it."""


def trace_fleet(nodes: Sequence[TraceNode], replicas: int = DEFAULT_REPLICAS) -> dict[str, Any]:
    """The fleet file of a node list: its GPU nodes in one time-slice pool of `replicas` slots a GPU."""
    gpu_nodes = [n for n in nodes if n.gpus]
    models = sorted({n.model for n in gpu_nodes})
    return {
        "tenants": [{"id": TENANT}],
        "gpuModels": [{"name": m, "memoryGiB": MEMORY_GIB.get(m, GENERIC_MEMORY_GIB)} for m in models],
        "clusters": [
            {
                "name": CLUSTER,
                "region": "trace",
                "nodes": [
                    {"name": n.name, "gpus": {"model": n.model, "count": n.gpus}, "nvlink": False}
                    for n in gpu_nodes
                ],
            }
        ],
        "pools": [
            {
                "name": POOL,
                "cluster": CLUSTER,
                "mode": "timeslice",
                "owner": TENANT,
                "policy": {"replicas": replicas},
                "nodes": [n.name for n in gpu_nodes],
                # The trace has one tenant, whose pool is all of the fleet: only the fleet limits it
                # (a quota of exactly the fleet's slots would refuse for quota what capacity refuses).
                "ownerQuota": {"gpu.slot": MAX_LIMIT},
            }
        ],
    }


def trace_mig_fleet(nodes: Sequence[TraceNode], model: GpuModel, mig: MigLayouts) -> dict[str, Any]:
    """The fleet file of a node list on MIG: every GPU node's GPUs as `model`s, all in one `mig`
    pool whose layout is `mig.pool_layout`; a node whose layout is another keeps its own
    (`gpus.migLayout`, `carriesPoolLayout: false`, so the layout gate leaves it as it is)."""
    gpu_nodes = [n for n in nodes if n.gpus]
    listed: list[dict[str, Any]] = []
    for n in gpu_nodes:
        gpus: dict[str, Any] = {"model": model.id, "count": n.gpus}
        node: dict[str, Any] = {"name": n.name, "gpus": gpus, "nvlink": False}
        layout = mig.by_node.get(n.name, mig.pool_layout)
        if layout != mig.pool_layout:
            gpus["migLayout"] = layout
            node["carriesPoolLayout"] = False
        listed.append(node)
    return {
        "tenants": [{"id": TENANT}],
        "clusters": [{"name": CLUSTER, "region": "trace", "nodes": listed}],
        "pools": [
            {
                "name": POOL,
                "cluster": CLUSTER,
                "mode": "mig",
                "owner": TENANT,
                "policy": {"migLayout": mig.pool_layout},
                "nodes": [n.name for n in gpu_nodes],
                "ownerQuota": {"gpu.mig": MAX_LIMIT},
            }
        ],
    }


def trace_demand(
    tasks: Sequence[TraceTask],
    since: datetime,
    until: datetime,
    replicas: int = DEFAULT_REPLICAS,
    mig: GpuModel | None = None,
) -> TraceDemand:
    """The demand file of a pod list's tasks, in the file's order. Times are seconds after the
    earliest `creation_time` (of any task, one asking for no GPU too), placed from `since`; when the
    last creation or deletion falls after `until`, every time is scaled by the same factor so that it
    falls within the window. A task with no `creation_time` arrives at `since`; one with no
    `deletion_time` holds until `until`. Each task's lines are `replicas` slots a GPU
    (`slot_requests`), or with `mig` the instances of that model that give it (`mig_requests`)."""
    asking = [t for t in tasks if t.shape is not None]
    times = [t.creation_time for t in tasks if t.creation_time is not None]
    origin = min(times, default=0)
    last = max(
        [*(t.creation_time or origin for t in asking), *(t.deletion_time for t in asking if t.deletion_time)],
        default=origin,
    )
    window = (until - since).total_seconds()
    span = last - origin
    scale = 1.0 if span <= window else window / span

    def placed(t: int | None) -> datetime:
        return since if t is None else since + timedelta(seconds=round((max(t, origin) - origin) * scale))

    requests: list[dict[str, Any]] = []
    for task in asking:
        at = placed(task.creation_time)
        end = until if task.deletion_time is None else min(until, placed(task.deletion_time))
        if end <= at:  # a task gone within the second it came (or scaled to it): one second
            end = min(until, at + timedelta(seconds=1))
        if end <= at:
            continue
        requests.append(
            {
                "kind": "reservation",
                "id": task.name,
                "at": at.isoformat(),
                "tenant": TENANT,
                "pool": POOL,
                "devices": [
                    _line(line.cls, line.count, line.same_gpu, document(line.selector))
                    for line in (slot_requests(task, replicas) if mig is None else mig_requests(task, mig))
                ],
                "end": end.isoformat(),
            }
        )
    return TraceDemand({"requests": requests}, len(asking), len(tasks) - len(asking), scale)


def _line(
    cls: str, count: int, same_gpu: bool, selector: dict[str, list[dict[str, object]]]
) -> dict[str, Any]:
    line: dict[str, Any] = {"class": cls, "count": count}
    if same_gpu:  # a slot line's; a MIG instance is on one GPU by what it is
        line["sameGpu"] = True
    if selector.get("matchExpressions"):
        line["selector"] = selector
    return line


__all__ = ["TENANT", "TraceDemand", "trace_demand", "trace_fleet", "trace_mig_fleet"]
