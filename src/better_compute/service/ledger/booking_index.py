"""An in-memory cache of the ledger and of each pool's atoms, kept current by tailing the event log.

Choosing atoms needs to know, for a window, which atoms are booked and which GPUs are partly used;
an atom is taken when a booking of it, or of its GPU's family that excludes it (the whole GPU and a
part of it: `domain.ledger.ledger.family_excludes`), meets the window, whether or not the booked atom is
bookable now (a parent of a GPU split since, an instance gone);
asking the database that for every reservation over tens of thousands of atoms is the slow part of
admission. Every ledger change appends an event in its own transaction, so a replica catches up by
reading the events after the last one it saw. The cache may lag behind another replica's commit: the
database's exclusion constraint is still the fence, and a refused write makes the caller resync.
"""

from __future__ import annotations

import bisect
import heapq
import threading
import time
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

from better_compute.domain.endpoints.events import (
    ComponentChanged,
    EndpointCreated,
    EndpointDeleted,
    EndpointUpdated,
)
from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.events import (
    AllocationBound,
    AllocationReleased,
    ClusterCreated,
    ClusterUpdated,
    GpuReleased,
    NodeInventoryChanged,
    NodeJoined,
    NodeLayoutRefused,
    NodeRebootRequired,
    NodeReportRefused,
    NodeScrubbed,
)
from better_compute.domain.gate.events import NodeMigApplied, NodeMigGranted, NodeMigScheduled
from better_compute.domain.kernel.atom_classes import AtomClass
from better_compute.domain.kernel.events import LoggedEvent
from better_compute.domain.kernel.selectors import Selector
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger import choose
from better_compute.domain.ledger.admission import DeviceRequest
from better_compute.domain.ledger.events import (
    LedgerBooked,
    LedgerCancelled,
    LedgerExtended,
    LedgerRebound,
    LedgerReleased,
    PartitionBooked,
    PartitionReleased,
    ReservationCancelled,
    ReservationCreated,
    ReservationExtended,
    ReservationReleased,
)
from better_compute.domain.ledger.ledger import family_excludes, released
from better_compute.domain.metering.events import PriceSet
from better_compute.domain.ops.events import DoctorRun
from better_compute.domain.placement.events import (
    DeploymentUpdated,
    DeviceClassCreated,
    PriorityClassCreated,
    ReservationPreempted,
    WorkloadCreated,
    WorkloadDecided,
    WorkloadDeleted,
    WorkloadDrained,
    WorkloadPreempted,
    WorkloadScaled,
)
from better_compute.domain.tenancy import quota
from better_compute.domain.tenancy.events import (
    CredentialCreated,
    CredentialRevoked,
    PolicyCreated,
    PolicyDeleted,
    PolicyUpdated,
    PoolOffered,
    QuotaSet,
    TenantCreated,
)
from better_compute.service.kernel.event_tail import Cursor, Follower, LogSnapshot
from better_compute.service.ledger.ports import LedgerTx

Owner = tuple[str | None, str | None, str | None]
# Bookings are filed under every bucket they touch, so that finding those that overlap a window looks
# at little more than the bookings that do. Short bookings are filed by the hour (with day buckets, an
# hour's request looked at a whole day's bookings: 24 times as many on a fleet booked by the hour);
# longer ones by the day, so that a week's booking is filed 7 times, not 168; bookings longer than a
# month (and open-ended ones) are kept in order of their start, so a look-up checks only those that
# begin before its window ends (a layout change's holds, open-ended from hours ahead, are thousands
# of them on a big pool, and a reservation for the next hour passes them all by).
_HOUR = timedelta(hours=1)
_DAY = timedelta(days=1)
_BY_HOUR_MAX = 48
_BY_DAY_MAX = 31
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
KEEP_ENDED = timedelta(minutes=1)
"""How long the index keeps a booking after its end (`forget_ended`): a cushion for a request whose
own clock reading is older than the one that forgot it."""
_TICK = timedelta(microseconds=1)
_QUIET_EVENTS = (
    ReservationCreated,
    ReservationCancelled,
    ReservationReleased,
    PartitionBooked,
    # A node's hand-overs, reports and layout-gate steps: the gate's holds arrive as ledger events,
    # its new atoms with the node's inventory (`node.inventory.changed`).
    AllocationBound,
    AllocationReleased,
    NodeJoined,
    NodeReportRefused,
    GpuReleased,
    NodeScrubbed,
    NodeRebootRequired,
    NodeLayoutRefused,
    NodeMigScheduled,
    NodeMigGranted,
    NodeMigApplied,
    DoctorRun,
    # A cluster's phase: what placement across clusters reads; no pool's atoms change with it (a
    # node's cordon does: `node.cordoned` and `node.uncordoned` make the index read atoms again).
    ClusterCreated,
    ClusterUpdated,
    # Endpoints: their nodes' holds arrive as ledger events, their new instances with the nodes'
    # inventory.
    EndpointCreated,
    EndpointUpdated,
    EndpointDeleted,
    ComponentChanged,
    # Workloads and their deployments: their replicas' bookings arrive as ledger events.
    WorkloadCreated,
    WorkloadScaled,
    WorkloadDeleted,
    DeploymentUpdated,
    WorkloadPreempted,
    WorkloadDecided,
    WorkloadDrained,
    ReservationPreempted,
    # An extension's new end arrives as `ledger.extended`; tenants, credentials and the named
    # classes touch no atom (a device class never changes once made).
    ReservationExtended,
    TenantCreated,
    CredentialCreated,
    CredentialRevoked,
    DeviceClassCreated,
)
"""Events that change neither bookings (their ledger events do) nor any pool's atoms: the index
keeps its atoms through them (any other event makes it read a pool's atoms again on next use)."""

_CATALOG_EVENTS = (
    ClusterCreated,
    ClusterUpdated,
    QuotaSet,
    PoolOffered,
    PolicyCreated,
    PolicyUpdated,
    PolicyDeleted,
    PriceSet,
    PriorityClassCreated,
)
"""Events that change what placement reads beside the atoms (a cluster's phase, quota rows and
offers, policies, the prices a cost ceiling is checked against, the priority classes preemption
compares) and no pool's atoms: they move `catalog_version` only."""


BOOKINGS_AND_ATOMS_KEPT = _QUIET_EVENTS + _CATALOG_EVENTS
"""Events after which every booking and every atom is as it was (what a reader that keeps its own
copy of them, as replay's record of request sizes does, need not read again)."""


def _span(start: datetime, end: datetime, size: timedelta) -> range:
    """The buckets of `size` that the half-open window [start, end) touches."""
    return range((start - _EPOCH) // size, (end - _TICK - _EPOCH) // size + 1)


class OfGpu(Protocol):
    """An atom as far as its GPU's family goes (an `Atom` is one)."""

    @property
    def gpu_id(self) -> str: ...

    @property
    def cls(self) -> str: ...


@dataclass(frozen=True, slots=True)
class FamilyMember:
    """An atom's GPU and class, where the caller holds no `Atom` of it."""

    gpu_id: str
    cls: str


STALE_NODES_MAX = 500
"""Nodes whose inventory changed since a pool's atoms were read, beyond which the pool is read anew
rather than those nodes' atoms (a pool idle through a fleet's start-up)."""

MATCHING_CACHE = 256
"""Request shapes (class and selector) whose matching atoms a pool keeps, least recently used first
out: a handful of shapes serve nearly every request, and a stream of distinct selectors (refused
requests included) must not grow a process's memory without bound."""


@dataclass
class PoolAtoms:
    """A pool's present atoms, and per request shape the matching ones grouped by GPU.

    `cordoned` are the nodes that take no new booking (domain.fleet.clusters): their atoms stay in
    `atoms` (what the pool has) but are never among the matching ones offered to choose; how many
    of those a shape would have matched is kept beside them, to explain a refusal."""

    atoms: dict[str, Atom]
    cordoned: frozenset[str] = frozenset()
    _matching: OrderedDict[tuple[AtomClass, Selector], tuple[dict[str, list[Atom]], int]] = field(
        default_factory=OrderedDict
    )
    _kinds: choose.PoolKinds | None = None
    _families: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] | None = None
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    """Guards `_matching` (request threads share a pool's snapshot)."""

    def family(self, gpu_id: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The pool's present atoms of the GPU (its family as the pool has it), as (class, ids)
        per class; grouped once per snapshot, on first use."""
        grouped = self._families
        if grouped is None:
            collected: dict[str, dict[str, list[str]]] = {}
            for atom in self.atoms.values():
                collected.setdefault(atom.gpu_id, {}).setdefault(atom.cls, []).append(atom.id)
            grouped = self._families = {
                g: tuple((cls, tuple(ids)) for cls, ids in by_cls.items()) for g, by_cls in collected.items()
            }
        return grouped.get(gpu_id, ())

    def kinds(self) -> choose.PoolKinds:
        """What the pool has at all (`choose.kinds_of`), worked out once per snapshot: it is read
        only to explain a refusal."""
        if self._kinds is None:
            self._kinds = choose.kinds_of(self.atoms.values())
        return self._kinds

    def matching_by_gpu(self, request: DeviceRequest) -> dict[str, list[Atom]]:
        """The atoms that could serve `request`, by GPU, leaving out those of cordoned nodes."""
        return self._shape(request)[0]

    def cordoned_matching(self, request: DeviceRequest) -> int:
        """How many atoms of cordoned nodes match `request` (left out of `matching_by_gpu`)."""
        return self._shape(request)[1]

    def refreshed(self, nodes: frozenset[str], fresh: Iterable[Atom], cordoned: frozenset[str]) -> PoolAtoms:
        """The pool with `nodes`' atoms replaced by `fresh` (what those nodes have in the pool now;
        `cordoned`, the pool's cordoned nodes now), its cached request shapes brought up to date
        rather than dropped: one node's new inventory costs a pass over the pool's atoms, not
        reading them all again and grouping each shape anew (seconds, on a pool of half a million
        atoms). A GPU whose atoms changed is grouped again whole, wherever its atoms were."""
        new = sorted(fresh, key=lambda a: a.id)
        removed = [a for a in self.atoms.values() if a.node in nodes]
        removed += [
            self.atoms[a.id] for a in new if a.id in self.atoms and self.atoms[a.id].node not in nodes
        ]
        atoms = {i: a for i, a in self.atoms.items() if a.node not in nodes}
        atoms.update((a.id, a) for a in new)
        touched = {a.gpu_id for a in removed} | {a.gpu_id for a in new}
        regroup = sorted((a for a in atoms.values() if a.gpu_id in touched), key=lambda a: a.id)
        out = PoolAtoms(atoms, cordoned)
        with self._guard:
            shapes = list(self._matching.items())
        for key, (grouped, was_off) in shapes:
            request = DeviceRequest(key[0], 1, selector=key[1])
            off = was_off - sum(1 for a in choose.matching(request, removed) if a.node in self.cordoned)
            off += sum(1 for a in choose.matching(request, new) if a.node in cordoned)
            kept = {gpu: held for gpu, held in grouped.items() if gpu not in touched}
            for atom in choose.matching(request, regroup):
                if atom.node not in cordoned:
                    kept.setdefault(atom.gpu_id, []).append(atom)
            out._matching[key] = (dict(sorted(kept.items())), off)
        return out

    def _shape(self, request: DeviceRequest) -> tuple[dict[str, list[Atom]], int]:
        key = (request.cls, request.selector)
        with self._guard:
            found = self._matching.get(key)
            if found is not None:
                self._matching.move_to_end(key)
                return found
        grouped: dict[str, list[Atom]] = {}
        off = 0
        cordoned = self.cordoned
        for atom in choose.matching(request, self.atoms.values()):
            if cordoned and atom.node in cordoned:
                off += 1
            else:
                grouped.setdefault(atom.gpu_id, []).append(atom)
        found = (dict(sorted(grouped.items())), off)
        with self._guard:
            self._matching[key] = found
            while len(self._matching) > MATCHING_CACHE:
                self._matching.popitem(last=False)
        return found


class _ByStart:
    """Allocations kept in order of their start: those that begin before an instant, cheaply."""

    def __init__(self) -> None:
        self._order: list[tuple[datetime, str]] = []
        self._start: dict[str, datetime] = {}

    def add(self, allocation_id: str, start: datetime) -> None:
        """File the allocation under `start` (under the earliest, when filed twice)."""
        known = self._start.get(allocation_id)
        if known is not None and known <= start:
            return
        if known is not None:
            self.discard(allocation_id)
        self._start[allocation_id] = start
        bisect.insort(self._order, (start, allocation_id))

    def discard(self, allocation_id: str) -> None:
        start = self._start.pop(allocation_id, None)
        if start is None:
            return
        at = bisect.bisect_left(self._order, (start, allocation_id))
        del self._order[at]

    def starting_before(self, end: datetime) -> list[str]:
        """Allocations filed under a start earlier than `end`."""
        return [a for _, a in self._order[: bisect.bisect_left(self._order, (end, ""))]]

    def clear(self) -> None:
        self._order.clear()
        self._start.clear()


@dataclass(slots=True)
class _Interval:
    allocation_id: str
    atom_id: str
    start: datetime
    end: datetime | None
    owner: Owner = (None, None, None)
    """(tenant, pool, atom class) of the booking, for counting what a tenant holds."""
    gpu: str | None = None
    """The booked atom's GPU (None: not known, from an event written before it was recorded)."""

    def overlaps(self, start: datetime, end: datetime | None) -> bool:
        return (self.end is None or start < self.end) and (end is None or self.start < end)


class BookingIndex:
    """Live bookings by allocation, by atom and by hour or day, and pool atoms; thread-safe, shared by
    the API's workers."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._follower = Follower(_Fed(self), self._lock, clock)
        self._by_allocation: dict[str, list[_Interval]] = {}
        self._by_atom: dict[str, set[str]] = defaultdict(set)  # atom -> allocations booking it
        self._by_gpu: dict[str, dict[str, list[_Interval]]] = defaultdict(dict)
        """GPU -> allocation -> its bookings of the GPU's atoms: a GPU's family, looked up at once."""
        self._by_hour: dict[int, set[str]] = defaultdict(set)
        self._by_day: dict[int, set[str]] = defaultdict(set)
        self._long = _ByStart()
        self._pools: dict[str, PoolAtoms] = {}
        self._stale: dict[str, dict[str, int]] = {}
        """Per cached pool, the nodes whose inventory changed since its atoms were read, each with
        the number of the change (`_node_changed`): read again on the pool's next use."""
        self._changes = 0
        self._owners: dict[Owner, Owner] = {}
        """Every (tenant, pool, class) a booking has had, so that bookings share one tuple each:
        as many as tenants times pools times classes."""
        self._pools_generation = 0
        """Bumped whenever pool atoms are dropped: a load that raced with a drop is not kept."""
        self._catalog_generation = 0
        """Bumped by every event that may change the clusters, the pools or the cordoned nodes."""
        self._claimed: Counter[str] = Counter()
        self._catch_ups = 0
        """Catch-ups begun (a read of the log prepared, a sync, a reload): see `release`."""
        self._handed: deque[tuple[int, list[str]]] = deque()
        """Claims of committed writes, with `_catch_ups` when they committed (see `release`)."""
        self._ticket = threading.local()
        """The catch-up a thread's `prepare` began, for its `apply` to end."""
        self._by_tenant: dict[str, set[str]] = defaultdict(set)  # tenant -> its allocations
        self._pool_changes: Counter[str | None] = Counter()
        """Per pool, bumped by every booking added or dropped there: what a cache of a pool's free
        devices (`service.placement.placement_stock`) is checked against."""
        self._ends: list[tuple[datetime, str]] = []
        """A heap of (end, allocation) for bookings that end: what `forget_ended` pops."""
        self._forgotten_before = _EPOCH
        """Bookings that ended at or before this were forgotten (`forget_ended`): a reload reads
        only those that reach past it, so that rebuilding after a refused write costs the live
        bookings, not every booking the ledger ever had."""

    # -- keeping up (the follower feeds `load` and `apply`) -----------------------------------
    def sync(self, tx: LedgerTx) -> None:
        """Catch up with the ledger: a full load the first time, the event tail afterwards."""
        begun = self._begin_catch_up()
        self._follower.sync(tx)
        self._caught_up(begun)

    def prepare(self, tx: LedgerTx) -> Cursor:
        """Load the index if it never was; returns what the next read of the log must ask for."""
        self._ticket.begun = self._begin_catch_up()
        return self._follower.prepare(tx)

    def apply(
        self, tx: LedgerTx, read: Cursor, events: Sequence[LoggedEvent], newest: int, snapshot: LogSnapshot
    ) -> None:
        """Apply admission's read of the log (see `Follower.apply`)."""
        self._follower.apply(tx, read, events, newest, snapshot)
        begun: int | None = getattr(self._ticket, "begun", None)
        self._ticket.begun = None
        if begun is not None:
            self._caught_up(begun)

    def reload(self, tx: LedgerTx) -> None:
        """Rebuild the index from the ledger itself (see `Follower.reload`)."""
        begun = self._begin_catch_up()
        self._follower.reload(tx)
        self._caught_up(begun)

    def _begin_catch_up(self) -> int:
        with self._lock:
            self._catch_ups += 1
            return self._catch_ups

    def _caught_up(self, begun: int) -> None:
        """A catch-up begun as the `begun`th has applied every commit made before it began: the
        claims of writes that committed before then are in the index now (see `release`)."""
        with self._lock:
            while self._handed and self._handed[0][0] < begun:
                self._unclaim(self._handed.popleft()[1])

    def load(self, tx: LedgerTx) -> None:
        """Rebuild from the ledger's live bookings (the follower holds the lock)."""
        self._by_allocation.clear()
        self._by_tenant.clear()
        self._by_atom.clear()
        self._by_gpu.clear()
        self._by_hour.clear()
        self._by_day.clear()
        self._long.clear()
        self._ends.clear()
        self._forget_pools()
        for b in tx.ledger.live_bookings(self._forgotten_before):
            self._add(
                b.allocation_id,
                [b.atom_id],
                b.starts_at,
                b.ends_at,
                (b.tenant_id, b.pool_id, b.cls),
                b.gpu_id,
            )

    def apply_event(self, logged: LoggedEvent) -> None:
        event = logged.event
        if isinstance(event, LedgerBooked):
            # One event per booking (an allocation's atoms may arrive in several); replays are no-ops.
            held = {i.atom_id for i in self._by_allocation.get(event.subject, ())}
            fresh = [a for a in event.atoms if a not in held]
            if fresh:
                self._add(
                    event.subject,
                    fresh,
                    event.start,
                    event.end,
                    (event.tenant_id, event.pool_id, event.cls),
                    event.gpu_id,
                )
        elif isinstance(event, LedgerReleased | PartitionReleased):
            self._end(event.subject, event.at)
        elif isinstance(event, LedgerExtended):
            self._extend(event.subject, event.end)
        elif isinstance(event, LedgerCancelled):
            self._drop(event.subject)
        elif isinstance(event, LedgerRebound):
            self._rebind(event.subject, event.moves)
        elif isinstance(event, _CATALOG_EVENTS):
            self._catalog_generation += 1  # no pool's atoms change with these
        elif isinstance(event, NodeInventoryChanged):
            self._node_changed(event.subject)
        elif not isinstance(event, _QUIET_EVENTS):
            self._forget_pools()  # inventory or pool changes: atoms are re-read on next use

    def _buckets_of(self, start: datetime, end: datetime | None) -> tuple[dict[int, set[str]], range] | None:
        """Where a booking is filed: hour or day buckets, or None for the set of long ones."""
        if end is None:
            return None
        hours = _span(start, end, _HOUR)
        if len(hours) <= _BY_HOUR_MAX:
            return self._by_hour, hours
        days = _span(start, end, _DAY)
        return (self._by_day, days) if len(days) <= _BY_DAY_MAX else None

    def _add(
        self,
        allocation_id: str,
        atom_ids: Iterable[str],
        start: datetime | None,
        end: datetime | None,
        owner: Owner = (None, None, None),
        gpu: str | None = None,
    ) -> None:
        assert start is not None
        self._pool_changes[owner[1]] += 1
        if owner[0] is not None:
            self._by_tenant[owner[0]].add(allocation_id)
        intervals = self._by_allocation.setdefault(allocation_id, [])
        owner = self._owners.setdefault(owner, owner)  # one tuple per (tenant, pool, class)
        on_gpu = None if gpu is None else self._by_gpu[gpu].setdefault(allocation_id, [])
        for atom_id in atom_ids:
            interval = _Interval(allocation_id, atom_id, start, end, owner, gpu)
            intervals.append(interval)
            self._by_atom[atom_id].add(allocation_id)
            if on_gpu is not None:
                on_gpu.append(interval)
        if end is not None:
            heapq.heappush(self._ends, (end, allocation_id))
        filed = self._buckets_of(start, end)
        if filed is None:
            self._long.add(allocation_id, start)
        else:
            index, buckets = filed
            for b in buckets:
                index[b].add(allocation_id)

    def forget_ended(self, now: datetime) -> int:
        """Forget every booking that ended `KEEP_ENDED` or more before `now`; returns how many.

        Every look-up asks about its own present or later (a reservation's window starts at its
        `now`, placement asks at its `now`), so a booking that ended before then changes no answer;
        kept, it only makes each look-up of its hour slower and the process bigger, for ever. A
        request whose clock reading is older than that may find an atom free that was booked in
        its past: the ledger's exclusion constraint refuses any overlap it would write, and a
        quota counted over instants already past holds nothing back. A booking's pool caches are
        left as they are: its end had already passed for them.

        A reload reads only what reaches past the latest instant forgotten: were the clock to
        step back by more than `KEEP_ENDED` (a bad time source corrected), bookings that end in
        between stay out of the index until then; the ledger still refuses any overlap, and the
        refusal reloads what it can."""
        before = now - KEEP_ENDED
        forgotten = 0
        with self._lock:
            self._forgotten_before = max(self._forgotten_before, before)
            while self._ends and self._ends[0][0] <= before:
                _, allocation_id = heapq.heappop(self._ends)
                intervals = self._by_allocation.get(allocation_id)
                # An extended booking was filed again under its new end; that entry comes later.
                if intervals and all(i.end is not None and i.end <= before for i in intervals):
                    self._drop(allocation_id, changes=False)
                    forgotten += 1
        return forgotten

    def _drop(self, allocation_id: str, *, changes: bool = True) -> None:
        intervals = self._by_allocation.pop(allocation_id, [])
        self._long.discard(allocation_id)
        for pool in {i.owner[1] for i in intervals} if changes else ():
            self._pool_changes[pool] += 1
        for tenant in {i.owner[0] for i in intervals if i.owner[0] is not None}:
            mine = self._by_tenant.get(tenant)
            if mine is not None:
                mine.discard(allocation_id)
                if not mine:
                    del self._by_tenant[tenant]
        for atom_id in {i.atom_id for i in intervals}:
            holders = self._by_atom.get(atom_id)
            if holders is not None:
                holders.discard(allocation_id)
                if not holders:
                    del self._by_atom[atom_id]
        for gpu in {i.gpu for i in intervals if i.gpu is not None}:
            on_gpu = self._by_gpu.get(gpu)
            if on_gpu is not None:
                on_gpu.pop(allocation_id, None)
                if not on_gpu:
                    del self._by_gpu[gpu]
        for start, end in {(i.start, i.end) for i in intervals}:
            filed = self._buckets_of(start, end)
            if filed is None:
                continue
            index, buckets = filed
            for b in buckets:
                members = index.get(b)
                if members is not None:
                    members.discard(allocation_id)
                    if not members:
                        del index[b]

    def _end(self, allocation_id: str, at: datetime) -> None:
        """The ledger's release (domain.ledger.ledger.released), applied to the allocation's intervals."""
        intervals = self._by_allocation.get(allocation_id)
        if not intervals:
            return
        self._drop(allocation_id)
        for interval in intervals:
            kept = released(Window(interval.start, interval.end), at)
            if kept is not None:
                self._add(
                    allocation_id, [interval.atom_id], kept.start, kept.end, interval.owner, interval.gpu
                )

    def _rebind(self, allocation_id: str, moves: Sequence[Sequence[str]]) -> None:
        """The ledger's rebind: the allocation's intervals on each source atom now hold its target
        (on the target's GPU), windows kept; a replay finds them moved already and changes nothing."""
        intervals = self._by_allocation.get(allocation_id)
        targets = {str(m[0]): (str(m[1]), str(m[2])) for m in moves if len(m) == 3}
        if not intervals or not any(i.atom_id in targets for i in intervals):
            return
        self._drop(allocation_id)
        for interval in intervals:
            atom, gpu = targets.get(interval.atom_id, (interval.atom_id, interval.gpu))
            self._add(allocation_id, [atom], interval.start, interval.end, interval.owner, gpu)

    def _extend(self, allocation_id: str, end: datetime) -> None:
        """The ledger's extension: every live interval of the allocation now ends at `end`."""
        intervals = self._by_allocation.get(allocation_id)
        if not intervals:
            return
        self._drop(allocation_id)
        for interval in intervals:
            self._add(allocation_id, [interval.atom_id], interval.start, end, interval.owner, interval.gpu)

    # -- reading ---------------------------------------------------------------------------------
    def busy(self, window: Window) -> list[_Interval]:
        """Every live booking that overlaps the window."""
        with self._lock:
            if window.end is None:
                candidates: set[str] = set(self._by_allocation)
            else:
                candidates = set(self._long.starting_before(window.end))
                for index, size in ((self._by_hour, _HOUR), (self._by_day, _DAY)):
                    buckets = _span(window.start, window.end, size)
                    if len(buckets) > len(index):  # a long window: walk the buckets there are
                        for b in [b for b in index if b in buckets]:
                            candidates |= index[b]
                    else:
                        for b in buckets:
                            members = index.get(b)
                            if members:
                                candidates |= members
            return [
                i
                for alloc in candidates
                for i in self._by_allocation.get(alloc, ())
                if i.overlaps(window.start, window.end)
            ]

    @staticmethod
    def held(tenant_id: str, pool_id: str, busy: Sequence[_Interval], window: Window) -> dict[str, int]:
        """What the tenant holds in the pool during `window`, per atom class, from `busy(window)`, as
        quota counts it (`domain.tenancy.quota.in_use`).

        Exact when the caller holds the tenant's quota lock and has just caught up with the event log:
        every booking of this tenant in this pool was committed before the lock was taken.
        """
        own = (
            (i.owner[2] or "", i.start, i.end)
            for i in busy
            if i.owner[0] == tenant_id and i.owner[1] == pool_id
        )
        return {str(cls): n for cls, n in quota.spans_in_use(own, window).items()}

    def catalog_version(self) -> int:
        """Changes with every event that may change the clusters, the pools or the cordoned nodes
        (a cluster's phase, and every event that makes pools' atoms be read again): a cache key,
        never a truth (`service.placement.placement_stock.Stock.catalog`)."""
        with self._lock:
            return self._catalog_generation

    def pool_version(self, pool_id: str) -> tuple[int, int]:
        """Changes when the pool's bookings or any pool's atoms change (a cache key, never a truth)."""
        with self._lock:
            return (self._pools_generation, self._pool_changes[pool_id])

    def pools_versions(self, groups: Iterable[Iterable[tuple[str, object]]]) -> list[tuple[int, ...]]:
        """For each group of pools (pool id first in each item), one key that changes when any of
        their `pool_version`s does (a cache key for what they hold together, never a truth)."""
        with self._lock:
            changes, generation = self._pool_changes, self._pools_generation
            return [(generation, *(changes[p] for p, _ in group)) for group in groups]

    def holding_at(self, tenant_id: str, at: datetime) -> list[tuple[str, str | None, str | None]]:
        """(atom, pool, atom class) of each live booking of the tenant's that covers the instant `at`: what it
        holds then. Exact, as `held` is, under the tenant's lock on a caught-up index."""
        with self._lock:
            return [
                (i.atom_id, i.owner[1], i.owner[2])
                for allocation in self._by_tenant.get(tenant_id, ())
                for i in self._by_allocation.get(allocation, ())
                if i.start <= at and (i.end is None or at < i.end)
            ]

    def holding_from(self, tenant_id: str, at: datetime) -> list[tuple[str, str | None, str | None]]:
        """(atom, pool, atom class) of each live booking of the tenant's not ended by `at`, whatever
        its start: what an open-ended booking made at `at` adds to. A quota counted at a write's `now`
        must count a booking another write of the tenant's made at a later `now` (its lock queued it
        behind that write): `holding_at` would leave that booking out, and the quota be exceeded."""
        with self._lock:
            return [
                (i.atom_id, i.owner[1], i.owner[2])
                for allocation in self._by_tenant.get(tenant_id, ())
                for i in self._by_allocation.get(allocation, ())
                if i.end is None or at < i.end
            ]

    def _taking(self, atom_id: str, member: OfGpu | None) -> Iterator[_Interval]:
        """The live bookings that take `atom_id`: its own, and those of its GPU's family that
        exclude it (`domain.ledger.ledger.family_excludes`; `member`: its GPU and class, None: its own
        only), whether or not the atom they book is bookable now. The caller holds the lock."""
        for allocation in self._by_atom.get(atom_id, ()):
            for i in self._by_allocation[allocation]:
                if i.atom_id == atom_id:
                    yield i
        if member is None:
            return
        cls = member.cls
        for on_gpu in self._by_gpu.get(member.gpu_id, {}).values():
            for i in on_gpu:
                if i.atom_id != atom_id and family_excludes(cls, i.owner[2] or cls):
                    yield i

    def busy_from(
        self, atom_ids: Iterable[str], at: datetime, families: Mapping[str, OfGpu] | None = None
    ) -> tuple[set[str], datetime | None]:
        """Of `atom_ids`, those a live booking takes at or after `at` (an open-ended booking from `at`
        cannot have them), and the earliest end among those bookings: until then the answer can
        change only by a new event, never by time alone. `families` gives the atoms' GPUs and
        classes, so that a booking of another atom of the GPU that excludes one takes it too."""
        busy: set[str] = set()
        soonest: datetime | None = None
        with self._lock:
            for atom_id in atom_ids:
                for i in self._taking(atom_id, None if families is None else families.get(atom_id)):
                    if i.end is not None and i.end <= at:
                        continue
                    busy.add(atom_id)
                    if i.end is not None and (soonest is None or i.end < soonest):
                        soonest = i.end
        return busy, soonest

    def holders_at(
        self, atom_ids: Iterable[str], at: datetime, families: Mapping[str, OfGpu] | None = None
    ) -> tuple[dict[str, tuple[str, str | None, datetime]], set[str], datetime | None]:
        """Of `atom_ids`: those a live booking of their own holds at the instant `at`, each with that
        booking's allocation, tenant and start (who runs on it now: the candidates of a
        preemption); those a live booking takes at or after `at` (not free for an open-ended
        booking; with `families`, as `busy_from` counts them); and the first instant after `at` at
        which either answer changes by time alone (a booking's start or end), None when none does:
        until then only a new event changes them."""
        holders: dict[str, tuple[str, str | None, datetime]] = {}
        busy: set[str] = set()
        soonest: datetime | None = None
        with self._lock:
            for atom_id in atom_ids:
                for i in self._taking(atom_id, None if families is None else families.get(atom_id)):
                    if i.end is not None and i.end <= at:
                        continue
                    busy.add(atom_id)
                    if i.start <= at and i.atom_id == atom_id:
                        holders[atom_id] = (i.allocation_id, i.owner[0], i.start)
                    for edge in (i.start, i.end):
                        if edge is not None and edge > at and (soonest is None or edge < soonest):
                            soonest = edge
        return holders, busy, soonest

    def knows_booking_of(self, atom_id: str) -> bool:
        """Whether the index holds any live booking of the atom (at any time)."""
        with self._lock:
            return bool(self._by_atom.get(atom_id))

    def claimed(self) -> set[str]:
        """Atoms chosen by requests of this process that have not committed or rolled back yet."""
        with self._lock:
            return set(self._claimed)

    def claim(self, atom_ids: Iterable[str]) -> None:
        """Keep concurrent requests in this process off atoms one of them is about to book."""
        with self._lock:
            self._claimed.update(atom_ids)

    def release(self, atom_ids: Sequence[str], committed: bool) -> None:
        """End the claims of a write whose transaction has ended. Rolled back, nobody holds the atoms.
        Committed, they stay claimed until a catch-up that began after the commit has applied its
        bookings: until then the index does not show them, and a request of this process that
        caught up before the commit would choose them again and lose them to the ledger."""
        if not atom_ids:
            return
        with self._lock:
            if committed:
                self._handed.append((self._catch_ups, list(atom_ids)))
            else:
                self._unclaim(atom_ids)

    def _unclaim(self, atom_ids: Iterable[str]) -> None:
        """(The caller holds the lock.)"""
        for atom in atom_ids:
            left = self._claimed.get(atom, 0) - 1
            if left > 0:
                self._claimed[atom] = left
            else:
                self._claimed.pop(atom, None)

    def windows_of(
        self, atom_ids: Sequence[str], families: Mapping[str, OfGpu] | None = None
    ) -> dict[str, list[_Interval]]:
        """Every live booking that takes these atoms (each with its `start` and `end`; with
        `families`, as `busy_from` counts them), for the earliest start after a refusal; looked up
        by atom and GPU, so it costs what those hold, not the whole index."""
        out: dict[str, list[_Interval]] = {}
        with self._lock:
            for atom_id in atom_ids:
                member = None if families is None else families.get(atom_id)
                out[atom_id] = list(self._taking(atom_id, member))
        return out

    @staticmethod
    def taken(busy: Iterable[_Interval], pool_atoms: PoolAtoms) -> set[str]:
        """The atoms that `busy` (the live bookings meeting a window: `busy(window)`) take: the
        atoms they book, and the pool's atoms of the same GPUs that those exclude (a GPU's parts
        while it is booked whole, the GPU while a part is: `domain.ledger.ledger.family_excludes`),
        whether or not the atoms they book are bookable, or present, now."""
        out: set[str] = set()
        for i in busy:
            out.add(i.atom_id)
            booked = i.owner[2]
            if i.gpu is None or booked is None:
                continue
            for cls, ids in pool_atoms.family(i.gpu):
                if family_excludes(cls, booked):
                    out.update(ids)
        return out

    def _forget_pools(self, pool_id: str | None = None) -> None:
        """Drop every pool's atoms, or one pool's (the caller holds the lock)."""
        if pool_id is None:
            self._pools.clear()
            self._stale.clear()
        else:
            self._pools.pop(pool_id, None)
            self._stale.pop(pool_id, None)
        self._pools_generation += 1
        self._catalog_generation += 1

    def _node_changed(self, node: str) -> None:
        """A node's inventory changed (its pool did not: that is a pool event, which drops every
        pool's atoms): each cached pool reads that node's atoms again on next use, and only those
        (the caller holds the lock). A node reporting for the first time changes one pool of many,
        and on a big fleet nodes report all the time."""
        self._changes += 1
        for pool_id in self._pools:
            self._stale.setdefault(pool_id, {})[node] = self._changes
        self._pools_generation += 1
        self._catalog_generation += 1

    def forget_pool(self, pool_id: str) -> None:
        """Drop the pool's atoms: they are read again on next use (after a commit found one gone)."""
        with self._lock:
            self._forget_pools(pool_id)

    def pool_atoms(self, tx: LedgerTx, pool_id: str) -> PoolAtoms:
        with self._lock:
            cached = self._pools.get(pool_id)
            generation = self._pools_generation
            stale = dict(self._stale.get(pool_id, {}))
        if cached is not None and not stale:
            return cached
        if cached is not None and len(stale) <= STALE_NODES_MAX:
            nodes = frozenset(stale)
            fresh = [a for a in tx.atoms.of_nodes(sorted(nodes)) if a.pool_id == pool_id and a.present]
            # A cordon drops every pool (an event of its own), but the snapshot holds only the
            # cordoned nodes that had atoms in it: a node may bring its first ones now.
            cordoned = cached.cordoned | (tx.nodes.cordoned_ids() & nodes)
            refreshed = cached.refreshed(nodes, fresh, cordoned)
            with self._lock:
                # Kept only if the pool was not dropped meanwhile; a node that changed again while
                # its rows were read stays stale (its newer change is read on next use).
                if self._pools.get(pool_id) is cached:
                    self._pools[pool_id] = refreshed
                    left = self._stale.get(pool_id, {})
                    for node, change in stale.items():
                        if left.get(node) == change:
                            del left[node]
                    if not left:
                        self._stale.pop(pool_id, None)
            return refreshed
        atoms = {a.id: a for a in tx.atoms.of_pool(pool_id)}
        cordoned = tx.nodes.cordoned_ids()  # the fleet's: a handful, usually none
        if cordoned:
            cordoned &= {a.node for a in atoms.values()}
        loaded = PoolAtoms(atoms, cordoned)
        with self._lock:
            # Kept only if nothing was dropped meanwhile: an inventory change applied while these
            # rows were read may be newer than them (they are used for this request all the same).
            if self._pools_generation == generation:
                self._pools[pool_id] = loaded
        return loaded


class _Fed:
    """The index as its follower sees it: `load` and `apply` (the index's own `apply` takes a read)."""

    def __init__(self, index: BookingIndex) -> None:
        self._index = index

    def load(self, tx: LedgerTx) -> None:
        self._index.load(tx)

    def apply(self, event: LoggedEvent) -> None:
        self._index.apply_event(event)
