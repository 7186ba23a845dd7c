"""Row-level SQL the repositories share: bulk upserts, insert-if-new, compare-and-set, id-ordered pages.

Only repositories (`storage/<aggregate>.py`) call these; they take a Table object, never a name, and
what they return is turned into records before it leaves `storage/`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table, select, update
from sqlalchemy.dialects import postgresql, sqlite

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


def insert_missing(conn: Connection, table: Table, new_rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert rows in batches, leaving alone those whose primary key is already there."""
    dialect_insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    key = [c.name for c in table.primary_key.columns]
    for i in range(0, len(new_rows), 500):
        chunk = [dict(r) for r in new_rows[i : i + 500]]
        conn.execute(dialect_insert(table).values(chunk).on_conflict_do_nothing(index_elements=key))


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
    """Every row a statement returns, as a dict by column name."""
    return [dict(r._mapping) for r in conn.execute(stmt)]


def page(
    conn: Connection,
    table: Table,
    *,
    where: Sequence[Any] = (),
    order_by: Any = None,
    limit: int | None = None,
    after: str | None = None,
) -> list[Row]:
    """Rows in key order after the key `after`, at most `limit` of them."""
    stmt = select(table).where(*where)
    key = next(iter(table.primary_key.columns))
    if after is not None:
        stmt = stmt.where(key > after)
    stmt = stmt.order_by(order_by if order_by is not None else key)
    if limit is not None:
        stmt = stmt.limit(limit)
    return rows(conn, stmt)
