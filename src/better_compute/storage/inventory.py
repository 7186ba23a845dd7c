"""Rows of the fleet: clusters, nodes, pools, GPUs and atoms. Bulk reads and upserts, no rules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table, select, update
from sqlalchemy.dialects import postgresql, sqlite

from better_compute.storage.tables import atoms, clusters, gpus, nodes, pool_nodes, pools

Row = dict[str, Any]


def upsert(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]], key: Sequence[str]) -> None:
    """Insert rows, or update every non-key column of the rows that already exist."""
    if not rows:
        return
    dialect_insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    batch = 500
    for i in range(0, len(rows), batch):
        chunk = [dict(r) for r in rows[i : i + batch]]
        stmt = dialect_insert(table).values(chunk)
        columns = [c for c in chunk[0] if c not in key]
        if columns:
            stmt = stmt.on_conflict_do_update(
                index_elements=list(key), set_={c: stmt.excluded[c] for c in columns}
            )
        else:
            stmt = stmt.on_conflict_do_nothing(index_elements=list(key))
        conn.execute(stmt)


def insert_new(conn: Connection, table: Table, new_rows: Sequence[Mapping[str, Any]]) -> int:
    """Insert rows one by one, skipping those that collide with any primary or unique key.

    Returns how many were inserted, so a caller can tell "created" from "already there" without
    catching a driver error (and a concurrent insert of the same key waits, then is skipped).
    """
    dialect_insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    inserted = 0
    for row in new_rows:
        stmt = dialect_insert(table).values(dict(row)).on_conflict_do_nothing()
        # RETURNING, not rowcount: drivers do not all report a row count for ON CONFLICT inserts.
        inserted += len(conn.execute(stmt.returning(*table.primary_key.columns)).all())
    return inserted


def compare_and_set(
    conn: Connection, table: Table, row_id: str, expected: Mapping[str, Any], values: Mapping[str, Any]
) -> bool:
    """Update one row by primary key only while `expected` still holds; True when it did."""
    key = next(iter(table.primary_key.columns))
    where = [
        key == row_id,
        *(table.c[k].is_(None) if v is None else table.c[k] == v for k, v in expected.items()),
    ]
    result = conn.execute(update(table).where(*where).values(dict(values)))
    return result.rowcount == 1


def rows(conn: Connection, stmt: Any) -> list[Row]:
    return [dict(r._mapping) for r in conn.execute(stmt)]


def gpus_of_nodes(conn: Connection, node_ids: Sequence[str]) -> list[Row]:
    return rows(conn, select(gpus).where(gpus.c.node_id.in_(list(node_ids))))


def atoms_of_nodes(conn: Connection, node_ids: Sequence[str]) -> list[Row]:
    return rows(conn, select(atoms).where(atoms.c.node_id.in_(list(node_ids))))


def nodes_by_id(conn: Connection, node_ids: Sequence[str]) -> dict[str, Row]:
    return {r["id"]: r for r in rows(conn, select(nodes).where(nodes.c.id.in_(list(node_ids))))}


def lock_nodes(conn: Connection, node_ids: Sequence[str]) -> None:
    """Lock the nodes' rows until the transaction ends (PostgreSQL; SQLite serialises writers), in
    id order so that lockers never wait on each other in a cycle. FOR NO KEY UPDATE: other writers
    that merely refer to a node (a foreign key's check) are not held up."""
    if conn.dialect.name == "postgresql" and node_ids:
        conn.execute(
            select(nodes.c.id)
            .where(nodes.c.id.in_(sorted(node_ids)))
            .order_by(nodes.c.id)
            .with_for_update(key_share=True)
        )


def pools_of_nodes(conn: Connection, node_ids: Sequence[str]) -> dict[str, Row]:
    """The pool (row) of each node that belongs to one."""
    stmt = select(pool_nodes.c.node_id, pools).join(pools, pools.c.id == pool_nodes.c.pool_id)
    stmt = stmt.where(pool_nodes.c.node_id.in_(list(node_ids)))
    return {r["node_id"]: r for r in rows(conn, stmt)}


def mark_observed(conn: Connection, node_id: str, generation: int, at: Any) -> None:
    conn.execute(
        update(nodes).where(nodes.c.id == node_id).values(observed_generation=generation, last_report_at=at)
    )


def list_table(
    conn: Connection,
    table: Table,
    *,
    where: Sequence[Any] = (),
    order_by: Any = None,
    limit: int | None = None,
    after: str | None = None,
) -> list[Row]:
    stmt = select(table).where(*where)
    key = next(iter(table.primary_key.columns))
    if after is not None:
        stmt = stmt.where(key > after)
    stmt = stmt.order_by(order_by if order_by is not None else key)
    if limit is not None:
        stmt = stmt.limit(limit)
    return rows(conn, stmt)


__all__ = [
    "atoms",
    "atoms_of_nodes",
    "clusters",
    "compare_and_set",
    "gpus",
    "gpus_of_nodes",
    "insert_new",
    "list_table",
    "mark_observed",
    "nodes",
    "nodes_by_id",
    "pool_nodes",
    "pools",
    "pools_of_nodes",
    "rows",
    "upsert",
]


def credential_by_hash(conn: Connection, token_hash: str) -> Row | None:
    """Looked up on every request, so straight to the driver with a fixed statement."""
    db = conn.connection.driver_connection
    assert db is not None
    mark = "%s" if conn.dialect.name == "postgresql" else "?"
    found = db.execute(
        f"SELECT id, tenant_id, is_admin, revoked_at FROM credentials WHERE token_hash = {mark}",
        (token_hash,),
    ).fetchone()
    if found is None:
        return None
    return {"id": found[0], "tenant_id": found[1], "is_admin": bool(found[2]), "revoked_at": found[3]}
