"""Each pool's free devices of a device class, cached per process for placement and its preview.

Placement asks every cluster how many replicas it could take: over a fleet of 80,000 atoms, reading
them and their bookings for every preview would be the whole cost. A pool's free devices of a class
change only when the pool's bookings change (the booking index counts those), when any pool's atoms
change (the index's atoms generation), or when a booking that holds one ends with time (the entry
keeps the earliest such end). So an entry is reused while all three stand, and re-derived otherwise:
the cache can be stale only as the booking index is, and the ledger's constraint is the fence.

The rooms (`topology.Room`) add up over pools: a replica sits on one node, and a node is in one pool.
A cluster's room for a tenant (its pools there, each capped by what the tenant may take) is kept
too, under the versions of those pools: a decision asks it of every cluster, and changes few.

Two more reads are kept: which of a pool's atoms belong to a class (matched once per read of the
pool's atoms, so a booking costs a filter over them, not a selector match per atom), and the
catalog: the clusters, each pool's seat (id, cluster, owner) and the cordoned nodes, read again
whenever the index applies an event that may change them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from typing import TypeVar, cast

from better_compute.domain.fleet.records import Cluster
from better_compute.domain.fleet.shares import share
from better_compute.domain.metering.billing import Price
from better_compute.domain.placement.capability import implicit_class, is_implicit
from better_compute.domain.placement.class_quotas import ClassQuota
from better_compute.domain.placement.device_classes import DeviceClass, belongs_to, device_class_not_found
from better_compute.domain.placement.priority_classes import PriorityClass
from better_compute.domain.placement.topology import DomainKind, FreeDevice, Room, room_for
from better_compute.domain.tenancy.iam import Policy
from better_compute.domain.tenancy.records import Quota
from better_compute.service.ledger.booking_index import BookingIndex, PoolAtoms
from better_compute.service.placement.ports import PlacementTx

T = TypeVar("T")

EVER = datetime.min.replace(tzinfo=UTC)
"""The instant given to `kept` for what time alone never changes."""

MAX_ENTRIES = 20_000
"""Entries kept before the cache starts over: pools x classes x shapes in use stays far below."""


@dataclass(frozen=True, slots=True)
class PoolSeat:
    """What placement needs of a pool: where it is, whose it is and what its hours bill on (all
    fixed at creation)."""

    id: str
    cluster_id: str
    owner_tenant_id: str
    meter: str = ""


@dataclass(frozen=True, slots=True)
class Catalog:
    """What placement reads of the fleet's shape on every decision, cached by `Stock.catalog`."""

    clusters: Mapping[str, Cluster]
    seats: Mapping[str, PoolSeat]
    """Every pool's seat, by pool id."""
    cordoned: frozenset[str]
    prices: Mapping[str, Price] = field(default_factory=dict)
    """Every meter's price, by meter (what a cost ceiling is checked against)."""


@dataclass(frozen=True, slots=True)
class Rules:
    """A tenant's quota rows and the policies that place its workloads (the tenant's and every
    cluster's; a workload's own are read with it), cached by `Stock.rules`."""

    quotas: tuple[Quota, ...]
    class_rows: tuple[ClassQuota, ...]
    policies: tuple[Policy, ...]


@dataclass(frozen=True, slots=True)
class Standing:
    """What scheduling policy reads for a device class, the same for every tenant: every tenant's
    rows of the class (floors and weights) and every priority class, cached by `Stock.standing`."""

    class_rows: tuple[ClassQuota, ...]
    priority_classes: Mapping[str, PriorityClass]
    floors: bool
    """Whether any tenant has a floor of the class (else no capacity is reserved)."""
    preemptible: bool
    """Whether any priority class is preemptible (else no replica is ever a victim)."""


@dataclass(frozen=True, slots=True)
class _Members:
    atoms: PoolAtoms
    """The index's read of the pool's atoms these were matched from (compared by identity)."""
    bookable: tuple[FreeDevice, ...]
    """The bookable atoms of the class, by id."""
    ids: frozenset[str]
    """Every present atom of the pool that belongs to the class, booked or not."""
    share: Fraction = Fraction(0)
    """The largest share of a GPU one of them bills (`domain.fleet.shares.share`)."""


@dataclass(frozen=True, slots=True)
class _Entry:
    version: tuple[int, int]
    until: datetime | None
    devices: tuple[FreeDevice, ...]
    members: frozenset[str]
    """Every present atom of the pool that belongs to the class, booked or not."""


class Stock:
    """Free devices per (pool, class) and rooms per (pool, class, shape); thread-safe."""

    def __init__(self, salt: int | None = None) -> None:
        self.salt = os.getpid() if salt is None else salt
        """This process's tie-break among equally good devices (`domain.placement.binpack`): two
        processes placing at once then seldom reach for the same atoms."""
        self._lock = threading.Lock()
        self._free: dict[tuple[str, str], _Entry] = {}
        self._members_of: dict[tuple[str, str], _Members] = {}
        self._catalog: tuple[int, Catalog] | None = None
        self._rules: dict[tuple[str, str], tuple[int, Rules]] = {}
        self._tenants: tuple[int, set[str]] = (-1, set())
        self._standing: dict[str, tuple[int, Standing]] = {}
        self._kept: dict[tuple[object, ...], tuple[tuple[int, ...], datetime | None, object]] = {}
        self._classes: dict[str, DeviceClass] = {}
        self._rooms: dict[tuple[str, str, int, str | None, frozenset[str]], tuple[_Entry, Room]] = {}
        self._together: dict[tuple[object, ...], tuple[tuple[int, ...], datetime | None, Room]] = {}
        """Rooms of several pools together (`rooms_together`)."""

    def catalog(self, tx: PlacementTx, index: BookingIndex) -> Catalog:
        """The clusters, the pools' seats and the cordoned nodes, read again only when the index's
        catalog version moves. The version is taken before the read: every statement of a store
        transaction sees what was committed when it started (readers autocommit, writers hold the
        write lock or read committed), so what is read is at least as new as every event the index
        had applied, and a change committed meanwhile moves the version for the next caller."""
        version = index.catalog_version()
        with self._lock:
            cached = self._catalog
        if cached is not None and cached[0] == version:
            return cached[1]
        found = Catalog(
            clusters={c.id: c for c in tx.clusters.all()},
            seats={seat[0]: PoolSeat(*seat) for seat in tx.pools.seats()},
            cordoned=tx.nodes.cordoned_ids(),
            prices={p.meter: p for p in tx.prices.all()},
        )
        with self._lock:
            self._catalog = (version, found)
        return found

    def rules(self, tx: PlacementTx, index: BookingIndex, tenant_id: str, device_class: str) -> Rules:
        """The tenant's pool quota rows, its rows of the device class and the placement policies
        that apply to it (the tenant's and every cluster's), under the catalog's version: every
        write of them appends an event that moves it (see `catalog` for why the read is as new as
        the version). Keyed by tenant and class, not by workload: a create is a new workload each
        time, and a workload's own policies are few and read with it."""
        version = index.catalog_version()
        key = (tenant_id, device_class)
        with self._lock:
            cached = self._rules.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        found = Rules(
            quotas=tuple(tx.quotas.find(tenant_id, None)),
            class_rows=tuple(tx.class_quotas.find(tenant_id, device_class)),
            policies=tuple(tx.policies.for_placement(tenant_id, None)),
        )
        with self._lock:
            if len(self._rules) >= MAX_ENTRIES:
                self._rules.clear()
            self._rules[key] = (version, found)
        return found

    def standing(self, tx: PlacementTx, index: BookingIndex, device_class: str) -> Standing:
        """Every tenant's rows of the class and the priority classes, under the catalog's version
        (quota rows and priority classes move it; see `catalog`)."""
        version = index.catalog_version()
        with self._lock:
            cached = self._standing.get(device_class)
        if cached is not None and cached[0] == version:
            return cached[1]
        rows = tuple(tx.class_quotas.find(None, device_class))
        classes = {p.name: p for p in tx.priority_classes.all()}
        found = Standing(
            class_rows=rows,
            priority_classes=classes,
            floors=any(r.floor_devices > 0 for r in rows),
            preemptible=any(p.preemptible for p in classes.values()),
        )
        with self._lock:
            if len(self._standing) >= MAX_ENTRIES:
                self._standing.clear()
            self._standing[device_class] = (version, found)
        return found

    def kept(
        self,
        key: tuple[object, ...],
        version: tuple[int, ...],
        now: datetime,
        build: Callable[[], tuple[T, datetime | None]],
    ) -> T:
        """What `build` makes, kept under `key` while `version` stands and until the instant it
        returned beside it (None: no instant): a cache of what is derived from the booking index,
        which `version` (the index's versions) says has not changed, never a truth."""
        with self._lock:
            cached = self._kept.get(key)
        if cached is not None and cached[0] == version and (cached[1] is None or now < cached[1]):
            return cast("T", cached[2])
        made, until = build()
        with self._lock:
            if len(self._kept) >= MAX_ENTRIES:
                self._kept.clear()
            self._kept[key] = (version, until, made)
        return made

    def standing_rows(self, tx: PlacementTx, index: BookingIndex) -> tuple[ClassQuota, ...]:
        """Every device-class quota row of every tenant, under the catalog's version."""
        return self.kept(
            ("class-rows",), (index.catalog_version(),), EVER, lambda: (tuple(tx.class_quotas.find()), None)
        )

    def tenant_exists(self, tx: PlacementTx, index: BookingIndex, tenant_id: str) -> bool:
        """Whether the tenant exists and is not deleted. Only a yes is kept, under the catalog's
        version: a deletion (`tenant.deleted`) moves it, a creation may come at any time."""
        version = index.catalog_version()
        with self._lock:
            seen_at, known = self._tenants
            if seen_at == version and tenant_id in known:
                return True
        if tx.tenants.get(tenant_id) is None:
            return False
        with self._lock:
            if self._tenants[0] != version or len(self._tenants[1]) >= MAX_ENTRIES:
                self._tenants = (version, set())
            self._tenants[1].add(tenant_id)
        return True

    def device_class(self, tx: PlacementTx, name: str) -> DeviceClass:
        """The device class `name` (NOT_FOUND naming it). A class is never changed once created
        (`domain.placement.device_classes`), so the first read of it serves the process."""
        if is_implicit(name):
            return implicit_class(name)  # a capability's: spelled by its name, never stored
        with self._lock:
            found = self._classes.get(name)
        if found is None:
            found = tx.device_classes.get(name)
            if found is None:
                raise device_class_not_found(name)
            with self._lock:
                self._classes[name] = found
        return found

    def free(
        self, tx: PlacementTx, index: BookingIndex, pool_id: str, device_class: DeviceClass, at: datetime
    ) -> tuple[FreeDevice, ...]:
        """The pool's atoms of the class that are bookable and free from `at` on."""
        return self._entry(tx, index, pool_id, device_class, at).devices

    def _members(
        self, tx: PlacementTx, index: BookingIndex, pool_id: str, device_class: DeviceClass
    ) -> _Members:
        """The pool's atoms of the class, matched once per read of the pool's atoms (the index
        keeps one `PoolAtoms` until they change), so a booking costs a filter, not a match."""
        key = (pool_id, device_class.name)
        atoms = index.pool_atoms(tx, pool_id)
        with self._lock:
            cached = self._members_of.get(key)
        if cached is not None and cached.atoms is atoms:
            return cached
        members = [a for a in atoms.atoms.values() if belongs_to(a, device_class)]
        bookable = tuple(
            FreeDevice(a.id, a.node, a.gpu_id, a.numa_node, a.nvlink_domain)
            for a in sorted(members, key=lambda a: a.id)
            if a.bookable
        )
        found = _Members(
            atoms,
            bookable,
            frozenset(a.id for a in members),
            max((share(a) for a in members), default=Fraction(0)),
        )
        with self._lock:
            if len(self._members_of) >= MAX_ENTRIES:
                self._members_of.clear()
            self._members_of[key] = found
        return found

    def _entry(
        self, tx: PlacementTx, index: BookingIndex, pool_id: str, device_class: DeviceClass, at: datetime
    ) -> _Entry:
        key = (pool_id, device_class.name)
        version = index.pool_version(pool_id)
        with self._lock:
            cached = self._free.get(key)
        if cached is not None and cached.version == version and (cached.until is None or at < cached.until):
            return cached
        members = self._members(tx, index, pool_id, device_class)
        busy, until = index.busy_from([d.atom_id for d in members.bookable], at, members.atoms.atoms)
        devices = tuple(d for d in members.bookable if d.atom_id not in busy) if busy else members.bookable
        entry = _Entry(version, until, devices, members.ids)
        with self._lock:
            if len(self._free) >= MAX_ENTRIES:
                self._free.clear()
            self._free[key] = entry
        return entry

    def devices(
        self, tx: PlacementTx, index: BookingIndex, pool_id: str, device_class: DeviceClass
    ) -> tuple[FreeDevice, ...]:
        """The pool's bookable atoms of the class, free or not, where they sit."""
        return self._members(tx, index, pool_id, device_class).bookable

    def members(
        self, tx: PlacementTx, index: BookingIndex, pool_id: str, device_class: DeviceClass, at: datetime
    ) -> frozenset[str]:
        """The pool's atoms of the class, booked or not (to count what a tenant holds of it)."""
        return self._members(tx, index, pool_id, device_class).ids

    def share(
        self, tx: PlacementTx, index: BookingIndex, pool_id: str, device_class: DeviceClass
    ) -> Fraction:
        """The largest share of a GPU that one of the pool's devices of the class bills: what a
        device placed there costs per hour, times its meter's price."""
        return self._members(tx, index, pool_id, device_class).share

    def _room(
        self,
        tx: PlacementTx,
        index: BookingIndex,
        pool_id: str,
        device_class: DeviceClass,
        device_count: int,
        kind: DomainKind | None,
        at: datetime,
        cordoned: Collection[str],
    ) -> tuple[_Entry, Room]:
        entry = self._entry(tx, index, pool_id, device_class, at)
        mine = (
            frozenset(n for n in cordoned if any(d.node == n for d in entry.devices))
            if cordoned
            else frozenset()
        )
        key = (pool_id, device_class.name, device_count, kind, mine)
        with self._lock:
            cached = self._rooms.get(key)
        if cached is not None and cached[0] is entry:
            return entry, cached[1]
        room = room_for((d for d in entry.devices if d.node not in mine), device_count, kind)
        with self._lock:
            if len(self._rooms) >= MAX_ENTRIES:
                self._rooms.clear()
            self._rooms[key] = (entry, room)
        return entry, room

    def rooms_together(
        self,
        tx: PlacementTx,
        index: BookingIndex,
        clusters: Mapping[str, tuple[tuple[str, int | None], ...]],
        device_class: DeviceClass,
        device_count: int,
        kind: DomainKind | None,
        at: datetime,
        cordoned: frozenset[str] = frozenset(),
    ) -> dict[str, Room]:
        """What each cluster's pools (for one tenant) hold together of replicas of `device_count`
        devices, each pool's share capped by what the tenant may still take there (`clusters`: by
        cluster, (pool id, devices left, None for no cap) per pool). Kept per set of pools and caps
        while none of the pools changes (`BookingIndex.pools_versions`, read before the figures are,
        so that a change meanwhile is seen by the next caller) and no booking in them ends:
        placement asks it of every cluster of the fleet on every decision, and one decision books
        in few, so most clusters cost a look-up."""
        shape = (device_class.name, device_count, kind, cordoned)
        versions = index.pools_versions(clusters.values())
        out: dict[str, Room] = {}
        missed: list[tuple[str, tuple[tuple[str, int | None], ...], tuple[int, ...]]] = []
        with self._lock:
            for (cluster_id, pools), version in zip(clusters.items(), versions, strict=True):
                cached = self._together.get((pools, shape))
                if cached is not None and cached[0] == version and (cached[1] is None or at < cached[1]):
                    out[cluster_id] = cached[2]
                else:
                    missed.append((cluster_id, pools, version))
        for cluster_id, pools, version in missed:
            room, until = self._together_now(tx, index, pools, device_class, device_count, kind, at, cordoned)
            with self._lock:
                if len(self._together) >= MAX_ENTRIES:
                    self._together.clear()
                self._together[(pools, shape)] = (version, until, room)
            out[cluster_id] = room
        return out

    def _together_now(
        self,
        tx: PlacementTx,
        index: BookingIndex,
        pools: tuple[tuple[str, int | None], ...],
        device_class: DeviceClass,
        device_count: int,
        kind: DomainKind | None,
        at: datetime,
        cordoned: frozenset[str],
    ) -> tuple[Room, datetime | None]:
        free = replicas = largest = 0
        until: datetime | None = None
        for pool_id, left in pools:
            entry, room = self._room(tx, index, pool_id, device_class, device_count, kind, at, cordoned)
            if entry.until is not None and (until is None or entry.until < until):
                until = entry.until
            if left is not None:
                room = Room(
                    min(room.free_devices, left), min(room.replicas, left // device_count), room.largest_group
                )
            free += room.free_devices
            replicas += room.replicas
            largest = max(largest, room.largest_group)
        return Room(free, replicas, largest), until


__all__ = ["Catalog", "PoolSeat", "Rules", "Stock"]
