"""Binding: whether a node has handed an allocation's atoms to a workload.

A node reports, per allocation, where it got to (`AllocationBound` with `bound`, `device-missing` or
`refused`; `AllocationReleased`); until a node reports, its part is `pending`. An allocation may hold
atoms on several nodes, so each node's part is kept apart and the reservation shows one state, the
one that most needs attention (`binding_of`).

Whatever the nodes say, a live booking of an atom the allocation cannot have is `stranded`
(`stranded_why`): the atom is gone from its node, is not bookable (a GPU split since into parts, so
that its whole-GPU atom is a parent; a GPU not at its layout; one reporting unhealthy), or is in
another pool than the booking's. `better-compute doctor` reports each such allocation
(`ledger.stranded`), and the reservation shows it with the reason.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Literal

from better_compute.domain.fleet.atoms import Atom

BindingState = Literal["pending", "bound", "device-missing", "refused", "released"]
BOUND_STATES: tuple[BindingState, ...] = ("bound", "device-missing", "refused")
"""The states an `AllocationBound` report may carry."""

STRANDED: Literal["stranded"] = "stranded"
ShownBinding = BindingState | Literal["stranded"]
"""What a reservation shows: its nodes' `binding_of`, or `stranded` while a live booking of it holds
an atom it cannot have (`stranded_why`)."""

MAX_NAMED = 5
"""Atoms a stranded allocation's reason names at most (it says how many there are)."""


def binding_of(reported: Mapping[str, BindingState], holding: Collection[str]) -> BindingState:
    """One allocation's binding, from what each node reported (`reported`, by node) and the nodes
    whose atoms it holds (`holding`): `refused` when a node refused it, else `device-missing` when a
    node lacks a device, else `released` once every node released it, `bound` once every node
    bound it, and `pending` otherwise (a node has not said yet)."""
    nodes = set(holding) | set(reported)
    states = [reported.get(node, "pending") for node in sorted(nodes)]
    if not states:
        return "pending"
    worst_first: tuple[BindingState, ...] = ("refused", "device-missing")
    for worst in worst_first:
        if worst in states:
            return worst
    if all(s == "released" for s in states):
        return "released"
    if all(s == "bound" for s in states):
        return "bound"
    return "pending"


def stranded_why(atom: Atom, pool_id: str | None, unhealthy: Collection[str] = ()) -> str | None:
    """Why a tenant's live booking of `atom`, made in pool `pool_id`, holds an atom it cannot have
    (None: it can). `unhealthy`: GPUs their nodes report unhealthy."""
    where = f"atom {atom.id} ({atom.cls} of GPU {atom.gpu_id} on node {atom.node})"
    if not atom.present:
        return f"{where} is gone: its node no longer reports it (an instance destroyed, a GPU removed)"
    if atom.pool_id != pool_id:
        now_in = f"pool {atom.pool_id}" if atom.pool_id is not None else "no pool"
        return f"{where} is in {now_in} now, not in the booking's pool {pool_id}"
    if atom.bookable:
        return None
    if atom.partition_pending:
        return (
            f"{where} is partitionPending: its GPU is not at the layout its node is told (or waits"
            " for a MIG mode change), and takes no work until it is"
        )
    if atom.gpu_id in unhealthy:
        return f"{where} is not bookable: its GPU reports unhealthy"
    if atom.cls == "gpu":
        return (
            f"{where} is not bookable: the GPU is split into MIG instances or slots, so it cannot"
            " be held whole"
        )
    return f"{where} is not bookable"


def stranded_reason(
    atoms: Iterable[Atom], pool_id: str | None, unhealthy: Collection[str] = ()
) -> str | None:
    """Why an allocation's live bookings of `atoms` (made in `pool_id`) are stranded, naming up to
    `MAX_NAMED` of the atoms that are; None when none is."""
    whys = [w for a in atoms if (w := stranded_why(a, pool_id, unhealthy)) is not None]
    if not whys:
        return None
    more = len(whys) - MAX_NAMED
    return "; ".join(whys[:MAX_NAMED]) + (f"; and {more} more" if more > 0 else "")
