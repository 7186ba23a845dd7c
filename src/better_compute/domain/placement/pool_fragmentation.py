"""A pool's fragmentation now, in the terms of `domain.placement.fragmentation`: our atoms as free
milli-GPUs per GPU, and what the pool's bookings held as task shapes.

The measure (Weng et al., USENIX ATC '23) is over GPUs with a free share of 0..1000 milli-GPUs each,
and tasks that ask for whole GPUs or a share of one. Our atoms map to it by the one rule that already
says what share of a GPU an atom is (`domain.fleet.shares.share`, what every booking bills):

- a GPU not split, free: 1000; booked, changing or unhealthy: 0;
- a GPU split into slots: 1000 x (free slots / slots), e.g. 3 of 4 time-slice slots free: 750 (an MPS
  slot is its `mpsUnits` / 100, as it is billed);
- a GPU split into MIG instances: its free instances' compute slices over the model's (the
  catalog's; 7 for a model it does not know), e.g. a free 3g.40gb and 1g.10gb on an H100: 571.
  Compute not cut into an instance is not free: no booking can take it without a new layout.

A free atom is one that could be booked now: bookable, not waiting for a partition change, and not
taken by a booking that holds it or another atom of its GPU that excludes it.

Task shapes come from what the pool's reservations and replicas held (`HeldShape`, per GPU, or per
node for whole GPUs): `n` whole GPUs on a node is `TaskShape(gpus=n)`; `n` slots or instances of one
GPU is a share of `n x share x 1000` milli (1000 or more: one whole GPU). Each shape weighs by how
often it was held. A pool with no recorded holding is measured against the sizes it offers: one atom
of each share its atoms have, equally weighted (`offered_demand`), so that a pool nobody used yet
reads 0 unless its free capacity is of a size none of its own atoms are.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Container, Iterable, Sequence
from fractions import Fraction

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.shares import share
from better_compute.domain.metering.metering import HeldShape
from better_compute.domain.placement.fragmentation import WHOLE, TaskShape, fragmentation_share

Demand = list[tuple[TaskShape, float]]
"""Task shapes with their weights (how often each was held)."""


def milli_of(part: Fraction) -> int:
    """A share of one GPU in milli-GPUs, rounded to the nearest (a 1/7 MIG slice is 143)."""
    return min(WHOLE, round(part * WHOLE))


def is_free(atom: Atom, taken: Container[str]) -> bool:
    """Whether `atom` could be booked now: bookable, present, no partition change waiting, not taken."""
    return atom.bookable and atom.present and not atom.partition_pending and atom.id not in taken


def free_milli_by_node(atoms: Iterable[Atom], taken: Container[str]) -> list[list[int]]:
    """Each node's GPUs as free milli-GPUs (0..1000), nodes and GPUs in id order. `taken`: the atom
    ids a booking takes now, a GPU's family included (`BookingIndex.taken`)."""
    parts: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    whole: dict[tuple[str, str], bool] = {}
    split: set[tuple[str, str]] = set()
    for atom in atoms:
        gpu = (atom.node, atom.gpu_id)
        free = is_free(atom, taken)
        if atom.cls == "gpu":
            whole[gpu] = free
        else:
            split.add(gpu)
            if free:
                parts[gpu] += share(atom)
        parts.setdefault(gpu, Fraction(0))
    nodes: dict[str, list[int]] = defaultdict(list)
    for node, gpu_id in sorted(parts):
        gpu = (node, gpu_id)
        free_milli = milli_of(parts[gpu]) if gpu in split else (WHOLE if whole.get(gpu) else 0)
        nodes[node].append(free_milli)
    return [nodes[node] for node in sorted(nodes)]


def task_shape(cls: str, part: Fraction, atoms: int) -> TaskShape:
    """What one holding asked, as a task: `atoms` whole GPUs on one node, or `atoms` pieces of one GPU
    of `part` each (a whole GPU or more of them: one whole GPU; never less than 1 milli)."""
    if cls == "gpu":
        return TaskShape(gpus=max(1, atoms))
    milli = round(part * atoms * WHOLE)
    return TaskShape(gpus=1) if milli >= WHOLE else TaskShape(milli=max(1, milli))


def held_demand(held: Iterable[HeldShape]) -> dict[str, Demand]:
    """Each pool's recorded request sizes: its holdings as task shapes, weighted by how often each was
    held, shapes in a stable order."""
    weights: dict[str, Counter[TaskShape]] = defaultdict(Counter)
    for h in held:
        if h.times > 0 and h.atoms > 0:
            weights[h.pool_id][task_shape(h.cls, h.share, h.atoms)] += h.times
    return {pool: _ordered(counts) for pool, counts in weights.items()}


def offered_demand(atoms: Iterable[Atom]) -> Demand:
    """The demand a pool with no recorded holding is measured against: one atom of each share its
    bookable atoms have (whole GPUs of an unsplit GPU, each slot or MIG size), equally weighted."""
    split = set()
    found = list(atoms)
    for atom in found:
        if atom.cls != "gpu":
            split.add(atom.gpu_id)
    shapes: Counter[TaskShape] = Counter()
    for atom in found:
        if atom.cls == "gpu" and atom.gpu_id in split:
            continue  # a split GPU's parent is never booked itself
        shapes[task_shape(atom.cls, share(atom), 1)] = 1
    return _ordered(shapes)


def pool_fragmentation(atoms: Sequence[Atom], taken: Container[str], demand: Demand | None) -> float:
    """The share (0..1) of the pool's free GPU capacity that `demand` (None: `offered_demand`) cannot
    use, over its atoms now; 0.0 when nothing is free."""
    asked = demand or offered_demand(atoms)
    return fragmentation_share(free_milli_by_node(atoms, taken), asked)


def _ordered(counts: Counter[TaskShape]) -> Demand:
    return [
        (shape, float(n)) for shape, n in sorted(counts.items(), key=lambda kv: (kv[0].gpus, kv[0].milli))
    ]


__all__ = [
    "Demand",
    "free_milli_by_node",
    "held_demand",
    "is_free",
    "milli_of",
    "offered_demand",
    "pool_fragmentation",
    "task_shape",
]
