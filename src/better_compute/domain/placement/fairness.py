"""Floors, fair sharing by weight, and who may evict whom (docs/scheduling.md#floors, #fair-sharing-by-weight;
seed 001 "Floor and over-quota weight", "Priority classes").

A project's device-class quota row carries `floor_devices` and `over_quota_weight`. Inside one
cluster and device class (the scope in which projects contend for the same devices), the rules are:

- **A floor is reserved against other projects.** The devices of a project's floor it does not use
  (`floor - held`, never below 0) are kept from other projects' non-preemptible work: such work sees
  the cluster's free devices less every other project's unused floor (`usable`). Preemptible work may
  use them (it *borrows*), and the owner takes them back by evicting it (`floor`, below).
- **Capacity above the floors is shared by weight.** A project's *dominant share* is, over the
  device classes it uses, the largest of (devices held above its floor) / (capacity above the
  floors), divided by its weight (Kueue's dominant resource share). Where projects contend, each
  one's devices tend to its weighted fair share (`fair_shares`: floors first, then the rest by
  weight, none given more than it asks).
- **Who may evict whom** (`Rules.why`), only ever a `preemptible` replica:
  - `priority`: a replica of lower priority, of any project;
  - `floor`: a project under its floor (its new replica still within it) evicts another project's
    replica of any priority, as long as that project stays at or above its own floor;
  - `fair_share`: a project whose dominant share is below another's evicts that project's replica of
    no higher priority than its own, when the eviction *strictly lowers the larger of the two
    shares*. Two equal projects one device apart therefore never evict each other (after the swap
    the larger share is what it was), so no two evictions can undo each other (kueue#3779): every
    eviction strictly lowers the largest share among the projects involved.
  - No eviction takes another project below its floor: a project's admitted work never goes below
    its floor because of someone else's new work.

Everything is pure: the service passes what each project holds in the cluster, its row, and the
cluster's capacity of the class.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from better_compute.domain.placement.class_quotas import ClassQuota
from better_compute.domain.placement.preemption import Candidate, Why

WHYS: tuple[Why, ...] = ("priority", "floor", "fair_share")

DEFAULT_WEIGHT = 1.0


@dataclass(frozen=True, slots=True)
class Entitlement:
    """What a project's quota row gives it in a cluster: its floor and its weight over the floors."""

    floor: int = 0
    weight: float = DEFAULT_WEIGHT


NONE = Entitlement()
"""A project with no row: no floor, weight 1."""


def entitlements(rows: Iterable[ClassQuota], cluster_id: str) -> dict[str, Entitlement]:
    """Each project's floor and weight in a cluster, from its rows of one device class: its
    cluster row, else its fleet row's weight (a floor is capacity in a place: a fleet row reserves
    none in any one cluster)."""
    out: dict[str, Entitlement] = {}
    for row in rows:
        if row.scope == "cluster" and row.cluster_id == cluster_id:
            out[row.tenant_id] = Entitlement(row.floor_devices, row.over_quota_weight)
        elif row.scope == "fleet" and row.tenant_id not in out:
            out[row.tenant_id] = Entitlement(0, row.over_quota_weight)
    return out


def unused_floor(entitlement: Entitlement, held: int) -> int:
    """The devices of a floor the project does not use now."""
    return max(0, entitlement.floor - held)


def reserved_for_others(
    tenant_id: str, entitlements: Mapping[str, Entitlement], held: Mapping[str, int]
) -> int:
    """Devices other projects' unused floors keep from `tenant_id`'s non-preemptible work."""
    return sum(unused_floor(e, held.get(t, 0)) for t, e in entitlements.items() if t != tenant_id)


def usable(free_devices: int, reserved: int, preemptible: bool) -> int:
    """Free devices a workload may take: preemptible work borrows other projects' unused floors,
    other work leaves them."""
    return free_devices if preemptible else max(0, free_devices - reserved)


def dominant_share(
    above_floor: Mapping[str, int], capacity_above_floors: Mapping[str, int], weight: float
) -> float:
    """A project's dominant share: over the device classes, the largest fraction of the capacity
    above the floors that it holds above its own floor, divided by its weight."""
    most = 0.0
    for cls, held in above_floor.items():
        capacity = capacity_above_floors.get(cls, 0)
        if held > 0:
            most = max(most, held / capacity if capacity > 0 else float("inf"))
    return most / weight


def fair_shares(
    capacity: int, demands: Mapping[str, int], entitlements: Mapping[str, Entitlement]
) -> dict[str, float]:
    """Each project's weighted fair share of `capacity` devices: its floor first (up to what it
    asks), then what is left divided by weight (water-filling), none given more than it asks
    (`demands`: what each project would hold with all it asks for)."""
    share = {t: float(min(d, entitlements.get(t, NONE).floor)) for t, d in demands.items()}
    left = max(0.0, capacity - sum(share.values()))
    hungry = {t for t, d in demands.items() if d > share[t]}
    while left > 1e-9 and hungry:
        total = sum(entitlements.get(t, NONE).weight for t in hungry)
        full = set()
        given = 0.0
        for t in hungry:
            offer = left * entitlements.get(t, NONE).weight / total
            take = min(offer, demands[t] - share[t])
            share[t] += take
            given += take
            if share[t] >= demands[t] - 1e-9:
                full.add(t)
        left -= given
        if not full:
            break
        hungry -= full
    return share


def admission_order(
    waiting: Iterable[tuple[str, int, datetime]], preempted_by: Mapping[str, str] | None = None
) -> list[str]:
    """The order in which waiting workloads are placed again, given (id, priority, created): the
    higher priority first, then the oldest; and a workload that evicted another (`preempted_by`:
    victim -> preemptor) always before it, whatever their priorities (an eviction for a floor or
    a fair share may be by lower priority): the devices its victims free are its, and a victim
    placed first would take them back only to be evicted again."""
    ordered = [w for w, _, _ in sorted(waiting, key=lambda x: (-x[1], x[2], x[0]))]
    waits = set(ordered)
    before = preempted_by or {}
    out: list[str] = []
    done: set[str] = set()
    for workload in ordered:
        chain = [workload]  # the workload, who evicted it, who evicted that one, ... (no cycle)
        while (first := before.get(chain[-1])) is not None and first in waits and first not in chain:
            chain.append(first)
        for each in reversed(chain):
            if each not in done:
                done.add(each)
                out.append(each)
    return out


@dataclass
class Rules:
    """Who a workload may evict in one cluster and device class (module docstring). It counts what
    each project holds there, and what the plan has evicted and placed so far (`planned`)."""

    tenant_id: str
    priority: int
    held: dict[str, int]
    """Devices of the class each project holds in the cluster now."""
    entitlements: Mapping[str, Entitlement] = field(default_factory=dict)
    capacity: int = 0
    """Devices of the class in the cluster, free or not."""
    devices: int = 1
    """Devices of the class one replica of the workload needs."""
    fair: bool = True
    """Whether floors and fair sharing may evict (False: priority alone)."""
    workload_id: str | None = None
    """The workload placed: its own replicas are never its victims."""
    skip_tenants: frozenset[str] = frozenset()
    """Projects left out of this decision (another write holds their lock)."""

    @property
    def counts_holdings(self) -> bool:
        return True  # the floors' budgets and the shares move with every replica planned

    def skips(self, candidate: Candidate) -> bool:
        return candidate.workload_id == self.workload_id or candidate.tenant_id in self.skip_tenants

    def budget(self, tenant_id: str) -> int | None:
        if tenant_id == self.tenant_id:
            return None
        floor = self._row(tenant_id).floor
        return max(0, self.held.get(tenant_id, 0) - floor) if floor else None

    def _row(self, tenant_id: str) -> Entitlement:
        return self.entitlements.get(tenant_id, NONE)

    def __post_init__(self) -> None:
        self._above_floors = max(1, self.capacity - sum(e.floor for e in self.entitlements.values()))

    def share(self, tenant_id: str, held: int) -> float:
        """The project's dominant share in the cluster if it held `held` devices of the class."""
        row = self._row(tenant_id)
        return dominant_share({"": max(0, held - row.floor)}, {"": self._above_floors}, row.weight)

    def why(self, candidate: Candidate) -> Why | None:
        """Under which rule `candidate` may be evicted for one more replica (None: it may not)."""
        devices = self.devices
        if not candidate.preemptible:
            return None
        victim = candidate.tenant_id
        size = len(candidate.devices)
        floor = self._row(victim).floor
        if victim != self.tenant_id and floor and self.held.get(victim, 0) - size < floor:
            return None  # never below the victim's floor
        if candidate.priority < self.priority:
            return "priority"
        if victim == self.tenant_id or not self.fair:
            return None
        mine = self.held.get(self.tenant_id, 0)
        if mine + devices <= self._row(self.tenant_id).floor:
            return "floor"
        if candidate.priority > self.priority:
            return None
        return "fair_share" if self.fairer(victim, devices, size) else None

    def fairer(self, victim: str, devices: int, size: int) -> bool:
        """Whether moving `size` devices from `victim` to this project (which gains `devices`) takes
        it from below the victim's share and strictly lowers the larger of the two shares."""
        mine, theirs = self.held.get(self.tenant_id, 0), self.held.get(victim, 0)
        before = (self.share(self.tenant_id, mine), self.share(victim, theirs))
        if before[0] >= before[1]:
            return False
        after = (self.share(self.tenant_id, mine + devices), self.share(victim, theirs - size))
        return max(after) < max(before)

    def planned(self, victims: Sequence[Candidate], devices: int) -> None:
        for victim in victims:
            self.held[victim.tenant_id] = self.held.get(victim.tenant_id, 0) - len(victim.devices)
        self.held[self.tenant_id] = self.held.get(self.tenant_id, 0) + devices


__all__ = [
    "NONE",
    "WHYS",
    "Entitlement",
    "Rules",
    "admission_order",
    "dominant_share",
    "entitlements",
    "fair_shares",
    "reserved_for_others",
    "unused_floor",
    "usable",
]
