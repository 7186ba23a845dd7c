"""The atoms repository: what node reports and pool changes derived, by node, by pool, by id.

Each atom is written with its share of a GPU (`domain.metering.share`), which the booking statements
copy onto every booking of it (storage.ledger.COLUMNS)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, select

from better_compute.domain.atoms import Atom
from better_compute.domain.metering import share
from better_compute.storage import rows
from better_compute.storage.tables import atoms


def atom_of(r: Mapping[str, Any]) -> Atom:
    """An atom record from its row (also used by the reservations repository's joins)."""
    return Atom(
        id=r["id"],
        gpu_id=r["gpu_id"],
        node=r["node_id"],
        cls=r["class"],
        key=r["key"],
        bookable=bool(r["bookable"]),
        partition_pending=bool(r["partition_pending"]),
        pool_id=r["pool_id"],
        numa_node=r["numa_node"],
        nvlink_domain=r["nvlink_domain"],
        attributes=r["attributes"] or {},
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

    def of_pool(self, pool_id: str) -> list[Atom]:
        where = [atoms.c.pool_id == pool_id, atoms.c.present.is_(True)]
        return [atom_of(r) for r in rows.page(self.conn, atoms, where=where)]

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
