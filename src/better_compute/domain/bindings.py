"""Binding: whether a node has handed an allocation's atoms to a workload.

A node reports, per allocation, where it got to (`AllocationBound` with `bound`, `device-missing` or
`refused`; `AllocationReleased`); until a node reports, its part is `pending`. An allocation may hold
atoms on several nodes, so each node's part is kept apart and the reservation shows one state, the
one that most needs attention (`binding_of`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Literal, get_args

BindingState = Literal["pending", "bound", "device-missing", "refused", "released"]
BINDING_STATES: tuple[BindingState, ...] = get_args(BindingState)

BOUND_STATES: tuple[BindingState, ...] = ("bound", "device-missing", "refused")
"""The states an `AllocationBound` report may carry."""


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
