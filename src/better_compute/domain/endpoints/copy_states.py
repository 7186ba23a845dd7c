"""Which copies of a component are ready, and where: the one rule an endpoint's `InService`, a live
relayout's floor and `invoke`'s routing all read (docs/endpoints.md#what-runs).

A copy is ready when the node it is on now (its `CopyRecord.node_id`) last reported its container
`ready` (a copy that moved keeps the old node's word until that node reports it removed, and that
word no longer counts), and that node is live: it reached the server within `READY_LEASE`
(`domain.fleet.replica_states.is_ready`; `live` is `live_nodes` of the copies' nodes' last contacts at
the reader's `now`). A dead host's copies stop counting without anything written, and count again
as soon as the node reaches the server again. A copy on no partition is never ready.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

from better_compute.domain.endpoints.endpoints import copy_allocation_id
from better_compute.domain.endpoints.records import CopyRecord
from better_compute.domain.fleet.replica_states import ReplicaState, is_ready


@dataclass(frozen=True, slots=True)
class ReadyCopy:
    """A ready copy and where the server reaches its model server (None: its node gave no address)."""

    component: str
    copy: int
    node_id: str
    address: str | None


def state_of(copy: CopyRecord, states: Mapping[str, Sequence[ReplicaState]]) -> ReplicaState | None:
    """What the node the copy is on now last said of its container (None: nothing yet)."""
    if copy.node_id is None:
        return None
    for s in states.get(copy_allocation_id(copy.component, copy.copy), ()):
        if s.node_id == copy.node_id:
            return s
    return None


def ready_kept(
    copies: Sequence[CopyRecord],
    staying: Mapping[int, str | None],
    states: Mapping[str, Sequence[ReplicaState]],
    live: Set[str],
) -> int:
    """How many copies stay ready through a move: ready now, and `staying` on the node they are on
    (by copy number, the node each copy is planned on; a copy that moves starts again on its new node,
    not ready until that node says so); a copy on a node that is not `live` is not ready, so a
    relayout never counts on a silent node's word."""
    ready = ready_copies(copies, states, live)
    return sum(1 for r in ready if staying.get(r.copy) == r.node_id)


def ready_copies(
    copies: Sequence[CopyRecord], states: Mapping[str, Sequence[ReplicaState]], live: Set[str]
) -> list[ReadyCopy]:
    """The copies whose container is ready on the node they are on now, that node `live`, in copy
    order."""
    out: list[ReadyCopy] = []
    for c in sorted(copies, key=lambda c: (c.component, c.copy)):
        s = state_of(c, states)
        if s is not None and is_ready(s, live) and c.node_id is not None:
            out.append(ReadyCopy(c.component, c.copy, c.node_id, s.address))
    return out
