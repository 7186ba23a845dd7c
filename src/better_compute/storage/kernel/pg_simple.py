"""Several statements in one round trip on PostgreSQL, for the admission hot path.

psycopg sends each statement on its own, and BEGIN on its own before a transaction's first, so a
reservation's BEGIN, lock, read, write and COMMIT cost five round trips: each one a pair of system
calls and a wake-up in the server process and in PostgreSQL, which share the machine's cores. Sent as
one simple-protocol query, `BEGIN; SELECT lock; EXECUTE read(...)` is one round trip.

A simple query carries no parameters, so its statements are prepared once per connection with SQL's
own PREPARE (typed parameters, the same plan a driver-prepared statement gets) and their arguments
are quoted by psycopg's client-side binding (`ClientCursor.mogrify`), which adapts every value
exactly as psycopg's server-side binding would.

Statements prepared this way outlive a rolled-back transaction, but not psycopg's `DEALLOCATE ALL`
(run when it rolls back a connection on which it prepared statements of its own): a use that finds
them gone prepares them again and repeats itself once.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, cast

import psycopg
from psycopg import errors
from psycopg.pq import ConnStatus, DiagnosticField, ExecStatus, TransactionStatus
from psycopg.pq.abc import PGresult
from sqlalchemy import Connection

_PREPARED = "better_compute.simple.prepared"
_QUOTER = "better_compute.simple.quoter"
_CURSOR = "better_compute.simple.cursor"
_NOT_PREPARED = "26000"  # invalid_sql_statement_name: the prepared statement does not exist
_ALREADY_PREPARED = "42P05"  # duplicate_prepared_statement


@dataclass(frozen=True)
class Statement:
    """A statement written with psycopg's `%(name)s` placeholders, prepared with one typed parameter
    per entry of `types` (in that order).

    Its `name` is `base` and a digest of its text: a statement of the same name already on a
    connection (found when the record of preparing it was lost, or left by another release of the
    server on a pooled session) is then this very statement."""

    base: str
    sql: str
    types: Mapping[str, str]
    name: str = field(init=False)

    def __post_init__(self) -> None:
        digest = hashlib.sha256(f"{self.sql}|{list(self.types.items())}".encode()).hexdigest()[:12]
        object.__setattr__(self, "name", f"{self.base}_{digest}")

    def prepare(self) -> str:
        position = {arg: n + 1 for n, arg in enumerate(self.types)}
        body = re.sub(r"%\((\w+)\)s", lambda m: f"${position[m.group(1)]}", self.sql)
        return f"PREPARE {self.name} ({', '.join(self.types.values())}) AS {body}"

    @property
    def execute(self) -> str:
        """The EXECUTE statement, with placeholders for the arguments."""
        return f"EXECUTE {self.name} ({', '.join(f'%({arg})s' for arg in self.types)})"


class Lost(Exception):
    """The statements were not prepared on this connection (any more): prepare them and repeat."""


def driver(conn: Connection) -> psycopg.Connection[Any]:
    """The psycopg connection under `conn` (a PostgreSQL connection)."""
    db = conn.connection.driver_connection
    assert isinstance(db, psycopg.Connection)
    return db


def cursor(conn: Connection) -> psycopg.Cursor[Any]:
    """The connection's cursor for driver-prepared statements, made once and reused: making a cursor
    per statement costs more client time than the statement's round trip. (Plain statements one
    after another also cost less client time than psycopg's pipeline mode.)"""
    info = conn.connection.info
    found = info.get(_CURSOR)
    if found is None or found.closed:
        found = info[_CURSOR] = driver(conn).cursor()
    return cast("psycopg.Cursor[Any]", found)


def rollback(db: psycopg.Connection[Any]) -> None:
    """End an open transaction with a plain ROLLBACK. psycopg's own rollback also forgets every
    statement it prepared on the connection (DEALLOCATE ALL), which these statements survive."""
    if db.pgconn.transaction_status != TransactionStatus.IDLE:
        db.pgconn.exec_(b"ROLLBACK")


def may_begin(db: psycopg.Connection[Any]) -> bool:
    """No transaction is open and the connection is not in autocommit: a batch may begin one."""
    return db.pgconn.transaction_status == TransactionStatus.IDLE and not db.autocommit


def begin(db: psycopg.Connection[Any]) -> bytes:
    """The BEGIN psycopg would send for this connection, with its isolation level and access mode
    (SQLAlchemy sets the level on connections it hands back to the pool)."""
    command = b"BEGIN"
    if db.isolation_level is not None:
        command += b" ISOLATION LEVEL " + db.isolation_level.name.replace("_", " ").encode()
    if db.read_only is not None:
        command += b" READ ONLY" if db.read_only else b" READ WRITE"
    if db.deferrable is not None:
        command += b" DEFERRABLE" if db.deferrable else b" NOT DEFERRABLE"
    return command


def ensure_prepared(conn: Connection, db: psycopg.Connection[Any], statements: Sequence[Statement]) -> None:
    """Prepare `statements` on this connection (`db` under `conn`) unless they are (each batch's
    own: admission's and the workload writes' share a connection). Outside a
    transaction only (`may_begin`): a failed PREPARE would abort one."""
    info = conn.connection.info
    known = info.get(_PREPARED)
    if known is None or known[0] is not db:
        known = info[_PREPARED] = (db, set())
    names: set[str] = known[1]
    if all(statement.name in names for statement in statements):
        return
    for statement in statements:
        result = db.pgconn.exec_(statement.prepare().encode())
        if result.status == ExecStatus.COMMAND_OK:
            continue
        # Already there, under this name: the same text (see Statement).
        if result.error_field(DiagnosticField.SQLSTATE) != _ALREADY_PREPARED.encode():
            _raise(db, result)
    names.update(statement.name for statement in statements)


def forget(conn: Connection) -> None:
    conn.connection.info.pop(_PREPARED, None)


def quote(conn: Connection, db: psycopg.Connection[Any], sql: str, params: Mapping[str, Any]) -> bytes:
    """`sql` with `params` bound as literals, as psycopg would bind them on the server."""
    info = conn.connection.info
    quoter = info.get(_QUOTER)
    if quoter is None or quoter.connection is not db:
        quoter = info[_QUOTER] = psycopg.ClientCursor(db)
    return cast("str", quoter.mogrify(sql, params)).encode(db.info.encoding)


def run(conn: Connection, batch: bytes) -> PGresult:
    """Send `batch` (statements separated by `;`) as one query and return its last statement's
    result. Raise Lost when it used a statement that is not prepared (the transaction it was in
    is rolled back), or the error psycopg would raise for the statement that failed."""
    db = driver(conn)
    result = db.pgconn.exec_(batch)
    if result.status in (ExecStatus.TUPLES_OK, ExecStatus.COMMAND_OK):
        return result
    if result.error_field(DiagnosticField.SQLSTATE) == _NOT_PREPARED.encode():
        forget(conn)
        rollback(db)
        raise Lost()
    return _raise(db, result)


def _raise(db: psycopg.Connection[Any], result: PGresult) -> NoReturn:
    if db.pgconn.status == ConnStatus.BAD:
        message = db.pgconn.error_message.decode(errors="replace").strip()
        raise psycopg.OperationalError(f"the connection to the database was lost: {message}")
    raise errors.error_from_result(result, encoding=db.info.encoding)
