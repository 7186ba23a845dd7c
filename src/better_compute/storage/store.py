"""The store: an engine, migrations, and one transaction per use case."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, text

from better_compute.domain.kernel.errors import Unavailable
from better_compute.storage.kernel import migrate, pg_simple
from better_compute.storage.kernel.db import READ_ONLY, SINGLE_STATEMENT, describe, make_engine
from better_compute.storage.kernel.outage import Outage, kind_of
from better_compute.storage.uow import SqlTx

_PING = text("SELECT 1")
_PROBE = text("UPDATE alembic_version SET version_num = version_num WHERE 1 = 0")
"""A write that changes nothing: refused as any write is by a database that cannot be written."""


class _Resident:
    """The connections a thread keeps checked out (PostgreSQL only), made on first use.

    A thread that runs units of work one at a time (an event loop's; an admission worker's) needs
    one connection for transactions and one (in autocommit) for reads, and can keep them: checking
    a connection out of the pool and back in costs more client time than a short query. A unit of
    work opened while the thread's connection is busy (nested) takes one from the pool.

    A kept connection that is gone (invalidated under a unit of work), or that was made before the
    store's latest outage began (the database restarted under it, whether or not this thread
    noticed), is closed and made anew before it is used: SQLAlchemy's own reconnection would give
    it back without its isolation level.
    """

    def __init__(self, engine: Engine, outage: Outage) -> None:
        self._engine = engine
        self._outage = outage
        self._writer: Connection | None = None
        self._reader: Connection | None = None
        self._writer_made = self._reader_made = 0
        """`outage.started` when each connection was made."""
        self.writer_busy = False
        self.reader_busy = False

    def writer(self) -> Connection:
        if self._writer is not None and (
            self._writer.invalidated or self._writer_made != self._outage.started
        ):
            _drop(self._writer)
            self._writer = None
        if self._writer is None:
            self._writer_made = self._outage.started
            self._writer = self._engine.connect()
        return self._writer

    def reader(self) -> Connection:
        if self._reader is not None and (
            self._reader.invalidated or self._reader_made != self._outage.started
        ):
            _drop(self._reader)
            self._reader = None
        if self._reader is None:
            self._reader_made = self._outage.started
            self._reader = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        return self._reader

    def close(self) -> None:
        for conn in (self._writer, self._reader):
            if conn is not None:
                conn.close()

    def __del__(self) -> None:
        # The thread ended (its thread-local state is dropped): the connections go back to the pool.
        with contextlib.suppress(Exception):
            self.close()


def _drop(conn: Connection) -> None:
    """Close `conn` and what is left of its database connection, which does not go back to the pool."""
    with contextlib.suppress(Exception):
        conn.invalidate()
    with contextlib.suppress(Exception):
        conn.close()


def _rollback_keeping_statements(conn: Connection) -> None:
    """Roll back without psycopg's DEALLOCATE ALL.

    psycopg forgets every prepared statement of a connection when a transaction rolls back (in case
    the transaction dropped what they refer to). A refused reservation rolls back, and re-preparing
    the admission statements costs the next request more than its own work; these transactions
    change no schema, so the statements stay valid. SQLAlchemy's own rollback then finds the
    connection idle. A connection that is gone is left for SQLAlchemy to invalidate."""
    with contextlib.suppress(Exception):
        pg_simple.rollback(pg_simple.driver(conn))


def _work(conn: Connection) -> Iterator[SqlTx]:
    """The unit of work on `conn`. A connection found gone under it is dropped here, before it goes
    back to the pool or its thread keeps it: code that talks to the driver directly (the hot paths,
    storage/kernel/pg_simple.py) goes round SQLAlchemy, which would otherwise never learn that it is gone,
    and the next unit of work would get the dead connection again, long after the database is back."""
    try:
        yield SqlTx(conn)
    except Exception as exc:
        if kind_of(exc) == "unreachable":
            conn.invalidate()  # closes what is left of it; the next use connects anew
        raise


class Store:
    """What the service layer opens transactions on; SQLite or PostgreSQL behind one interface."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # SQLite has one writer at a time. Threads of this process queue here, in order, instead of
        # polling the database's busy handler (which sleeps and makes tail latency unpredictable).
        self._writer = threading.Lock() if engine.dialect.name == "sqlite" else None
        self._local = threading.local()
        self._residents: weakref.WeakSet[_Resident] = weakref.WeakSet()
        self._residents_lock = threading.Lock()
        self.outage = Outage(describe(engine.url))
        """Whether the database is out of reach now (storage/kernel/outage.py)."""

    @classmethod
    def open(cls, url: str, *, migrate_schema: bool = True, pool_size: int = 10) -> Store:
        store = cls(make_engine(url, pool_size=pool_size))
        if migrate_schema:
            migrate.upgrade(store.engine)
        return store

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def begin(self, *, single_statement: bool = False) -> Iterator[SqlTx]:
        """A write transaction: committed on success, rolled back on any exception.

        `single_statement`: the caller makes one write that the store guarantees atomic by itself
        (a booking); it then runs as its own transaction, without BEGIN and COMMIT statements (round
        trips on PostgreSQL). The durability is the same: the statement is committed before it returns.

        A database that cannot be reached or written raises `Unavailable` (storage/kernel/outage.py).
        """
        try:
            if single_statement and self._writer is None:
                with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                    yield from _work(conn)
            elif single_statement and self._writer is not None:
                with (
                    self._writer,
                    self.engine.connect().execution_options(**{SINGLE_STATEMENT: True}) as conn,
                ):
                    yield from _work(conn)
                    conn.rollback()
            elif (
                self._writer is None
                and (resident := self._resident()) is not None
                and not resident.writer_busy
            ):
                conn, resident.writer_busy = resident.writer(), True
                try:
                    with conn.begin():
                        try:
                            yield from _work(conn)
                        except BaseException:
                            _rollback_keeping_statements(conn)
                            raise
                finally:
                    resident.writer_busy = False
            elif self._writer is None:
                with self.engine.begin() as conn:
                    yield from _work(conn)
            else:
                with self._writer, self.engine.begin() as conn:
                    yield from _work(conn)
        except Exception as exc:
            refused = self._refused(exc)
            if refused is None:
                raise
            raise refused from exc
        if self.outage.kind is not None:
            self._answered(wrote=True)

    @contextmanager
    def read(self) -> Iterator[SqlTx]:
        """A unit of work that writes nothing; it is rolled back when done. A database that cannot be
        reached raises `Unavailable` (storage/kernel/outage.py)."""
        try:
            if (
                self._writer is None
                and (resident := self._resident()) is not None
                and not resident.reader_busy
            ):
                # PostgreSQL reads run in autocommit: no BEGIN/ROLLBACK round trips around a single query.
                conn, resident.reader_busy = resident.reader(), True
                try:
                    yield from _work(conn)
                finally:
                    # Ends SQLAlchemy's own bookkeeping transaction (no round trip in autocommit),
                    # and after a lost connection lets the next use reconnect.
                    conn.rollback()
                    resident.reader_busy = False
            elif self._writer is None:
                with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                    yield from _work(conn)
            else:
                with self.engine.connect().execution_options(**{READ_ONLY: True}) as conn:
                    yield from _work(conn)
                    conn.rollback()
        except Exception as exc:
            refused = self._refused(exc)
            if refused is None:
                raise
            raise refused from exc
        if self.outage.kind is not None:
            self._answered(wrote=False)

    def _refused(self, error: Exception) -> Unavailable | None:
        """What `error` is answered with if the database is out of reach (noted in the outage), else
        None. An outage of a PostgreSQL database that starts now drops the pool's idle connections: all
        of them predate it (the server restarted under them), and each would fail once more after it is
        back. (A SQLite file is opened anew by each connection; an in-memory one would be lost.)"""
        started = self.outage.started
        refused = self.outage.failed(error)
        if refused is not None and self.outage.started != started and self._writer is None:
            self.engine.dispose()  # closes the idle ones; those in use are dropped as they fail
        return refused

    def _answered(self, *, wrote: bool) -> None:
        """A unit of work succeeded while an outage is noted: it is over, unless the store could not
        be written and this proves nothing of that (a read; a write transaction may have written
        nothing), so that a write of its own decides."""
        if self.outage.kind == "read_only" and not (wrote and self._writable()):
            return
        self.outage.ended()

    def _probe(self) -> None:
        """A write that changes nothing (and takes SQLite's write lock, as every writer does): it fails
        as any write would on a database that cannot be reached or written."""
        if self._writer is None:
            with self.engine.begin() as conn:
                conn.execute(_PROBE)
            return
        with self._writer, self.engine.begin() as conn:
            conn.execute(_PROBE)

    def _writable(self) -> bool:
        try:
            self._probe()
        except Exception as exc:
            if kind_of(exc) is None:
                raise
            return False
        return True

    def check(self, *, write: bool = False) -> None:
        """Raise `Unavailable` unless the store answers now (a read), or, with `write` or while an
        outage is noted, takes a write; what it finds starts or ends the outage (and its log line).

        For readiness: a store found unwritable (a read-only SQLite file) answers reads, and is not
        ready all the same."""
        if not write and self.outage.kind is None:
            with self.read() as tx:
                tx.conn.execute(_PING)
            return
        try:
            self._probe()
        except Exception as exc:
            refused = self._refused(exc)
            if refused is None:
                raise
            raise refused from exc
        self.outage.ended()

    def keep_connections(self) -> None:
        self._local.keeps = True

    def _resident(self) -> _Resident | None:
        """This thread's resident connections if it runs an event loop or was told to keep them (see
        `_Resident`), else None."""
        resident: _Resident | None = getattr(self._local, "resident", None)
        if resident is None and not getattr(self._local, "keeps", False):
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return None
        if resident is None:
            resident = self._local.resident = _Resident(self.engine, self.outage)
            with self._residents_lock:
                self._residents.add(resident)
        return resident

    def analyze(self) -> None:
        """Refresh the planner's statistics, after a bulk load made them wrong by orders of magnitude."""
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("ANALYZE")

    def close(self) -> None:
        with self._residents_lock:
            residents = list(self._residents)
            self._residents.clear()
        for resident in residents:
            resident.close()
        self._local = threading.local()
        self.engine.dispose()
