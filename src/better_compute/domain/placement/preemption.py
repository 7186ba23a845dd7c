"""Preemption: which running replicas a workload evicts to get the devices it needs
(docs/scheduling.md#preemption-by-priority; seed 001 "Priority classes": "a high-priority workload will be
able to evict a preemptible lower-priority one").

Who may be evicted is `domain.placement.fairness.may_evict` (priority, a floor reclaimed, fair
sharing); this module answers the other question: of the replicas that may be evicted in one
cluster, which to evict so that the workload's replicas fit, disturbing the least.

The rule, as a user reads it:

- **Only sets that open the hole.** A replica of N devices sits on one node (or one topology domain
  of the kind it requires: `topology.domain_of`), so victims count only where, together with the
  free devices beside them, they leave N devices of the class in one group. Two replicas evicted on
  two nodes do not make room for one replica of two devices; devices of another class (a 1g.10gb
  where a 3g.40gb is asked) never count, since a victim is a candidate only for the devices of the
  class it holds.
- **The fewest replicas evicted**, then **the lowest priority first**, then **the newest first**
  (what ran longest keeps running), then the smallest allocation id (so every server process
  decides alike).
- Replica by replica: each replica asked for takes the group whose hole is cheapest by the rule
  above (a group already free costs nothing), and what it evicts is gone for the next.

`plan_preemption` is pure and deterministic; the service reads the candidates and applies the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, Protocol

from better_compute.domain.placement.topology import DomainKind, FreeDevice, domain_of

Why = str
"""Why a victim may be evicted: `priority`, `floor` or `fair_share` (`fairness.WHYS`)."""


class Candidate(NamedTuple):
    """A running replica another workload might take the devices of (a named tuple: a decision
    reads thousands of them, and a tuple is made several times faster than a frozen dataclass)."""

    allocation_id: str
    workload_id: str
    tenant_id: str
    devices: tuple[FreeDevice, ...]
    """The devices it holds of the class asked for, where they sit."""
    priority: int
    preemptible: bool
    started: datetime
    """When its booking began: of equals, the newest goes first."""
    priority_class: str = "standard"
    deployment_id: str = ""
    reservation: bool = False
    """A reservation made with `preemptible: true` (its `allocation_id` is the reservation's id)."""


@dataclass(frozen=True, slots=True)
class Victim:
    """A candidate chosen, and the rule that let it be evicted."""

    candidate: Candidate
    why: Why


@dataclass(frozen=True, slots=True)
class Eviction:
    """The plan for one cluster: the victims, in the order chosen, and how many of the replicas
    asked for they (with the free devices) make room for."""

    victims: tuple[Victim, ...]
    replicas: int

    @property
    def allocation_ids(self) -> tuple[str, ...]:
        return tuple(v.candidate.allocation_id for v in self.victims)


class Eligibility(Protocol):
    """Who may be evicted (`fairness.Rules` is the one the service passes)."""

    @property
    def counts_holdings(self) -> bool:
        """Whether `why` depends on what each project holds (then it is asked again after each
        replica planned)."""
        ...

    def why(self, candidate: Candidate) -> Why | None:
        """Under which rule the candidate may be evicted now (None: it may not). It may depend on
        the candidate's project, priority and number of devices only: the planner asks once per
        such kind of replica."""
        ...

    def planned(self, victims: Sequence[Candidate], devices: int) -> None:
        """One replica of `devices` devices was planned, evicting `victims`."""
        ...

    def budget(self, tenant_id: str) -> int | None:
        """How many devices may be taken from a project in all now (None: no limit): what keeps
        it at its floor, which no set of victims may cross."""
        ...

    def skips(self, candidate: Candidate) -> bool:
        """Whether this candidate is out of the question whatever the rules (the workload's own
        replicas; a project whose lock another write holds): asked of each, before `why`."""
        ...


Preference = tuple[int, float, str]
Cost = tuple[int, tuple[Preference, ...]]


def _preference(c: Candidate) -> Preference:
    """Lowest priority first, then newest first, then by allocation id."""
    return (c.priority, -c.started.timestamp(), c.allocation_id)


class _Member(NamedTuple):
    """A candidate in one group: its preference, and how many of its devices are in the group."""

    preference: Preference
    candidate: Candidate
    devices: int
    kind: tuple[str, int, int]
    """What the eligibility rule looks at (project, devices, priority): asked once per kind."""


def _cost(victims: Sequence[_Member]) -> Cost:
    """How much evicting `victims` disturbs: how many, then the worst of them first (its priority,
    how long it ran), so the set that spares the higher and the older wins."""
    return (len(victims), tuple(sorted((m.preference for m in victims), reverse=True)))


def _fewest(
    needed: int, members: Sequence[_Member], budget: Callable[[str], int | None]
) -> list[_Member] | None:
    """The fewest members whose devices here add up to `needed` and, among sets of that size, the
    one whose worst victim is best, then its second worst, and so on (`_cost`). `members` are in
    preference order (best first); `budget(project)` is how many devices may be taken from a
    project at most (None: no limit). None: no such set."""
    by_size = sorted((m.devices for m in members), reverse=True)
    total, count = 0, 0
    for n in by_size:
        if total >= needed:
            break
        total += n
        count += 1
    if total < needed:
        return None
    limits: dict[str, int | None] = {}
    for m in members:
        if m.candidate.tenant_id not in limits:
            limits[m.candidate.tenant_id] = budget(m.candidate.tenant_id)
    for size in range(count, len(members) + 1):  # more victims only when budgets forbid the fewest
        found = _best_set(needed, members, len(members), size, limits, {})
        if found is not None:
            return found
    return None


def _best_set(
    needed: int,
    members: Sequence[_Member],
    end: int,
    size: int,
    limits: Mapping[str, int | None],
    taken: dict[str, int],
) -> list[_Member] | None:
    """Of `members[:end]`, at most `size` whose devices add up to `needed` within the projects'
    limits, choosing the best possible worst member first (then, recursively, the rest)."""
    if needed <= 0:
        return []
    if size == 0:
        return None
    for i in range(end):
        member = members[i]
        tenant = member.candidate.tenant_id
        limit = limits.get(tenant)
        took = taken.get(tenant, 0) + len(member.candidate.devices)
        if limit is not None and took > limit:
            continue
        best_others = sum(sorted((m.devices for m in members[:i]), reverse=True)[: size - 1])
        if member.devices + best_others < needed:
            continue  # even the largest of the better members do not fill the hole with this one
        taken[tenant] = took
        rest = _best_set(needed - member.devices, members, i, size - 1, limits, taken)
        taken[tenant] = took - len(member.candidate.devices)
        if rest is not None:
            return [*rest, member]
    return None


def _groups_of(devices: Sequence[FreeDevice], kind: DomainKind | None) -> list[tuple[tuple[str, str], int]]:
    """The groups a replica's devices are in, with how many in each (one node, without a kind)."""
    if not devices:
        return []
    if kind is None and len(devices) == 1:
        return [((devices[0].node, ""), 1)]
    node = devices[0].node
    if kind is None and all(d.node == node for d in devices):
        return [((node, ""), len(devices))]
    counts: dict[tuple[str, str], int] = {}
    for device in devices:
        key = domain_of(device, kind)
        counts[key] = counts.get(key, 0) + 1
    return list(counts.items())


@dataclass(frozen=True, slots=True)
class Board:
    """Who runs where in one cluster, grouped as replicas of one topology kind need (`board`): the
    free devices per group, and per group its preemptible replicas in preference order. Built once
    per change of the bookings and asked any number of decisions (`plan_on` changes nothing)."""

    kind: DomainKind | None
    free: Mapping[tuple[str, str], int]
    members: Mapping[tuple[str, str], tuple[_Member, ...]]
    sizes: Mapping[tuple[str, str], tuple[int, ...]]
    """Per group, its members' devices there, largest first (how few victims a hole needs, at least)."""


def board(free: Iterable[FreeDevice], candidates: Iterable[Candidate], kind: DomainKind | None) -> Board:
    """The `Board` of these free devices and running replicas. Only `preemptible` replicas are
    kept: no rule ever evicts another."""
    return with_free(running_board(candidates, kind), free)


def with_free(board: Board, free: Iterable[FreeDevice]) -> Board:
    """`board` with these free devices (what changes between decisions far more often, and far
    cheaper to count, than who runs where)."""
    free_in: dict[tuple[str, str], int] = {}
    kind = board.kind
    for device in free:
        key = (device.node, "") if kind is None else domain_of(device, kind)
        free_in[key] = free_in.get(key, 0) + 1
    return Board(kind, free_in, board.members, board.sizes)


def running_board(candidates: Iterable[Candidate], kind: DomainKind | None) -> Board:
    """A `Board` of these running replicas and no free device."""
    present: dict[tuple[str, str], list[_Member]] = {}
    for candidate in candidates:
        if not candidate.preemptible:
            continue
        preference = _preference(candidate)
        what = (candidate.tenant_id, len(candidate.devices), candidate.priority)
        for key, n in _groups_of(candidate.devices, kind):
            present.setdefault(key, []).append(_Member(preference, candidate, n, what))
    members = {k: tuple(sorted(ms, key=lambda m: m.preference)) for k, ms in present.items()}
    sizes = {k: tuple(sorted((m.devices for m in ms), reverse=True)) for k, ms in members.items()}
    return Board(kind, {}, members, sizes)


def plan_preemption(
    free: Iterable[FreeDevice],
    candidates: Iterable[Candidate],
    device_count: int,
    replicas: int,
    kind: DomainKind | None,
    eligible: Eligibility,
) -> Eviction:
    """Victims among `candidates` that, with the `free` devices, make room for up to `replicas`
    replicas of `device_count` devices each (module docstring). A replica that no eligible set
    makes room for is left out: `Eviction.replicas` says how many fit. Only `preemptible`
    candidates are ever victims, whatever `eligible` says."""
    return plan_on(board(free, candidates, kind), device_count, replicas, eligible)


def _bound(sizes: Sequence[int], members: Sequence[_Member], need: int) -> tuple[int, Preference] | None:
    """The least a hole of `need` devices in a group can cost: the fewest victims its members'
    sizes allow, and the best its worst victim can be (the k-th preferred member). None: even all of
    them are not enough."""
    total = 0
    for k, n in enumerate(sizes, 1):
        total += n
        if total >= need:
            return (k, members[k - 1].preference)
    return None


def plan_on(board: Board, device_count: int, replicas: int, eligible: Eligibility) -> Eviction:
    """`plan_preemption` over a prepared `Board`. Groups are looked at in the order of the least
    their hole can cost, and the search stops once no group left can beat the best found."""
    if device_count <= 0 or replicas <= 0:
        return Eviction((), 0)
    kind = board.kind
    free_in = dict(board.free)
    gone: set[str] = set()
    chosen: list[Victim] = []
    opened = 0
    why_of: dict[tuple[str, int, int], Why | None] = {}
    keys = sorted(set(free_in) | set(board.members))
    while opened < replicas:
        if eligible.counts_holdings:
            why_of.clear()
        best: tuple[Cost, tuple[str, str], list[_Member]] | None
        best = next((((0, ()), k, []) for k in keys if free_in.get(k, 0) >= device_count), None)
        if best is None:
            bounds = []
            for key, in_group in board.members.items():
                bound = _bound(board.sizes[key], in_group, device_count - free_in.get(key, 0))
                if bound is not None:
                    bounds.append((bound, key))
            bounds.sort()
            for (count, worst), key in bounds:
                if best is not None and (count, worst) > (best[0][0], best[0][1][0]):
                    break  # neither this group nor any after it can cost less
                open_to: list[_Member] = []
                for member in board.members[key]:
                    if member.candidate.allocation_id in gone or eligible.skips(member.candidate):
                        continue
                    if member.kind not in why_of:
                        why_of[member.kind] = eligible.why(member.candidate)
                    if why_of[member.kind] is not None:
                        open_to.append(member)
                victims = _fewest(device_count - free_in.get(key, 0), open_to, eligible.budget)
                if victims is None:
                    continue
                cost = _cost(victims)
                if best is None or (cost, key) < (best[0], best[1]):
                    best = (cost, key, victims)
        if best is None:
            break
        _, key, victims = best
        for member in victims:
            why = why_of[member.kind]
            assert why is not None
            candidate = member.candidate
            chosen.append(Victim(candidate, why))
            gone.add(candidate.allocation_id)
            for k, n in _groups_of(candidate.devices, kind):
                free_in[k] = free_in.get(k, 0) + n
        free_in[key] -= device_count
        opened += 1
        eligible.planned([m.candidate for m in victims], device_count)
    return Eviction(tuple(chosen), opened)


__all__ = [
    "Board",
    "Candidate",
    "Eligibility",
    "Eviction",
    "Victim",
    "Why",
    "board",
    "plan_on",
    "plan_preemption",
    "running_board",
    "with_free",
]
