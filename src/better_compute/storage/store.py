"""The store: an engine, migrations, and one transaction per use case."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine

from better_compute.storage import migrate, pg_simple
from better_compute.storage.db import READ_ONLY, SINGLE_STATEMENT, make_engine
from better_compute.storage.uow import SqlTx


class _Resident:
    """The connections a thread keeps checked out (PostgreSQL only), made on first use.

    A thread that runs units of work one at a time (an event loop's; an admission worker's) needs
    one connection for transactions and one (in autocommit) for reads, and can keep them: checking
    a connection out of the pool and back in costs more client time than a short query. A unit of
    work opened while the thread's connection is busy (nested) takes one from the pool.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._writer: Connection | None = None
        self._reader: Connection | None = None
        self.writer_busy = False
        self.reader_busy = False

    def writer(self) -> Connection:
        if self._writer is None:
            self._writer = self._engine.connect()
        return self._writer

    def reader(self) -> Connection:
        if self._reader is None:
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


def _rollback_keeping_statements(conn: Connection) -> None:
    """Roll back without psycopg's DEALLOCATE ALL.

    psycopg forgets every prepared statement of a connection when a transaction rolls back (in case
    the transaction dropped what they refer to). A refused reservation rolls back, and re-preparing
    the admission statements costs the next request more than its own work; these transactions
    change no schema, so the statements stay valid. SQLAlchemy's own rollback then finds the
    connection idle. A connection that is gone is left for SQLAlchemy to invalidate."""
    with contextlib.suppress(Exception):
        pg_simple.rollback(pg_simple.driver(conn))


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
        """
        if single_statement and self._writer is None:
            with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                yield SqlTx(conn)
            return
        if single_statement and self._writer is not None:
            with self._writer, self.engine.connect().execution_options(**{SINGLE_STATEMENT: True}) as conn:
                yield SqlTx(conn)
                conn.rollback()
            return
        if self._writer is None:
            resident = self._resident()
            if resident is not None and not resident.writer_busy:
                conn, resident.writer_busy = resident.writer(), True
                try:
                    with conn.begin():
                        try:
                            yield SqlTx(conn)
                        except BaseException:
                            _rollback_keeping_statements(conn)
                            raise
                finally:
                    resident.writer_busy = False
                return
            with self.engine.begin() as conn:
                yield SqlTx(conn)
            return
        with self._writer, self.engine.begin() as conn:
            yield SqlTx(conn)

    @contextmanager
    def read(self) -> Iterator[SqlTx]:
        """A unit of work that writes nothing; it is rolled back when done."""
        if self._writer is None:
            # PostgreSQL reads run in autocommit: no BEGIN/ROLLBACK round trips around a single query.
            resident = self._resident()
            if resident is not None and not resident.reader_busy:
                conn, resident.reader_busy = resident.reader(), True
                try:
                    yield SqlTx(conn)
                finally:
                    # Ends SQLAlchemy's own bookkeeping transaction (no round trip in autocommit),
                    # and after a lost connection lets the next use reconnect.
                    conn.rollback()
                    resident.reader_busy = False
                return
            with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                yield SqlTx(conn)
            return
        with self.engine.connect().execution_options(**{READ_ONLY: True}) as conn:
            yield SqlTx(conn)
            conn.rollback()

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
            resident = self._local.resident = _Resident(self.engine)
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
