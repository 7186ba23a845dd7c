"""The MIG layout gate's rules (docs/concepts.md#changing-a-pools-layout-the-gate): what a new layout does to
a node's gate, which layout a node is told to have, and what should happen next for a gated node. Pure;
`service.gate.mig_gate` carries the steps out and the reconcilers drive it.

A node's change goes `pending` (frozen at its layout, the new one waiting) → `scheduled` (every GPU
family of the node booked from the end of its last live booking onward, so nothing new lands past
it) → `granted` (told the new layout at that time) → gone, once the node reports a spec generation
newer than the one at the grant, when the partition bookings are released. A grant that changes
nothing the node is told (it already has the layout) counts as applied once the node has converged
the spec it has, since no newer generation comes for it (`told_already`). A node that does not take
its layout from its pool (`carriesPoolLayout` false) is released at the grant: nothing will
repartition it. No timer releases a hold.

The same gate changes a timeslice or mps pool's `replicas`: what a node is frozen at, and what it
waits for, is then its slot count, written as the shape `replicas:<n>` (`slots_shape`) where a mig
pool's node has a layout name. Its slot atoms follow the shape it is told (`told_replicas`), so the
slots re-derive at the grant; a node with no daemon (one that never joined) has nothing to hand the
new slots out and is released at the grant too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from better_compute.domain.fleet.pools import SLOT_MODES
from better_compute.domain.fleet.records import Pool
from better_compute.domain.gate.records import MigLayoutGate

PENDING = "pending"
SCHEDULED = "scheduled"
GRANTED = "granted"
STATES = (PENDING, SCHEDULED, GRANTED)

_SLOTS = "replicas:"


def slots_shape(replicas: int) -> str:
    """The shape a slot pool's gate freezes and waits for: its slot count, `replicas:<n>` (never a
    MIG layout name, which the catalog spells `all-...` or `mixed:...`)."""
    return f"{_SLOTS}{replicas}"


def shape_replicas(shape: str | None) -> int | None:
    """The slot count a `slots_shape` names; None for a MIG layout (or no shape)."""
    if shape is None or not shape.startswith(_SLOTS):
        return None
    return int(shape.removeprefix(_SLOTS))


def pool_shape(pool: Pool) -> str | None:
    """What a pool's gate changes: a mig pool's layout, a timeslice or mps pool's slot count (None:
    an exclusive pool, which has neither)."""
    if pool.mode == "mig":
        return pool.settings.layout
    if pool.mode in SLOT_MODES:
        return slots_shape(pool.settings.replicas or 1)
    return None


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
    told to have now (`told_shape`). A newer change replaces a pending one; one back to the
    frozen layout undoes it, unless the node was told another layout since (`granted_at` is kept
    from a grant: the node may be part-way there, so it keeps its holds and goes back to that
    grant, to be released once it has converged); a granted node is frozen at the layout it is
    converging to, keeps its holds, and is granted again at once."""
    if gate is None:
        if new == current:
            return Keep()
        return Put(MigLayoutGate(node_id, pool_id, current, new, PENDING, now))
    if new == gate.pending_layout:
        return Keep()
    if gate.state in (PENDING, SCHEDULED):
        if new == gate.frozen_layout:
            if gate.granted_at is None:
                return Drop(gate)
            # Back to the shape of its last grant, which the node has been told ever since: that
            # grant stands, its generation still says when the node has it. (Granted again, at the
            # generation the node may already have read, it would wait for one that never comes.)
            return Put(
                replace(gate, pending_layout=new, state=GRANTED, requested_at=now, version=gate.version + 1)
            )
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


def told_shape(gate: MigLayoutGate, *, held: bool = False) -> str | None:
    """The shape a gated node is told: its frozen one while its gate is not granted, or while a
    tenant's booking of the node is `held` at the spec's time (a server whose clock is behind the
    reconciler's must not tell a new shape to a node still in use), the new one once granted."""
    frozen = gate.state in (PENDING, SCHEDULED) or held
    return gate.frozen_layout if frozen else gate.pending_layout


def told_layout(
    pool: Pool | None, gate: MigLayoutGate | None, *, held: bool = False, own: str | None = None
) -> str | None:
    """The MIG layout a node's spec gives it: the one its gate tells it (`told_shape`) while a
    change is under way, else its `own` (an endpoint's instance is cut to the endpoint's layout),
    else its pool's (`all-disabled` outside mig pools; None: in no pool)."""
    if gate is not None and shape_replicas(gate.pending_layout) is None:
        return told_shape(gate, held=held)
    if own is not None:
        return own
    if pool is None:
        return None
    return pool.settings.layout if pool.mode == "mig" else "all-disabled"


def changing_to(gate: MigLayoutGate | None) -> str | None:
    """The shape a change under way takes a node to, as a person is shown it; None when none is
    under way or it takes the node to the shape it is frozen at (an endpoint of the layout its
    nodes already have: nothing changes, the gate only waits for the node's word)."""
    if gate is None or gate.pending_layout == gate.frozen_layout:
        return None
    return gate.pending_layout


def node_layout(
    pool: Pool | None,
    gate: MigLayoutGate | None,
    *,
    carries_pool_layout: bool,
    own: str | None = None,
    held: bool = False,
) -> str | None:
    """The MIG layout a node brings its GPUs to (`told_layout`); None for a node whose host config
    does not take its layout from its pool (`carriesPoolLayout` false): it keeps the one it has.
    What its atoms are derived against (`domain.fleet.atoms`: a GPU not at it takes no work) and what its
    spec tells it, unless a booking holds a GPU that is not at it (`domain.gate.node_spec.plan_spec`)."""
    return told_layout(pool, gate, held=held, own=own) if carries_pool_layout else None


def told_replicas(pool: Pool | None, gate: MigLayoutGate | None, *, held: bool = False) -> int:
    """The slot count a node of a timeslice or mps pool is told and its slot atoms are derived at:
    the one its gate tells it while a change of `replicas` is under way, else its pool's (1 outside
    slot pools)."""
    if gate is not None and (told := shape_replicas(told_shape(gate, held=held))) is not None:
        return told
    if pool is None or pool.mode not in SLOT_MODES:
        return 1
    return pool.settings.replicas or 1


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the planner needs of a gated node: whether it takes its pool's layout, its spec
    generations, and its live tenant bookings' last end (`open_ended`: one never ends)."""

    carries_pool_layout: bool
    spec_generation: int
    observed_generation: int
    booked_until: datetime | None
    open_ended: bool = False
    joined: bool = True
    """Whether a daemon runs the node (it has joined); a node with none never reports converging."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to do yet: `reason`, and `until` when time alone will change that."""

    reason: str
    until: datetime | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    """Book every GPU family of the node from `at` onward (open-ended), then grant at `at`; for a
    node already scheduled later, its holds move to `at`."""

    at: datetime


@dataclass(frozen=True, slots=True)
class Grant:
    """Tell the node the new layout; `release` at once when nothing will repartition it.
    `keeps_own`: a node that keeps its own layout (`carriesPoolLayout: false`) never takes the
    pool's, so its release is no `node.mig.applied` naming it (the grant says `released`)."""

    release: bool
    keeps_own: bool = False


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
            sooner = None if facts.open_ended else max(now, facts.booked_until or now)
            if sooner is not None and sooner < gate.scheduled_from:
                # The bookings that held the node back ended early (released, cancelled, evicted):
                # its holds move to the end of those left, so the change does not wait for nothing.
                return Schedule(sooner)
            return Wait("the node's last booking has not ended", gate.scheduled_from)
        if facts.open_ended or (facts.booked_until is not None and facts.booked_until > gate.scheduled_from):
            # The holds cover every atom, so this cannot be; if it were, granting would cut a holder.
            return Wait("a live booking of the node reaches past the scheduled time")
        if shape_replicas(gate.pending_layout) is not None:
            # The new slots exist once derived; the node's daemon must learn them before they take
            # work (its spec hands them out), and a node with none has nothing to wait for.
            return Grant(release=not facts.joined)
        # Nothing will repartition a node that does not take its layout from its pool.
        return Grant(release=not facts.carries_pool_layout, keeps_own=not facts.carries_pool_layout)
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


def told_already(gate: MigLayoutGate | None, generation: int, unchanged: bool) -> MigLayoutGate | None:
    """The gate to write when a node is granted a shape its spec already tells: the spec derived
    with the grant is the content the node's current `generation` names (`unchanged`: an endpoint
    of the layout its nodes already have, a node back to a layout it has), so no newer generation
    will ever come for it. That generation tells the new shape, so the node having converged it
    counts as applied: the grant moves to the generation before it (`next_step` applies once the
    node reports one past `granted_generation`), and a node still short of it waits for it. None
    when nothing changes."""
    if gate is None or gate.state != GRANTED or not unchanged or generation < 1:
        return None
    if gate.granted_generation is None or gate.granted_generation < generation:
        return None
    return replace(gate, granted_generation=generation - 1, version=gate.version + 1)


def told_frozen_again(gate: MigLayoutGate | None, held: bool, generation: int) -> MigLayoutGate | None:
    """The gate to write when a granted node's spec is stored at `generation` while a tenant's
    booking is `held` at the spec's time, so that the spec tells the frozen shape (`told_shape`): a
    spec read with a time before the grant (a server whose clock lags, or a read that began before
    the grant committed). The node's report of that generation says nothing about the new shape, so
    the grant moves to it and only a newer one applies the change; None when nothing changes."""
    if gate is None or gate.state != GRANTED or not held:
        return None
    if gate.granted_generation is not None and gate.granted_generation >= generation:
        return None
    return replace(gate, granted_generation=generation, version=gate.version + 1)


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
    "changing_to",
    "granted",
    "next_step",
    "node_layout",
    "pool_shape",
    "requested",
    "scheduled",
    "shape_replicas",
    "slots_shape",
    "told_already",
    "told_frozen_again",
    "told_layout",
    "told_replicas",
    "told_shape",
]
