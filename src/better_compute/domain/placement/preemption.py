"""Preemption: which running replicas a workload evicts to get the devices it needs (SPEC 10; seed 001
"Priority classes": "a high-priority workload will be able to evict a preemptible lower-priority one").

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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from better_compute.domain.placement.topology import DomainKind, FreeDevice, domain_of

Why = str
"""Why a victim may be evicted: `priority`, `floor` or `fair_share` (`fairness.WHYS`)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A running replica another workload might take the devices of."""

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
        """Under which rule the candidate may be evicted now (None: it may not)."""
        ...

    def planned(self, victims: Sequence[Candidate], devices: int) -> None:
        """One replica of `devices` devices was planned, evicting `victims`."""
        ...


def _preference(c: Candidate) -> tuple[int, float, str]:
    """Lowest priority first, then newest first, then by allocation id."""
    return (c.priority, -c.started.timestamp(), c.allocation_id)


def _cost(victims: Sequence[Candidate]) -> tuple[int, tuple[tuple[int, float, str], ...]]:
    """How much evicting `victims` disturbs: how many, then the worst of them first (its priority,
    how long it ran), so the set that spares the higher and the older wins."""
    worst_first = sorted((_preference(c) for c in victims), reverse=True)
    return (len(victims), tuple(worst_first))


def _fewest(needed: int, sizes: Sequence[tuple[Candidate, int]]) -> list[Candidate] | None:
    """The fewest candidates whose devices here add up to `needed`, preferred ones first among sets
    of that size (None: all of them together are not enough)."""
    by_size = sorted((n for _, n in sizes), reverse=True)
    total, count = 0, 0
    for n in by_size:
        if total >= needed:
            break
        total += n
        count += 1
    if total < needed:
        return None
    chosen: list[Candidate] = []
    rest = sorted(sizes, key=lambda cn: _preference(cn[0]))
    left = needed
    for i, (candidate, n) in enumerate(rest):
        if left <= 0:
            break
        slots = count - len(chosen) - 1
        others = sorted((m for _, m in rest[i + 1 :]), reverse=True)[:slots]
        if n + sum(others) >= left:
            chosen.append(candidate)
            left -= n
    return chosen if left <= 0 else None


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
    makes room for is left out: `Eviction.replicas` says how many fit."""
    if device_count <= 0 or replicas <= 0:
        return Eviction((), 0)
    free_in: dict[tuple[str, str], int] = {}
    for device in free:
        key = domain_of(device, kind)
        free_in[key] = free_in.get(key, 0) + 1
    present: dict[tuple[str, str], dict[str, tuple[Candidate, int]]] = {}
    for candidate in candidates:
        counts: dict[tuple[str, str], int] = {}
        for device in candidate.devices:
            key = domain_of(device, kind)
            counts[key] = counts.get(key, 0) + 1
        for key, n in counts.items():
            present.setdefault(key, {})[candidate.allocation_id] = (candidate, n)
    chosen: list[Victim] = []
    gone: set[str] = set()
    opened = 0
    why_of: dict[str, Why | None] = {}
    while opened < replicas:
        if eligible.counts_holdings:
            why_of.clear()
        best: tuple[tuple[int, tuple[tuple[int, float, str], ...]], tuple[str, str], list[Candidate]] | None
        best = None
        for key in sorted(set(free_in) | set(present)):
            have = free_in.get(key, 0)
            if have >= device_count:
                best = ((0, ()), key, [])
                break
            sizes = []
            for allocation_id, (candidate, n) in present.get(key, {}).items():
                if allocation_id in gone:
                    continue
                if allocation_id not in why_of:
                    why_of[allocation_id] = eligible.why(candidate)
                if why_of[allocation_id] is not None:
                    sizes.append((candidate, n))
            if have + sum(n for _, n in sizes) < device_count:
                continue
            victims = _fewest(device_count - have, sizes)
            if victims is None:
                continue
            cost = _cost(victims)
            if best is None or (cost, key) < (best[0], best[1]):
                best = (cost, key, victims)
        if best is None:
            break
        _, key, victims = best
        for candidate in victims:
            why = why_of[candidate.allocation_id]
            assert why is not None
            chosen.append(Victim(candidate, why))
            gone.add(candidate.allocation_id)
            for device in candidate.devices:
                k = domain_of(device, kind)
                free_in[k] = free_in.get(k, 0) + 1
        free_in[key] -= device_count
        opened += 1
        eligible.planned(victims, device_count)
    return Eviction(tuple(chosen), opened)


__all__ = ["Candidate", "Eligibility", "Eviction", "Victim", "Why", "plan_preemption"]
