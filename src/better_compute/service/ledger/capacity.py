"""Capacity as a user asks about it: per atom, booked now and next free; per pool, what could be
booked for a window and when (`domain.ledger.capacity`); every GPU-hour of a range by state
(`domain.metering.accounting`); and the rollups per model, per pool and over time (`domain.metering.rollups`).

All read the database itself, not this process's booking index: a second server, or a booking made a
moment ago through another one, must show here too. A tenant sees only the pools it may see
(`service.fleet.pools.visible_pool_ids`); the admin sees the whole fleet, GPUs in no pool included.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.gpu_states import GpuPeriod
from better_compute.domain.fleet.pools import SharingMode
from better_compute.domain.fleet.records import Gpu
from better_compute.domain.kernel.atom_classes import check_atom_class
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.capacity import FreeKind, check_count, free_by_kind
from better_compute.domain.ledger.ledger import Availability, availability, is_partition_change
from better_compute.domain.ledger.scrub import owed_by, owed_to_others
from better_compute.domain.metering import rollups
from better_compute.domain.metering.accounting import Grid, Held, StateHours, account
from better_compute.domain.metering.rollups import ClassCount, ModelCount, WholeBooked
from better_compute.domain.tenancy.credentials import Principal
from better_compute.service.fleet.pools import get_pool, visible_pool_ids
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ledger.ports import LedgerTx

_CHUNK = 1000
"""Atom ids per ledger read: keeps each statement's parameter list far below SQLite's limit."""


@dataclass(frozen=True, slots=True)
class PoolFree:
    """A pool's answer to `capacity.free`: its kinds of atoms, each free or when it will be."""

    pool_id: str
    window: Window
    count: int
    kinds: tuple[FreeKind, ...]


def _busy(tx: LedgerTx, atom_ids: Sequence[str], since: datetime) -> dict[str, list[Window]]:
    out: dict[str, list[Window]] = {a: [] for a in atom_ids}
    for i in range(0, len(atom_ids), _CHUNK):
        for b in tx.ledger.live_on(atom_ids[i : i + _CHUNK], since):
            out[b.atom_id].append(Window(b.starts_at, b.ends_at))
    return out


def availability_of(
    store: StorePort[LedgerTx], atoms: Iterable[Atom], now: datetime
) -> dict[str, Availability]:
    """Each atom's `Availability` at `now` (for `atoms.list`), in one ledger read per thousand atoms."""
    ids = [a.id for a in atoms]
    if not ids:
        return {}
    with store.read() as tx:
        busy = _busy(tx, ids, now)
    return {atom_id: availability(spans, now) for atom_id, spans in busy.items()}


def _scrub_pending(tx: LedgerTx, atoms: Sequence[Atom], now: datetime, tenant_id: str | None) -> set[str]:
    """The atoms, of pools that scrub between tenants, owed a scrub by another tenant than
    `tenant_id` at `now` (domain.ledger.scrub): not bookable by it until their node scrubs them."""
    scrubbing = {p.id for p in tx.pools.all() if p.settings.scrub != "none"}
    ids = [a.id for a in atoms if a.pool_id in scrubbing]
    if not ids:
        return set()
    return owed_to_others(owed_by(tx.atoms.ended_unscrubbed(now, atom_ids=ids), now), tenant_id)


def scrub_pending_of(
    store: StorePort[LedgerTx], principal: Principal, atoms: Sequence[Atom], now: datetime
) -> set[str]:
    """The atoms among these that wait for a scrub before the caller's tenant may have them (for
    `atoms.list`'s `scrubPending`; every one owed a scrub, for the admin)."""
    with store.read() as tx:
        return _scrub_pending(tx, atoms, now, principal.tenant_id)


def free(
    store: StorePort[LedgerTx],
    principal: Principal,
    pool_id: str,
    window: Window,
    *,
    cls: str | None = None,
    count: int = 1,
    now: datetime | None = None,
) -> PoolFree:
    """What the pool could book for `window`, per kind of atom (`domain.ledger.capacity.free_by_kind`).

    A pool the caller may not see is NOT_FOUND, as everywhere (`pools.get`). An atom waiting for
    a scrub at `now` after another tenant (domain.ledger.scrub) is not free for the caller: how long the
    node takes is not known, so it counts as busy from the window's start on."""
    wanted_cls = None if cls is None else check_atom_class(cls, "class")
    wanted_count = check_count(count)
    get_pool(store, principal, pool_id)
    with store.read() as tx:
        atoms = [
            a for a in tx.atoms.of_pool(pool_id) if a.bookable and (wanted_cls is None or a.cls == wanted_cls)
        ]
        busy = _busy(tx, [a.id for a in atoms], window.start)
        for atom_id in _scrub_pending(tx, atoms, now or window.start, principal.tenant_id):
            busy[atom_id].append(Window(window.start, None))
    kinds = free_by_kind(atoms, busy, window, wanted_count)
    return PoolFree(pool_id, window, wanted_count, tuple(kinds))


def _scope(store: StorePort[LedgerTx], principal: Principal, pool_id: str | None) -> list[str] | None:
    """The pools a question covers: the one named (NOT_FOUND unless the caller may see it), else
    every pool the caller may see; None: every pool and the GPUs in none (the admin's fleet)."""
    if pool_id is not None:
        get_pool(store, principal, pool_id)
        return [pool_id]
    visible = visible_pool_ids(store, principal)
    return None if visible is None else sorted(visible)


@dataclass(frozen=True, slots=True)
class Accounting:
    """`capacity.accounting`: the GPU-hours of each bucket by state, and of the whole range."""

    pool_id: str | None
    grid: Grid
    buckets: tuple[tuple[Window, StateHours], ...]

    @property
    def total(self) -> StateHours:
        return sum((hours for _, hours in self.buckets), StateHours())


def accounting(
    store: StorePort[LedgerTx], principal: Principal, pool_id: str | None, grid: Grid
) -> Accounting:
    """Every GPU-hour of the pool (or of everything the caller may see) in `grid`, in exactly one
    state (`domain.metering.accounting`), from the GPUs' state history and the ledger: one read of each,
    one sweep."""
    pools = _scope(store, principal, pool_id)
    periods: list[GpuPeriod] = []
    held: list[Held] = []
    if pools != []:
        with store.read() as tx:
            periods = tx.gpu_states.during(pools, grid.window)
            held = tx.gpu_states.held_during(pools, grid.window) if periods else []
    hours = account(periods, held, grid)
    return Accounting(pool_id, grid, tuple(zip(grid.buckets(), hours, strict=True)))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the fleet holds now, as far as the caller may see: atoms, GPUs, and the atoms a
    tenant's booking holds at `at`."""

    at: datetime
    pool_ids: tuple[str, ...]
    pool_modes: Mapping[str, SharingMode]
    atoms: tuple[Atom, ...]
    gpus: tuple[Gpu, ...]
    booked: frozenset[str]


def _snapshot(
    store: StorePort[LedgerTx], principal: Principal, pool_id: str | None, now: datetime
) -> Snapshot:
    pools = _scope(store, principal, pool_id)
    if pools == []:
        return Snapshot(now, (), {}, (), (), frozenset())
    with store.read() as tx:
        modes = {p.id: p.mode for p in tx.pools.all()}
        every_pool = sorted(modes) if pools is None else pools
        atoms = [
            a
            for a in tx.atoms.page(pool_id=pool_id, cls=None, bookable=None, limit=None, after=None)
            if pools is None or a.pool_id in pools
        ]
        on = {a.gpu_id for a in atoms}
        gpus = [g for g in tx.gpus.page(None, None, None) if g.id in on]
        ids = [a.id for a in atoms]
        booked = frozenset(
            b.atom_id
            for i in range(0, len(ids), _CHUNK)
            for b in tx.ledger.live_on(ids[i : i + _CHUNK], now)
            if b.starts_at <= now and not is_partition_change(b.allocation_id)
        )
    shown = {p: modes[p] for p in every_pool if p in modes}
    return Snapshot(now, tuple(every_pool), shown, tuple(atoms), tuple(gpus), booked)


def summary(
    store: StorePort[LedgerTx], principal: Principal, pool_id: str | None, now: datetime
) -> list[ModelCount]:
    """`capacity.summary`: whole GPUs per model, now (`domain.metering.rollups.summary`)."""
    snap = _snapshot(store, principal, pool_id, now)
    return rollups.summary(snap.gpus, snap.atoms, snap.booked)


def by_pool(
    store: StorePort[LedgerTx], principal: Principal, pool_id: str | None, now: datetime
) -> list[ClassCount]:
    """`capacity.byPool`: atoms per pool and class, now (`domain.metering.rollups.by_pool`)."""
    snap = _snapshot(store, principal, pool_id, now)
    return rollups.by_pool(snap.pool_modes, snap.atoms, snap.booked)


def timeline(
    store: StorePort[LedgerTx], principal: Principal, pool_id: str | None, grid: Grid
) -> list[WholeBooked]:
    """`capacity.timeline`: whole GPUs booked per bucket (`domain.metering.rollups.timeline`), from the
    ledger: a booking counts in the pool it was made in."""
    pools = _scope(store, principal, pool_id)
    held: list[Window] = []
    if pools != []:
        with store.read() as tx:
            held = tx.ledger.whole_gpus_held(pools, grid.window)
    return rollups.timeline(held, grid)
