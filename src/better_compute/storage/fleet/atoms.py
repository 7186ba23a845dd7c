"""The atoms repository: what node reports and pool changes derived, by node, by pool, by id.

Each atom is written with its share of a GPU (`domain.fleet.shares.share`), which the booking statements
copy onto every booking of it (storage.ledger.ledger.COLUMNS)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from sys import intern
from typing import Any

from sqlalchemy import Connection, or_, select, update

from better_compute.domain.fleet.atoms import Atom, compact
from better_compute.domain.fleet.shares import share
from better_compute.domain.kernel.atom_classes import ATOM_CLASSES, AtomClass
from better_compute.domain.ledger.scrub import EndedHold
from better_compute.domain.placement.class_quotas import HeldAtom
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import atoms, bookings, nodes

_CHUNK = 1000
_CLASSES: dict[str, AtomClass] = {c: c for c in ATOM_CLASSES}


def atom_of(r: Mapping[Any, Any]) -> Atom:
    """An atom record from its row (also used by the reservations repository's joins). Strings that
    many atoms share (their GPU, node, pool, class, key) are interned and the attributes compact
    (`domain.fleet.atoms.Attributes`): a server holds every atom of its pools."""
    nvlink = r["nvlink_domain"]
    pool_id = r["pool_id"]
    return Atom(
        id=r["id"],
        gpu_id=intern(r["gpu_id"]),
        node=intern(r["node_id"]),
        cls=_CLASSES[r["class"]],
        key=intern(r["key"]),
        bookable=bool(r["bookable"]),
        partition_pending=bool(r["partition_pending"]),
        pool_id=None if pool_id is None else intern(pool_id),
        numa_node=r["numa_node"],
        nvlink_domain=None if nvlink is None else intern(nvlink),
        attributes=compact(r["attributes"] or {}),
        present=bool(r["present"]),
    )


def _row(a: Atom) -> dict[str, Any]:
    return {
        "id": a.id,
        "gpu_id": a.gpu_id,
        "node_id": a.node,
        "pool_id": a.pool_id,
        "class": a.cls,
        "key": a.key,
        "bookable": a.bookable,
        "partition_pending": a.partition_pending,
        "numa_node": a.numa_node,
        "nvlink_domain": a.nvlink_domain,
        "attributes": dict(a.attributes),
        "present": a.present,
        "gpu_share": str(share(a)),
    }


class SqlAtoms:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def of_nodes(self, node_ids: Sequence[str]) -> list[Atom]:
        stmt = select(atoms).where(atoms.c.node_id.in_(list(node_ids)))
        return [atom_of(r) for r in rows.rows(self.conn, stmt)]

    def ids_by_gpu(self, node_ids: Sequence[str]) -> dict[str, list[str]]:
        stmt = (
            select(atoms.c.gpu_id, atoms.c.id)
            .where(atoms.c.node_id.in_(list(node_ids)))
            .order_by(atoms.c.gpu_id, atoms.c.key)
        )
        found: dict[str, list[str]] = {}
        for gpu_id, atom_id in self.conn.execute(stmt):
            found.setdefault(gpu_id, []).append(atom_id)
        return found

    def of_pool(self, pool_id: str) -> list[Atom]:
        """Every present atom of the pool, in id order; each row made an atom as it is read, so that
        a big pool's rows are never all held at once as Python objects beside the atoms."""
        stmt = select(atoms).where(atoms.c.pool_id == pool_id, atoms.c.present.is_(True)).order_by(atoms.c.id)
        return [atom_of(r._mapping) for r in self.conn.execute(stmt)]

    def page(
        self,
        *,
        pool_id: str | None,
        cls: str | None,
        bookable: bool | None,
        limit: int | None,
        after: str | None,
    ) -> list[Atom]:
        where: list[Any] = [atoms.c.present.is_(True)]
        if pool_id is not None:
            where.append(atoms.c.pool_id == pool_id)
        if cls is not None:
            where.append(atoms.c["class"] == cls)
        if bookable is not None:
            where.append(atoms.c.bookable.is_(bookable))
        return [atom_of(r) for r in rows.page(self.conn, atoms, where=where, limit=limit, after=after)]

    def put(self, items: Sequence[Atom]) -> None:
        rows.upsert(self.conn, atoms, [_row(a) for a in items], ["id"])

    def ended_unscrubbed(
        self, now: datetime, *, pool_id: str | None = None, atom_ids: Sequence[str] | None = None
    ) -> list[EndedHold]:
        """Tenants' bookings of these atoms (of the pool's, or the ids given) made in the atom's
        pool, that ended by `now` and after the atom was last scrubbed (`domain.ledger.scrub.owed_by`)."""
        where: list[Any] = [
            bookings.c.state == "live",
            bookings.c.tenant_id.is_not(None),
            bookings.c.ends_at.is_not(None),
            bookings.c.ends_at <= now,
            bookings.c.pool_id == atoms.c.pool_id,
            or_(atoms.c.scrubbed_at.is_(None), bookings.c.ends_at > atoms.c.scrubbed_at),
        ]
        stmt = select(bookings.c.atom_id, bookings.c.tenant_id, bookings.c.ends_at, atoms.c.scrubbed_at).join(
            atoms, atoms.c.id == bookings.c.atom_id
        )
        if pool_id is not None:
            found = self.conn.execute(stmt.where(atoms.c.pool_id == pool_id, *where))
            return [EndedHold(a, t, e, s) for a, t, e, s in found]
        ids = list(atom_ids or ())
        out: list[EndedHold] = []
        for i in range(0, len(ids), _CHUNK):
            found = self.conn.execute(stmt.where(bookings.c.atom_id.in_(ids[i : i + _CHUNK]), *where))
            out.extend(EndedHold(a, t, e, s) for a, t, e, s in found)
        return out

    def mark_scrubbed(self, node_id: str, atom_ids: Sequence[str], now: datetime) -> list[str]:
        """Record that the node scrubbed these atoms at `now`; only the node's own atoms change.
        Returns the ids that did."""
        ids = sorted(set(atom_ids))
        if not ids:
            return []
        mine = [
            r[0]
            for r in self.conn.execute(
                select(atoms.c.id).where(atoms.c.id.in_(ids), atoms.c.node_id == node_id).order_by(atoms.c.id)
            )
        ]
        if mine:
            self.conn.execute(update(atoms).where(atoms.c.id.in_(mine)).values(scrubbed_at=now))
        return mine

    def held_at(self, tenant_ids: Sequence[str] | None, at: datetime) -> list[HeldAtom]:
        return held_at(self.conn, tenant_ids, at)

    def mark_scrubbed_pool(self, pool_id: str, now: datetime) -> None:
        """Count every atom of the pool as scrubbed at `now` (a pool that starts scrubbing: what was
        released before owes nothing)."""
        self.conn.execute(update(atoms).where(atoms.c.pool_id == pool_id).values(scrubbed_at=now))


def held_at(conn: Connection, tenant_ids: Sequence[str] | None, at: datetime) -> list[HeldAtom]:
    """`AtomRepo.held_at`: one join of live bookings covering `at` to their atoms and nodes. A
    partition change's bookings have no tenant, so they never count."""
    b = bookings.c
    stmt = (
        select(b.tenant_id, nodes.c.cluster_id, atoms)
        .select_from(bookings.join(atoms, atoms.c.id == b.atom_id).join(nodes, nodes.c.id == atoms.c.node_id))
        .where(
            b.state == "live",
            b.tenant_id.is_not(None),
            b.starts_at <= at,
            or_(b.ends_at.is_(None), b.ends_at > at),
        )
        .order_by(b.tenant_id, atoms.c.id)
    )
    if tenant_ids is not None:
        stmt = stmt.where(b.tenant_id.in_(list(tenant_ids)))
    return [HeldAtom(r["tenant_id"], r["cluster_id"], atom_of(r)) for r in rows.rows(conn, stmt)]


def mark_released(conn: Connection, atom_ids: Sequence[str], tenant_id: str, at: datetime) -> None:
    """Record that `tenant_id` released these atoms early, at `at`. On PostgreSQL the rows are
    locked first, in id order, as admission's booking statement share-locks them
    (storage.ledger.ledger.LOCKED_ATOMS_PG): a booking racing the release either commits first (and the
    exclusion constraint sees it overlap the booking not yet ended) or waits, and then re-reads
    these rows and sees the atom owed a scrub (storage.ledger.reservations._PG_COMMIT)."""
    ids = sorted(set(atom_ids))
    if not ids:
        return
    if conn.dialect.name == "postgresql":
        conn.execute(
            select(atoms.c.id).where(atoms.c.id.in_(ids)).order_by(atoms.c.id).with_for_update(key_share=True)
        )
    conn.execute(
        update(atoms)
        .where(atoms.c.id.in_(ids), or_(atoms.c.released_at.is_(None), atoms.c.released_at <= at))
        .values(released_by=tenant_id, released_at=at)
    )
