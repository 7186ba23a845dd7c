"""How much free GPU capacity the workload's request sizes cannot use: fragmentation as a number.

The measure is the one of Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads
with Fragmentation Gradient Descent" (USENIX ATC '23, section 3). For one node and one task:

- if the node cannot run the task at all, every free bit of its GPUs is a fragment for that task;
- else, a GPU's free capacity is a fragment when the task could not use it: for a share of one GPU
  (`milli` thousandths), a GPU with less than `milli` free; for whole GPUs, a GPU that is not
  wholly free (a whole-GPU task cannot take a partly used GPU).

A task of whole GPUs runs on a node that has at least `gpus` wholly free GPUs; a share runs on a node
with one GPU that has `milli` free. With a distribution of tasks (each shape weighted by its
popularity, normalised), a node's fragmentation is the expected fragment over that distribution,
and a fleet's share is the sum over its nodes divided by all its free capacity: "the expected share
of free GPU capacity that the recorded request sizes cannot use".

A task that may run only on some GPU models (the trace's `gpu_spec`, a device class) says so in
`TaskShape.models`; on a node of another model it cannot run, so all the node's free capacity is a
fragment for it.

Left out of our measure: the paper's CPU dimension (a node whose CPUs are taken counts all its free
GPU as fragments there). A GPU fleet's bottleneck we book is the GPU; the host's CPU and memory are
not atoms here. Tasks that ask for no GPU are not shapes either (a `TaskShape` always asks for some
GPU), so they do not weigh in the expectation.

Capacities are in milli-GPUs (thousandths of one GPU), the unit the paper and Alibaba's trace use:
integers, so sums are exact. Pure: no I/O, nothing but the standard library.

MIG, which the paper does not cover: a GPU split into MIG instances is not one free share but
several, each usable only whole (two free 1g instances do not make the 2g a task asks for). Such a
GPU's free capacity is given as its free instances' sizes (`Pieces`); a task can use an instance at
least its share (a whole-GPU task: a free instance of the whole GPU), and every smaller free
instance is a fragment for it. A GPU given as one number (not split, or split into slots, which a
task takes as many of on one GPU as it needs) is one piece, as in the paper.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

WHOLE = 1000
"""Milli-GPUs in one GPU."""

Pieces = tuple[int, ...]
"""A MIG GPU's free capacity: the size (milli-GPUs) of each free instance, each usable only whole."""

Free = int | Pieces
"""One GPU's free capacity: milli-GPUs (one piece), or a MIG GPU's free instances."""


def free_of(gpu: Free) -> int:
    """All the free capacity of one GPU, in milli-GPUs."""
    return gpu if isinstance(gpu, int) else sum(gpu)


def _wholly_free(gpu: Free) -> bool:
    return gpu >= WHOLE if isinstance(gpu, int) else any(p >= WHOLE for p in gpu)


def _too_small(gpu: Free, milli: int) -> int:
    """The free capacity of one GPU a share of `milli` cannot use: all of one piece smaller than it;
    a MIG GPU's instances smaller than it."""
    if isinstance(gpu, int):
        return gpu if gpu < milli else 0
    return sum(p for p in gpu if p < milli)


@dataclass(frozen=True)
class TaskShape:
    """What one task asks of the GPUs: `gpus` whole GPUs (>= 1), or, when `gpus` is 0, a share of
    one GPU of `milli` thousandths (1..999). A share of 1000 is a whole GPU: say `gpus=1`."""

    gpus: int = 0
    milli: int = 0
    models: tuple[str, ...] = ()
    """GPU models the task may run on (a `gpu_spec`, a device class's models); empty: any."""

    def __post_init__(self) -> None:
        if self.gpus < 0 or (self.gpus == 0 and not 1 <= self.milli < WHOLE):
            raise ValueError(
                f"a task shape is gpus >= 1 or a share of 1..{WHOLE - 1} milli, not {self.gpus} gpus"
                f" and {self.milli} milli"
            )
        if self.gpus > 0 and self.milli not in (0, WHOLE):
            raise ValueError(f"a task of {self.gpus} whole GPUs takes no share, not {self.milli} milli")

    @property
    def demand_milli(self) -> int:
        """The GPU capacity it takes, in milli-GPUs."""
        return self.gpus * WHOLE if self.gpus else self.milli


def task_fragmentation(free_milli: Sequence[Free], task: TaskShape, model: str | None = None) -> int:
    """The free capacity (milli-GPUs) of a node with these free GPUs that `task` cannot use; a node
    of a `model` the task does not run on cannot run it at all."""
    if all(isinstance(free, int) for free in free_milli):  # the paper's case, and the hot path
        plain = cast(Sequence[int], free_milli)
        total = sum(plain)
        if task.models and model is not None and model not in task.models:
            return total
        if task.gpus:
            whole = sum(1 for free in plain if free >= WHOLE)
            if whole < task.gpus:
                return total
            return sum(free for free in plain if free < WHOLE)
        # A share: a GPU with less than the share free is a fragment; when every GPU is such, the
        # node cannot run the task and everything is a fragment, which is the same sum.
        return sum(free for free in plain if free < task.milli)
    total = sum(free_of(free) for free in free_milli)
    if task.models and model is not None and model not in task.models:
        return total
    if task.gpus:
        if sum(1 for free in free_milli if _wholly_free(free)) < task.gpus:
            return total
        return sum(free_of(free) for free in free_milli if not _wholly_free(free))
    # A share: each piece smaller than it is a fragment (when every piece is, the node cannot run
    # the task and everything is a fragment, which is the same sum).
    return sum(_too_small(free, task.milli) for free in free_milli)


def node_fragmentation(
    free_milli: Sequence[Free], demand: Sequence[tuple[TaskShape, float]], model: str | None = None
) -> float:
    """Expected free GPU capacity (milli-GPUs) of one node that a task drawn from `demand` cannot use.

    `free_milli` holds each GPU's free capacity (0..1000, or a MIG GPU's free instances);
    `demand` pairs task shapes with their popularity (any non-negative weights; they are
    normalised). No demand, or no weight: 0.0. `model`, the node's GPU model, matters only to
    shapes that name the models they run on: on a node of another model, all its free capacity is
    a fragment for them (the paper's "the task cannot run on the node"). None: every shape may run
    on the node.
    """
    weight = sum(w for _, w in demand if w > 0)
    if weight <= 0:
        return 0.0
    return sum(w * task_fragmentation(free_milli, shape, model) for shape, w in demand if w > 0) / weight


def fragmentation_share(
    nodes: Sequence[Sequence[Free]],
    demand: Sequence[tuple[TaskShape, float]],
    models: Sequence[str | None] | None = None,
) -> float:
    """Sum of node_fragmentation over nodes / total free milli; 0.0 when nothing is free.

    `models[i]`, when given, is node i's GPU model (see `node_fragmentation`)."""
    free = sum(free_of(gpu) for gpus in nodes for gpu in gpus)
    if free <= 0:
        return 0.0
    named = models if models is not None else [None] * len(nodes)
    return share_of([node_fragmentation(gpus, demand, m) for gpus, m in zip(nodes, named, strict=True)], free)


def share_of(fragments: Sequence[float], free: int) -> float:
    """The fleet's share from its nodes' `node_fragmentation`s (in node order) and its free milli:
    what a caller that keeps each node's fragmentation between changes (replay's gauge, which
    counts again only the nodes that changed) sums, exactly as `fragmentation_share` does."""
    return sum(fragments) / free if free > 0 else 0.0


def fragmentation_delta(
    free_milli: Sequence[int],
    gpu_index: Sequence[int],
    take: int,
    demand: Sequence[tuple[TaskShape, float]],
    model: str | None = None,
) -> float:
    """How much a node's fragmentation grows when `take` milli-GPUs go from each GPU in `gpu_index`:
    the gradient FGD descends (placing where it grows least)."""
    after = list(free_milli)
    for i in gpu_index:
        after[i] -= take
    return node_fragmentation(after, demand, model) - node_fragmentation(free_milli, demand, model)
