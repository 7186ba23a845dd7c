"""A GPU's state over time: what accounting needs to know about it, and since when.

Accounting a past range must read the fleet as it was then, not as it is now: a GPU that fails
today was healthy yesterday, a node that joins a pool today was not in it last month, and a slot
that is a quarter of its GPU today may have been half of it before `replicas` changed. So every
change to what decides a GPU's capacity (its pool, its health, its presence, its node's cordon,
the shares of its atoms) closes the GPU's current period and opens a new one, in the transaction
that makes the change (docs/adr/0009-gpu-state-history.md). A GPU that is not present has no
period: it is no capacity while it is gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.shares import share
from better_compute.domain.kernel.timewin import Window


@dataclass(frozen=True, slots=True)
class GpuState:
    """What decides how one GPU's capacity is accounted while it holds.

    `shares` maps each present atom of the GPU to its share of it (`domain.fleet.shares.share`), as the
    atoms were then: a booking is accounted at its atom's share at the time it held it.
    """

    gpu_id: str
    node_id: str
    pool_id: str | None
    healthy: bool
    cordoned: bool
    shares: tuple[tuple[str, Fraction], ...] = ()

    def share_of(self) -> dict[str, Fraction]:
        return dict(self.shares)


@dataclass(frozen=True, slots=True)
class GpuPeriod:
    """A GPU's state for a span of time; `span.end` None: it still holds."""

    state: GpuState
    span: Window


@dataclass(frozen=True, slots=True)
class StateChange:
    """Close the GPU's current period at `at` (if it has one) and, unless `state` is None (the GPU
    is gone), open one with `state` from `at`."""

    gpu_id: str
    at: datetime
    state: GpuState | None


def state_of(
    gpu_id: str, node_id: str, pool_id: str | None, healthy: bool, cordoned: bool, atoms: Iterable[Atom]
) -> GpuState:
    """The state of a present GPU with these atoms (those not present are left out)."""
    shares = sorted((a.id, share(a)) for a in atoms if a.present and a.gpu_id == gpu_id)
    return GpuState(gpu_id, node_id, pool_id, healthy, cordoned, tuple(shares))


def plan_changes(
    current: Mapping[str, GpuPeriod], now: Mapping[str, GpuState | None], at: datetime
) -> list[StateChange]:
    """What to write so that each GPU of `now` has the period it should: nothing for a GPU whose
    state is unchanged; otherwise close the open one and open the new one.

    `current` holds the open period of each GPU that has one. A change is never dated before the
    start of the period it closes (a server whose clock is behind another's): it takes effect at
    that start instead, so periods never overlap and never run backwards.
    """
    changes = []
    for gpu_id in sorted(now):
        state = now[gpu_id]
        open_period = current.get(gpu_id)
        if open_period is None and state is None:
            continue
        if open_period is not None and open_period.state == state:
            continue
        when = at if open_period is None else max(at, open_period.span.start)
        changes.append(StateChange(gpu_id, when, state))
    return changes
