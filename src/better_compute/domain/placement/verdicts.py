"""A verdict per cluster, and the placement of a workload's replicas over them (docs/placement.md#the-flow,
steps 1-5).

`plan_placement` takes what the service read in one snapshot, per cluster: whether a policy or the
cluster's phase denies it, its free devices of the class and how many replicas they hold (`Room`),
the quota left to the project there, and what the workload has there now. It answers with the
shares (`shares.divide`) and, for every cluster, a verdict: admitted, or the reason it was not, in
the order the seed checks them:

1. `policy_denied`: a policy's constraint, or a cluster that is not `active`;
2. `insufficient_capacity`: fewer free devices of the class than one replica needs (or no node
   with that many, since a replica sits on one node);
3. `topology_constraint_not_met`: enough devices, but no single domain of the kind holds a replica;
4. `insufficient_quota`: the quota left there is under one replica's devices.

A policy's `costCeiling` (the most the workload may cost per hour) is checked right after the
policies' other constraints: `cost_ceiling_exceeded` when the workload's replicas, all run in that
cluster, would cost more per hour than the ceiling (`Cost`), or when the cluster's price is not
known. A cluster under the ceiling for all the replicas keeps any mix of clusters under it too.

A cluster that already runs some of the workload's replicas keeps them whatever its verdict says
about taking more. A pinned workload is given all its replicas in its cluster; the cluster's verdict
then says how many it can take now and why not the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from better_compute.domain.placement.costs import Cost, money
from better_compute.domain.placement.preemption import Eviction
from better_compute.domain.placement.shares import Division, Strategy, divide, shrink
from better_compute.domain.placement.topology import Room

Reason = Literal[
    "insufficient_quota",
    "insufficient_capacity",
    "topology_constraint_not_met",
    "policy_denied",
    "cost_ceiling_exceeded",
    "preempted",
]
REASONS: tuple[Reason, ...] = (
    "insufficient_quota",
    "insufficient_capacity",
    "topology_constraint_not_met",
    "policy_denied",
    "cost_ceiling_exceeded",
    "preempted",
)
"""Why replicas are not where they were asked: a cluster's verdict gives one of the first five; a
deployment shows `preempted` when another workload's placement evicted its replicas."""


@dataclass(frozen=True, slots=True)
class ClusterFigures:
    """What one cluster offers one workload now (read by the service in one snapshot)."""

    cluster_id: str
    room: Room
    quota_left: int | None
    """Devices of the class the project may still take there (None: no quota row limits it)."""
    denial: str | None = None
    """Why a policy or the cluster's phase refuses it (a message), or None."""
    current: int = 0
    """Replicas of the workload there now (its deployment's desired count)."""
    fleet_scoped: bool = False
    """Whether `quota_left` is the fleet row's (shared by every cluster without a row of its own)."""
    cost: Cost | None = None
    """The cost of a replica there against the policies' ceiling (None: no ceiling applies)."""
    reserved: int = 0
    """Free devices other projects' unused floors keep from this workload (`fairness.usable`)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """One cluster's answer: whether it takes replicas, why not, and the figures that decided."""

    cluster_id: str
    admitted: bool
    reason: Reason | None
    message: str
    free_devices: int
    quota_left: int | None
    largest_domain: int
    room: int
    """New replicas it could take now (capacity and quota both counted)."""
    share: int = 0
    shortfall: int = 0
    cost_per_hour: str | None = None
    """What the workload's replicas would cost per hour there, all of them (a decimal, in the
    price's currency), when a cost ceiling applies and the price is known."""


@dataclass(frozen=True, slots=True)
class Ask:
    """What a workload asks of placement."""

    device_count: int
    replicas: int
    strategy: Strategy = "pack"
    floors: Mapping[str, int] = field(default_factory=dict)
    max_clusters: int | None = None
    pinned: str | None = None
    single_domain: bool = False


@dataclass(frozen=True, slots=True)
class Placement:
    """The shares chosen (clusters in the order they were chosen), a verdict per cluster considered,
    and how many replicas no cluster could take (`unplaced`, also counted in the verdicts' shortfalls
    where one cluster was meant to take them)."""

    shares: dict[str, int]
    verdicts: tuple[Verdict, ...]
    unplaced: int

    evictions: Mapping[str, Eviction] = field(default_factory=dict)
    """By cluster, the replicas to evict for the shares (`domain.placement.preemption`); the shares
    count the replicas they make room for."""

    def verdict(self, cluster_id: str) -> Verdict | None:
        return next((v for v in self.verdicts if v.cluster_id == cluster_id), None)


def judge(ask: Ask, figures: ClusterFigures) -> Verdict:
    """One cluster's verdict for new replicas of `ask` (its share is filled in by `plan_placement`)."""
    room, count = figures.room, ask.device_count
    by_quota = None if figures.quota_left is None else max(0, figures.quota_left) // count
    can_take = room.replicas if by_quota is None else min(room.replicas, by_quota)
    by_floors = None
    if figures.reserved > 0:
        # other projects' unused floors are kept from non-preemptible work (`fairness.usable`)
        by_floors = max(0, room.free_devices - figures.reserved) // count
        can_take = min(can_take, by_floors)
    reason: Reason | None = None
    message = f"cluster {figures.cluster_id} can take {can_take} more replica(s) of {count} device(s)"
    if by_floors is not None and by_floors < room.replicas:
        kept = min(figures.reserved, room.free_devices)
        message += f"; {kept} free device(s) there are other projects' unused floors"
    cost = figures.cost
    total = None if cost is None or cost.per_replica is None else cost.per_replica * max(1, ask.replicas)
    if figures.denial is not None:
        reason, message, can_take = "policy_denied", figures.denial, 0
    elif cost is not None and total is None:
        reason, can_take = "cost_ceiling_exceeded", 0
        message = (
            f"cluster {figures.cluster_id}'s meter {cost.unpriced} has no price, so the cost ceiling of"
            f" {money(cost.ceiling)} per hour cannot be checked"
        )
    elif cost is not None and total is not None and total > cost.ceiling:
        reason, can_take = "cost_ceiling_exceeded", 0
        message = (
            f"{max(1, ask.replicas)} replica(s) in cluster {figures.cluster_id} would cost"
            f" {money(total)}{_in(cost.currency)} per hour; the cost ceiling is {money(cost.ceiling)}"
        )
    elif by_floors == 0 and room.replicas > 0:
        reason = "insufficient_capacity"
        message = (
            f"cluster {figures.cluster_id} has {room.free_devices} free device(s) of the class;"
            f" {min(figures.reserved, room.free_devices)} of them are other projects' unused floors,"
            " which only preemptible work may use; a replica needs"
            f" {count}"
        )
    elif room.free_devices < count:
        reason = "insufficient_capacity"
        message = (
            f"cluster {figures.cluster_id} has {room.free_devices} free device(s) of the class;"
            f" a replica needs {count}"
        )
    elif room.replicas == 0 and ask.single_domain:
        reason = "topology_constraint_not_met"
        message = (
            f"cluster {figures.cluster_id} has {room.free_devices} free device(s) of the class, at most"
            f" {room.largest_group} in one topology domain; a replica needs {count} in one"
        )
    elif room.replicas == 0:
        reason = "insufficient_capacity"
        message = (
            f"cluster {figures.cluster_id} has {room.free_devices} free device(s) of the class, at most"
            f" {room.largest_group} on one node; a replica needs {count} on one node"
        )
    elif by_quota == 0:
        reason = "insufficient_quota"
        message = (
            f"the project may take {figures.quota_left} more device(s) of the class in cluster"
            f" {figures.cluster_id}; a replica needs {count}"
        )
    return Verdict(
        cluster_id=figures.cluster_id,
        admitted=reason is None,
        reason=reason,
        message=message,
        free_devices=room.free_devices,
        quota_left=figures.quota_left,
        largest_domain=room.largest_group,
        room=can_take,
        cost_per_hour=None if total is None else money(total),
    )


def _in(currency: str | None) -> str:
    return f" {currency}" if currency else ""


def plan_placement(
    ask: Ask, figures: Sequence[ClusterFigures], fleet_left: int | None = None, salt: int = 0
) -> Placement:
    """Shares for `ask.replicas` over `figures`' clusters and a verdict for each (module docstring).
    Scaling down (fewer replicas than the clusters hold now) takes replicas away in proportion.

    `fleet_left` is what the fleet row leaves the project of the class: the clusters it decides in
    (`fleet_scoped`) share it, so their new replicas together stay within it. `salt` breaks ties
    between equally good clusters (`shares.divide`)."""
    verdicts = {f.cluster_id: judge(ask, f) for f in figures}
    current = {f.cluster_id: f.current for f in figures if f.current > 0}
    have = sum(current.values())
    if ask.pinned is not None:
        pinned = verdicts.get(ask.pinned)
        now = current.get(ask.pinned, 0)
        takes = now + (pinned.room if pinned is not None else 0)
        division = Division({ask.pinned: ask.replicas}, 0) if ask.replicas > 0 else Division({}, 0)
        short = {ask.pinned: max(0, ask.replicas - takes)}
    elif ask.replicas < have:
        division = Division(shrink(ask.replicas, current, ask.floors), 0)
        short = {}
    else:
        room = {c: current.get(c, 0) + v.room for c, v in verdicts.items() if v.admitted}
        division = divide(
            ask.replicas,
            room,
            current,
            strategy=ask.strategy,
            floors=ask.floors,
            max_clusters=ask.max_clusters,
            salt=salt,
        )
        if fleet_left is not None:
            division = _within_fleet(division, current, figures, fleet_left // ask.device_count)
        short = _shortfalls(division, ask.strategy)
    out = tuple(_with(verdicts[c], division.shares.get(c, 0), short.get(c, 0)) for c in sorted(verdicts))
    unplaced = sum(short.values()) if ask.pinned is not None else division.unplaced
    return Placement(division.shares, out, unplaced)


def _within_fleet(
    division: Division, current: Mapping[str, int], figures: Sequence[ClusterFigures], allowed: int
) -> Division:
    """Trim new replicas in fleet-scoped clusters to `allowed` in all, from the last chosen back."""
    scoped = {f.cluster_id for f in figures if f.fleet_scoped}
    shares = dict(division.shares)
    new = {c: n - current.get(c, 0) for c, n in shares.items() if c in scoped}
    excess = sum(max(0, n) for n in new.values()) - max(0, allowed)
    trimmed = 0
    for cluster in reversed(list(shares)):
        if excess <= 0:
            break
        take = min(excess, max(0, new.get(cluster, 0)))
        shares[cluster] -= take
        excess -= take
        trimmed += take
    return Division({c: n for c, n in shares.items() if n > 0}, division.unplaced + trimmed)


def _shortfalls(division: Division, strategy: Strategy) -> dict[str, int]:
    """Who was meant to take the replicas nobody had room for: the cluster packed first, or under
    spread each chosen cluster in turn."""
    if division.unplaced <= 0 or not division.shares:
        return {}
    chosen = list(division.shares)
    if strategy == "pack":
        return {chosen[0]: division.unplaced}
    out = dict.fromkeys(chosen, division.unplaced // len(chosen))
    for cluster in chosen[: division.unplaced % len(chosen)]:
        out[cluster] += 1
    return {c: n for c, n in out.items() if n > 0}


def _with(verdict: Verdict, share: int, shortfall: int) -> Verdict:
    return Verdict(
        verdict.cluster_id,
        verdict.admitted or share > 0,
        verdict.reason,
        verdict.message,
        verdict.free_devices,
        verdict.quota_left,
        verdict.largest_domain,
        verdict.room,
        share,
        shortfall,
        verdict.cost_per_hour,
    )


__all__ = [
    "REASONS",
    "Ask",
    "ClusterFigures",
    "Cost",
    "Placement",
    "Reason",
    "Verdict",
    "judge",
    "plan_placement",
]
