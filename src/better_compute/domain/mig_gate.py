"""The MIG layout gate's rules (SPEC 6.1): what a new layout does to a node's gate, which layout a
node is told to have, and what should happen next for a gated node. Pure; `service.mig_gate`
carries the steps out and the reconcilers drive it.

A node's change goes `pending` (frozen at its layout, the new one waiting) → `scheduled` (every GPU
family of the node booked from the end of its last live booking onward, so nothing new lands past
it) → `granted` (told the new layout at that time) → gone, once the node reports a spec generation
newer than the one at the grant, when the partition bookings are released. A node that does not
take its layout from its pool (`carriesPoolLayout` false) is released at the grant: nothing will
repartition it. No timer releases a hold.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from better_compute.domain.records import MigLayoutGate, Pool

PENDING = "pending"
SCHEDULED = "scheduled"
GRANTED = "granted"
STATES = (PENDING, SCHEDULED, GRANTED)


@dataclass(frozen=True, slots=True)
class Put:
    """Write this gate (a new row when `gate.version` is 1)."""

    gate: MigLayoutGate


@dataclass(frozen=True, slots=True)
class Drop:
    """The change is undone before its grant (the node keeps the layout it has): release the
    partition bookings the gate holds, if any, and remove it."""

    gate: MigLayoutGate


@dataclass(frozen=True, slots=True)
class Keep:
    """Nothing to write."""


GateChange = Put | Drop | Keep


def requested(
    gate: MigLayoutGate | None, node_id: str, pool_id: str, current: str | None, new: str, now: datetime
) -> GateChange:
    """What a request for layout `new` does to a node's gate. `current` is the layout the node is
    told to have now (`told_layout`). A newer change replaces a pending one; one back to the
    frozen layout undoes it, unless the node was told another layout since (`granted_at` is kept
    from a grant: the node may be part-way there, so it keeps its holds and is granted the layout
    again, to be released once it has converged); a granted node is frozen at the layout it is
    converging to, keeps its holds, and is granted again at once."""
    if gate is None:
        if new == current:
            return Keep()
        return Put(MigLayoutGate(node_id, pool_id, current, new, PENDING, now))
    if new == gate.pending_layout:
        return Keep()
    if gate.state in (PENDING, SCHEDULED):
        if new == gate.frozen_layout and gate.granted_at is None:
            return Drop(gate)
        return Put(replace(gate, pending_layout=new, requested_at=now, version=gate.version + 1))
    return Put(
        replace(
            gate,
            frozen_layout=gate.pending_layout,
            pending_layout=new,
            state=SCHEDULED,
            requested_at=now,
            version=gate.version + 1,
        )
    )


def told_layout(pool: Pool | None, gate: MigLayoutGate | None, *, held: bool = False) -> str | None:
    """The MIG layout a node's spec gives it: its frozen layout while its gate is not granted, or
    while a tenant's booking of the node is `held` at the spec's time (a server whose clock is
    behind the reconciler's must not tell a new layout to a node still in use), the new one once it
    is granted, else its pool's (`all-disabled` outside mig pools; None: in no pool)."""
    if gate is not None:
        frozen = gate.state in (PENDING, SCHEDULED) or held
        return gate.frozen_layout if frozen else gate.pending_layout
    if pool is None:
        return None
    return pool.settings.layout if pool.mode == "mig" else "all-disabled"


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the planner needs of a gated node: whether it takes its pool's layout, its spec
    generations, and its live tenant bookings' last end (`open_ended`: one never ends)."""

    carries_pool_layout: bool
    spec_generation: int
    observed_generation: int
    booked_until: datetime | None
    open_ended: bool = False


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to do yet: `reason`, and `until` when time alone will change that."""

    reason: str
    until: datetime | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    """Book every GPU family of the node from `at` onward (open-ended), then grant at `at`."""

    at: datetime


@dataclass(frozen=True, slots=True)
class Grant:
    """Tell the node the new layout; `release` at once when nothing will repartition it."""

    release: bool


@dataclass(frozen=True, slots=True)
class Apply:
    """The node converged the new layout: release its partition bookings and end the gate."""


Step = Wait | Schedule | Grant | Apply


def next_step(gate: MigLayoutGate, facts: NodeFacts, now: datetime) -> Step:
    """What should happen next for the gated node, at `now`."""
    if gate.state == PENDING:
        if facts.open_ended:
            return Wait("a live booking of the node never ends; the change waits until it is released")
        at = now if facts.booked_until is None or facts.booked_until < now else facts.booked_until
        return Schedule(at)
    if gate.state == SCHEDULED:
        assert gate.scheduled_from is not None
        if now < gate.scheduled_from:
            return Wait("the node's last booking has not ended", gate.scheduled_from)
        if facts.open_ended or (facts.booked_until is not None and facts.booked_until > gate.scheduled_from):
            # The holds cover every atom, so this cannot be; if it were, granting would cut a holder.
            return Wait("a live booking of the node reaches past the scheduled time")
        return Grant(release=not facts.carries_pool_layout)
    generation = gate.granted_generation if gate.granted_generation is not None else facts.spec_generation
    if facts.observed_generation > generation:
        return Apply()
    return Wait("the node has not reported converging the new layout")


def scheduled(gate: MigLayoutGate, at: datetime) -> MigLayoutGate:
    return replace(gate, state=SCHEDULED, scheduled_from=at, version=gate.version + 1)


def granted(gate: MigLayoutGate, now: datetime, generation: int) -> MigLayoutGate:
    return replace(
        gate, state=GRANTED, granted_at=now, granted_generation=generation, version=gate.version + 1
    )


__all__ = [
    "GRANTED",
    "PENDING",
    "SCHEDULED",
    "Apply",
    "Drop",
    "GateChange",
    "Grant",
    "Keep",
    "NodeFacts",
    "Put",
    "Schedule",
    "Step",
    "Wait",
    "granted",
    "next_step",
    "requested",
    "scheduled",
    "told_layout",
]
