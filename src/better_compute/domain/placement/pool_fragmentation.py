"""A pool's fragmentation now, in the terms of `domain.placement.fragmentation`: our atoms as free
milli-GPUs per GPU, and what the pool's bookings held as task shapes.

The measure (Weng et al., USENIX ATC '23) is over GPUs with a free share of 0..1000 milli-GPUs each,
and tasks that ask for whole GPUs or a share of one. Our atoms map to it by the one rule that already
says what share of a GPU an atom is (`domain.fleet.shares.share`, what every booking bills):

- a GPU not split, free: 1000; booked, changing or unhealthy: 0;
- a GPU split into slots: 1000 x (free slots / slots), e.g. 3 of 4 time-slice slots free: 750 (an MPS
  slot is its `mpsUnits` / 100, as it is billed);
- a GPU split into MIG instances: each free instance apart, as its compute slices over the
  model's (the catalog's; 7 for a model it does not know), e.g. a free 3g.40gb and 1g.10gb on an
  H100: (429, 143), since a task takes one instance whole and two 1g instances are not a 2g
  (`fragmentation.Pieces`). Compute not cut into an instance is not free: no booking can take it
  without a new layout.

A GPU's free slots are summed (a task takes as many slots of one GPU as its share needs), then
rounded to a whole milli (at most 1000); each MIG instance is rounded on its own.

A free atom is one that could be booked now: bookable, not waiting for a partition change, and not
taken by a booking that holds it or another atom of its GPU that excludes it.

Task shapes come from what the pool's reservations and replicas held (`HeldShape`, per GPU, or per
node for whole GPUs): `n` whole GPUs on a node is `TaskShape(gpus=n)`; `n` slots of one GPU is a
share of `n x share x 1000` milli (1000 or more: one whole GPU); each MIG instance is a share of its
own, since a request takes each instance whole (`n` of them, `n` such shares). Each shape weighs by
how often it was held. A pool with no recorded holding is measured against the sizes it offers: one atom
of each share its atoms have, equally weighted (`offered_demand`), so that a pool nobody used yet
reads 0 unless its free capacity is of a size none of its own atoms are.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.shares import share
from better_compute.domain.metering.metering import HeldShape
from better_compute.domain.placement.fragmentation import (
    WHOLE,
    Free,
    TaskShape,
    fragmentation_share,
    node_fragmentation,
)

Demand = list[tuple[TaskShape, float]]
"""Task shapes with their weights (how often each was held)."""


def milli_of(part: Fraction | float) -> int:
    """A share of one GPU in milli-GPUs, rounded to the nearest (a 1/7 MIG slice is 143), at most 1000."""
    return min(WHOLE, round(part * WHOLE))


def is_usable(atom: Atom) -> bool:
    """Whether `atom` could be booked were nothing holding it: bookable, present, no partition
    change waiting."""
    return atom.bookable and atom.present and not atom.partition_pending


@dataclass(frozen=True, slots=True)
class GpuParts:
    """One GPU as the measure reads it: its `gpu` atom when it is not split and could be booked, or
    the parts it is split into that could be booked, each with its share of the GPU."""

    whole: str | None
    parts: tuple[tuple[str, float], ...] = ()
    pieces: bool = False
    """Whether the parts are MIG instances, each usable only whole (else slots, which add up)."""
    ids: tuple[str, ...] = field(init=False)
    """The parts' atom ids."""
    all_free: int = field(init=False)
    """The GPU's free milli-GPUs when none of its parts is taken."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", tuple(atom_id for atom_id, _ in self.parts))
        object.__setattr__(self, "all_free", milli_of(sum(part for _, part in self.parts)))

    def free(self, held: Callable[[str | None], bool]) -> Free:
        """The GPU's free capacity with the atoms `held` answers for taken."""
        if self.whole is not None:
            return 0 if held(self.whole) else WHOLE
        if self.pieces:
            return tuple(milli_of(part) for atom_id, part in self.parts if not held(atom_id))
        if not any(map(held, self.ids)):  # most GPUs: none of its parts taken, no sum to make
            return self.all_free
        return milli_of(sum(part for atom_id, part in self.parts if not held(atom_id)))


@dataclass(frozen=True, slots=True)
class PoolShape:
    """A pool's GPUs per node (nodes and GPUs in id order) and the sizes its atoms come in: what
    its fragmentation needs of its atoms, derived once per snapshot of them (`pool_shape`); what
    holds them changes far more often than they do."""

    nodes: tuple[tuple[GpuParts, ...], ...]
    offered: tuple[tuple[TaskShape, float], ...]
    gpu_at: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Where each GPU is in `nodes`: (node index, index among the node's GPUs), by GPU id."""


def pool_shape(atoms: Iterable[Atom]) -> PoolShape:
    """`atoms` (one pool's) as a `PoolShape`. Each atom's share is the billing rule's
    (`domain.fleet.shares.share`), read once per distinct kind of atom."""
    found = list(atoms)
    split = {a.gpu_id for a in found if a.cls != "gpu"}
    mig = {a.gpu_id for a in found if a.cls == "gpu.mig"}
    shares: dict[tuple[str, tuple[str, str]], Fraction] = {}
    per_gpu: dict[tuple[str, str], tuple[list[str], list[tuple[str, float]]]] = {}
    offered: dict[TaskShape, float] = {}
    seen: set[tuple[str, Fraction]] = set()
    for atom in found:
        whole, parts = per_gpu.setdefault((atom.node, atom.gpu_id), ([], []))
        if atom.cls == "gpu":
            if atom.gpu_id not in split:
                offered[TaskShape(gpus=1)] = 1.0
                if is_usable(atom):
                    whole.append(atom.id)
            continue  # a split GPU's parent is never booked itself
        kind = (atom.cls, _kind_key(atom))
        part = shares.get(kind)
        if part is None:
            part = shares[kind] = share(atom)
            if (atom.cls, part) not in seen:
                seen.add((atom.cls, part))
                offered[task_shape(atom.cls, part, 1)] = 1.0
        if is_usable(atom):
            parts.append((atom.id, float(part)))
    nodes: dict[str, list[GpuParts]] = defaultdict(list)
    gpus: dict[str, list[str]] = defaultdict(list)
    for (node, gpu_id), (whole, parts) in sorted(per_gpu.items()):
        gpus[node].append(gpu_id)
        if gpu_id in split:
            nodes[node].append(GpuParts(None, tuple(parts), gpu_id in mig))
        else:
            nodes[node].append(GpuParts(whole[0] if whole else None))
    names = sorted(nodes)
    gpu_at = {gpu: (i, j) for i, name in enumerate(names) for j, gpu in enumerate(gpus[name])}
    return PoolShape(tuple(tuple(nodes[n]) for n in names), tuple(_ordered(Counter(offered))), gpu_at)


def _kind_key(atom: Atom) -> tuple[str, str]:
    """Atoms with the same key have the same share (`shares.share`): a GPU's slots all have its
    pool's `slots` and `mpsUnits`, and its MIG instances of one profile (named in their key,
    `mig:<profile>@<start>`) its model's share of that profile. Reading it from the id and key is
    what spares a look at every atom's attributes."""
    return (atom.gpu_id, atom.key.partition("@")[0] if atom.cls == "gpu.mig" else "")


def free_milli_by_node(shape: PoolShape, taken: Container[str]) -> list[list[Free]]:
    """Each node's GPUs as free milli-GPUs (0..1000; a MIG GPU its free instances' sizes).
    `taken`: the atom ids a booking takes now, a GPU's family included (`BookingIndex.taken`)."""
    return [_free_milli(node, taken) for node in shape.nodes]


def _free_milli(node: tuple[GpuParts, ...], taken: Container[str]) -> list[Free]:
    held = taken.__contains__
    return [gpu.free(held) for gpu in node]


def growth_of(
    shape: PoolShape, taken: Container[str], demand: Demand | None
) -> Callable[[str, str, int, int], float]:
    """The fragmentation gradient the admission's choice breaks rule 2's ties with
    (`domain.ledger.choose.FragmentationGrowth`): `(node, gpu, before, after)` answers how much the
    GPU's node's fragmentation against `demand` (None or empty: the sizes the pool's atoms come in,
    as `pool_fragmentation` measures it) grows when the GPU's free capacity goes from `before` to
    `after` milli-GPUs, its node's other GPUs free as `taken` leaves them.

    Only the nodes of the GPUs asked about are read, each once per answer made (a choice asks about
    its shortlist's GPUs, not the pool's). A GPU the shape does not know (its atoms came after the
    shape was derived) grows nothing: the choice then falls back to its ids."""
    asked = demand or list(shape.offered)
    free: dict[int, list[Free]] = {}

    def growth(node: str, gpu: str, before: int, after: int) -> float:
        where = shape.gpu_at.get(gpu)
        if where is None:
            return 0.0
        i, j = where
        found = free.get(i)
        if found is None:
            found = free[i] = _free_milli(shape.nodes[i], taken)
        milli: list[Free] = list(found)
        milli[j] = before
        was = node_fragmentation(milli, asked)
        milli[j] = after
        return node_fragmentation(milli, asked) - was

    return growth


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
            if h.cls == "gpu.mig":  # each instance is taken whole, apart from the others
                weights[h.pool_id][task_shape(h.cls, h.share, 1)] += h.times * h.atoms
            else:
                weights[h.pool_id][task_shape(h.cls, h.share, h.atoms)] += h.times
    return {pool: _ordered(counts) for pool, counts in weights.items()}


def offered_demand(atoms: Iterable[Atom]) -> Demand:
    """The demand a pool with no recorded holding is measured against: one atom of each share its
    atoms come in (whole GPUs of an unsplit GPU, each slot or MIG size), equally weighted."""
    return list(pool_shape(atoms).offered)


def pool_fragmentation(shape: PoolShape, taken: Container[str], demand: Demand | None) -> float:
    """The share (0..1) of the pool's free GPU capacity that `demand` (None or empty: the sizes its
    atoms come in) cannot use, with `taken` held now; 0.0 when nothing is free."""
    asked = demand or list(shape.offered)
    return fragmentation_share(free_milli_by_node(shape, taken), asked)


def _ordered(counts: Counter[TaskShape]) -> Demand:
    return [
        (shape, float(n)) for shape, n in sorted(counts.items(), key=lambda kv: (kv[0].gpus, kv[0].milli))
    ]


__all__ = [
    "Demand",
    "GpuParts",
    "PoolShape",
    "free_milli_by_node",
    "growth_of",
    "held_demand",
    "is_usable",
    "milli_of",
    "offered_demand",
    "pool_fragmentation",
    "pool_shape",
    "task_shape",
]
