"""Row-level SQL the repositories share: bulk upserts, insert-if-new, compare-and-set, id-ordered pages.

Only repositories (`storage/<aggregate>.py`) call these; they take a Table object, never a name, and
what they return is turned into records before it leaves `storage/`.
"""

from __future__ import annotations

import itertools
import json
import operator
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import orjson
import psycopg
from sqlalchemy import (
    JSON,
    Connection,
    Dialect,
    Table,
    TypeDecorator,
    any_,
    bindparam,
    insert,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

Row = dict[str, Any]


COPY_FROM = 100
"""Rows from which a PostgreSQL upsert goes through COPY: fewer go as one cached statement."""


def upsert(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]], key: Sequence[str]) -> None:
    """Insert rows, or update every non-key column of the rows that already exist.

    Many rows on PostgreSQL are copied into a temporary table and merged from there in one statement
    (`_copy_upsert`); otherwise one statement, compiled once and cached, is executed for every row.
    A multi-VALUES statement built per batch spent most of a big fleet's ingest compiling thousands
    of bind parameters. Every row must name the same columns."""
    if not rows:
        return
    if conn.dialect.name == "postgresql" and len(rows) >= COPY_FROM:
        _copy_upsert(conn, table, rows, key)
        return
    dialect_insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    stmt = dialect_insert(table)
    columns = [c for c in rows[0] if c not in key]
    if columns:
        stmt = stmt.on_conflict_do_update(
            index_elements=list(key), set_={c: stmt.excluded[c] for c in columns}
        )
    else:
        stmt = stmt.on_conflict_do_nothing(index_elements=list(key))
    conn.execute(stmt, [dict(r) for r in rows])


def upsert_held(
    conn: Connection, table: Table, new_rows: Sequence[Mapping[str, Any]], key: str, holder: str
) -> set[Any]:
    """Insert rows, or update those already there whose `holder` column has the row's value; returns
    the keys of rows another holder has, which are left as they are. A key that a transaction still
    in progress inserted waits for it, and is judged by what it committed (ON CONFLICT ... WHERE):
    of two transactions claiming one key for two holders, the second is told. Rows go in key
    order (so two such writers wait on each other in one order). On PostgreSQL from `COPY_FROM`
    rows they are first copied in as new (`_copy_new`: a fleet's first reports are), and merged
    through COPY as in `upsert` when a key was taken. Every row must name the same columns, each
    key once."""
    if not new_rows:
        return set()
    ordered = sorted(new_rows, key=operator.itemgetter(key))
    if conn.dialect.name == "postgresql" and len(ordered) >= COPY_FROM:
        if _copy_new(conn, table, ordered):
            return set()
        written = _copy_upsert(conn, table, ordered, [key], holder=holder)
    else:
        dialect_insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
        stmt = dialect_insert(table)
        claim = stmt.on_conflict_do_update(
            index_elements=[key],
            set_={c: stmt.excluded[c] for c in ordered[0] if c != key},
            where=table.c[holder] == stmt.excluded[holder],
        ).returning(table.c[key])
        written = {r[0] for r in conn.execute(claim, [dict(r) for r in ordered])}
    return {r[key] for r in ordered} - written


def _copy_new(conn: Connection, table: Table, new_rows: Sequence[Mapping[str, Any]]) -> bool:
    """COPY rows none of whose keys is taken yet straight into `table`, all or none (PostgreSQL):
    False, with nothing written and the transaction usable, when one is taken (by a row there, or
    by a transaction that committed it meanwhile: COPY waits for it). A fleet's first reports are
    all new, and a plain COPY costs a third of a merge through a scratch table."""
    db = conn.connection.driver_connection
    assert db is not None
    db.execute("SAVEPOINT bc_copy_new")
    try:
        with db.cursor() as cur:
            _copy(cur, table.name, table, new_rows, conn.dialect)
    except psycopg.errors.UniqueViolation:
        db.execute("ROLLBACK TO SAVEPOINT bc_copy_new")
        return False
    db.execute("RELEASE SAVEPOINT bc_copy_new")
    return True


def _copy_upsert(
    conn: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    key: Sequence[str],
    *,
    holder: str | None = None,
) -> set[Any]:
    """The PostgreSQL bulk path of `upsert`: COPY into a temporary table (dropped at commit), then one
    INSERT ... SELECT ... ON CONFLICT, in key order (the order the caller's locks are taken in).
    COPY sends the rows as one stream the server parses without planning a statement per row: a
    fleet's first reports write tens of thousands of atoms a batch. With `holder` (`upsert_held`),
    an existing row is updated only where its `holder` column has the new row's value, and the
    keys written are returned (one key column)."""
    columns = list(rows[0])
    names = ", ".join(f'"{c}"' for c in columns)
    scratch = f"_upsert_{table.name}_{next(_SCRATCH)}"
    raw = conn.connection.driver_connection
    assert raw is not None
    with raw.cursor() as cur:
        # The columns alone (types, no constraint or default): what the merge checks is the table's.
        cur.execute(
            f'CREATE TEMPORARY TABLE "{scratch}" ON COMMIT DROP AS SELECT {names} FROM "{table.name}" WITH NO DATA'
        )
        _copy(cur, scratch, table, rows, conn.dialect)
        updates = [c for c in columns if c not in key]
        conflict = ", ".join(f'"{c}"' for c in key)
        action = (
            "DO UPDATE SET " + ", ".join(f'"{c}" = EXCLUDED."{c}"' for c in updates)
            if updates
            else "DO NOTHING"
        )
        if holder is not None:
            action += f' WHERE "{table.name}"."{holder}" = EXCLUDED."{holder}" RETURNING {conflict}'
        cur.execute(
            f'INSERT INTO "{table.name}" ({names}) SELECT {names} FROM "{scratch}" ORDER BY {conflict} '
            f"ON CONFLICT ({conflict}) {action}"
        )
        written = {r[0] for r in cur.fetchall()} if holder is not None else set()
        cur.execute(f'DROP TABLE "{scratch}"')
    return written


_SCRATCH = itertools.count()


def _copy(cur: Any, target: str, table: Table, rows: Sequence[Mapping[str, Any]], dialect: Dialect) -> None:
    """COPY `rows` (of `table`'s columns) into the table named `target`, each value as a statement
    would bind it: through its column type's `process_bind_param` (`UtcDateTime` refuses a naive
    datetime here too), and a JSON column's as its text."""
    columns = list(rows[0])
    # JSON as SQLAlchemy writes it: a None is JSON's null unless the column stores it as SQL NULL.
    as_json = {c: not t.none_as_null for c in columns if isinstance(t := table.c[c].type, JSON)}
    texts = [(n, as_json[c]) for n, c in enumerate(columns) if c in as_json]
    binds = [
        (n, t.process_bind_param)
        for n, c in enumerate(columns)
        if isinstance(t := table.c[c].type, TypeDecorator)
    ]
    values = operator.itemgetter(*columns)
    names = ", ".join(f'"{c}"' for c in columns)
    with cur.copy(f'COPY "{target}" ({names}) FROM STDIN') as copy:
        for row in rows:
            copied = list(values(row)) if len(columns) > 1 else [row[columns[0]]]
            for n, bind in binds:
                copied[n] = bind(copied[n], dialect)
            for n, json_null in texts:  # a JSON column's value as its text
                if copied[n] is not None or json_null:
                    copied[n] = _dumps(copied[n])
            copy.write_row(copied)


def insert_all(conn: Connection, table: Table, new_rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert rows that are new (a key already there is an error, as with any insert): through COPY
    on PostgreSQL from `COPY_FROM` rows, otherwise one cached statement for every row. Every row
    must name the same columns."""
    if not new_rows:
        return
    if conn.dialect.name == "postgresql" and len(new_rows) >= COPY_FROM:
        raw = conn.connection.driver_connection
        assert raw is not None
        with raw.cursor() as cur:
            _copy(cur, table.name, table, new_rows, conn.dialect)
        return
    conn.execute(insert(table), [dict(r) for r in new_rows])


def _dumps(value: Any) -> str:
    """JSON text for COPY: the same JSON value a statement stores through SQLAlchemy's JSON type (its
    text may differ in spacing and escapes, which no reader sees). A fleet's first reports write an
    attributes object for each of tens of thousands of atoms, and `orjson` writes one several times
    faster than `json`. What `json` would refuse goes to it, to be refused as a statement refuses
    it: a date, a dataclass or a subclass of a JSON type (passed through), and an integer past 64
    bits, which `json` writes. One difference stays: a float that is not finite is written as null
    (a statement's `NaN` is refused by PostgreSQL); no domain value is one."""
    try:
        return orjson.dumps(value, option=_PASSED_ON).decode()
    except TypeError:
        return json.dumps(value)


_PASSED_ON = (
    orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def insert_missing(conn: Connection, table: Table, new_rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert rows, leaving alone those whose primary key is already there (one cached statement,
    executed for every row, as `upsert`). Every row must name the same columns."""
    if not new_rows:
        return
    dialect_insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    key = [c.name for c in table.primary_key.columns]
    conn.execute(
        dialect_insert(table).on_conflict_do_nothing(index_elements=key), [dict(r) for r in new_rows]
    )


def insert_new(conn: Connection, table: Table, new_rows: Sequence[Mapping[str, Any]]) -> int:
    """Insert rows, skipping those that collide with any primary or unique key.

    Returns how many were inserted, so a caller can tell "created" from "already there" without
    catching a driver error (and a concurrent insert of the same key waits, then is skipped). One
    cached statement for every row, sent in batches (a big pool's members are thousands of rows).
    Every row must name the same columns.
    """
    if not new_rows:
        return 0
    dialect_insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    stmt = dialect_insert(table).on_conflict_do_nothing()
    # RETURNING, not rowcount: drivers do not all report a row count for ON CONFLICT inserts.
    returned = conn.execute(stmt.returning(*table.primary_key.columns), [dict(r) for r in new_rows])
    return len(returned.all())


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


IN_CHUNK = 1000
"""Values one IN list of `matching` holds on SQLite."""


def matching(conn: Connection, column: Any, values: Sequence[Any]) -> Iterator[Any]:
    """Conditions that together select the rows whose `column` is one of `values` (each condition to
    be run in a statement of its own): on PostgreSQL one, `column = ANY(array)`, the values bound as
    one array parameter (a fleet's worth of keys binds and plans as one); on SQLite IN lists of
    `IN_CHUNK` values (a statement there takes a bounded number of parameters). None for no values."""
    if not values:
        return
    if conn.dialect.name == "postgresql":
        yield column == any_(bindparam(None, list(values), type_=postgresql.ARRAY(column.type), unique=True))
        return
    for i in range(0, len(values), IN_CHUNK):
        yield column.in_(list(values[i : i + IN_CHUNK]))


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
