"""What state each atom of a pool is in right now: the figures behind `better_compute_atoms`.

Every present atom of a pool is in exactly one state:

- `booked`: a booking holds it now;
- `changing`: its GPU's MIG mode is changing, or a partition change holds it now;
- `free`: it could be booked now;
- `parent`: the whole-GPU atom of a GPU split into MIG instances or slots, which is never booked
  itself (its instances or slots are);
- `unavailable`: it cannot be booked for another reason (its GPU is unhealthy).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Literal, get_args

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.ledger.ledger import is_partition_change

AtomState = Literal["free", "booked", "changing", "parent", "unavailable"]
ATOM_STATES: tuple[AtomState, ...] = get_args(AtomState)

CensusKey = tuple[str, str, AtomState]
"""(pool id, atom class, state)."""


def atom_state(atom: Atom, holder: str | None, *, split: bool) -> AtomState:
    """The state of `atom`, held now by the allocation `holder` (None: by nothing); `split` says its
    GPU is split into MIG instances or slots."""
    if atom.partition_pending or (holder is not None and is_partition_change(holder)):
        return "changing"
    if holder is not None:
        return "booked"
    if atom.bookable:
        return "free"
    if split and atom.cls == "gpu":
        return "parent"
    return "unavailable"


def atom_census(atoms: Iterable[Atom], holders: Mapping[str, str]) -> Counter[CensusKey]:
    """How many of `atoms` (one pool's, or several) are in each state, per pool and class, given the
    allocation holding each atom now (`holders`, by atom id). Every state of every (pool, class)
    that has atoms is counted, zero included, so that a series does not vanish when it empties."""
    found = list(atoms)
    split = {a.gpu_id for a in found if a.cls != "gpu"}
    census: Counter[CensusKey] = Counter()
    for pool, cls in {(a.pool_id or "", a.cls) for a in found}:
        for state in ATOM_STATES:
            census[(pool, cls, state)] = 0
    for a in found:
        census[(a.pool_id or "", a.cls, atom_state(a, holders.get(a.id), split=a.gpu_id in split))] += 1
    return census
