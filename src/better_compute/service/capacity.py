"""Capacity as a user asks about it: per atom, booked now and next free; per pool, what could be
booked for a window and when (`domain.capacity`).

Both read the ledger itself, not this process's booking index: a second server, or a booking made a
moment ago through another one, must show here too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from better_compute.domain.atoms import Atom, check_atom_class
from better_compute.domain.capacity import FreeKind, check_count, free_by_kind
from better_compute.domain.credentials import Principal
from better_compute.domain.ledger import Availability, availability
from better_compute.domain.timewin import Window
from better_compute.service.pools import get_pool
from better_compute.service.ports import StorePort, Tx

_CHUNK = 1000
"""Atom ids per ledger read: keeps each statement's parameter list far below SQLite's limit."""


@dataclass(frozen=True, slots=True)
class PoolFree:
    """A pool's answer to `capacity.free`: its kinds of atoms, each free or when it will be."""

    pool_id: str
    window: Window
    count: int
    kinds: tuple[FreeKind, ...]


def _busy(tx: Tx, atom_ids: Sequence[str], since: datetime) -> dict[str, list[Window]]:
    out: dict[str, list[Window]] = {a: [] for a in atom_ids}
    for i in range(0, len(atom_ids), _CHUNK):
        for b in tx.ledger.live_on(atom_ids[i : i + _CHUNK], since):
            out[b.atom_id].append(Window(b.starts_at, b.ends_at))
    return out


def availability_of(store: StorePort, atoms: Iterable[Atom], now: datetime) -> dict[str, Availability]:
    """Each atom's `Availability` at `now` (for `atoms.list`), in one ledger read per thousand atoms."""
    ids = [a.id for a in atoms]
    if not ids:
        return {}
    with store.read() as tx:
        busy = _busy(tx, ids, now)
    return {atom_id: availability(spans, now) for atom_id, spans in busy.items()}


def free(
    store: StorePort,
    principal: Principal,
    pool_id: str,
    window: Window,
    *,
    cls: str | None = None,
    count: int = 1,
) -> PoolFree:
    """What the pool could book for `window`, per kind of atom (`domain.capacity.free_by_kind`).

    A pool the caller may not see is NOT_FOUND, as everywhere (`pools.get`)."""
    wanted_cls = None if cls is None else check_atom_class(cls, "class")
    wanted_count = check_count(count)
    get_pool(store, principal, pool_id)
    with store.read() as tx:
        atoms = [
            a for a in tx.atoms.of_pool(pool_id) if a.bookable and (wanted_cls is None or a.cls == wanted_cls)
        ]
        busy = _busy(tx, [a.id for a in atoms], window.start)
    kinds = free_by_kind(atoms, busy, window, wanted_count)
    return PoolFree(pool_id, window, wanted_count, tuple(kinds))
