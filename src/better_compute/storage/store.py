"""The store: an engine, migrations, and one transaction per use case."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine

from better_compute.storage import migrate
from better_compute.storage.db import READ_ONLY, SINGLE_STATEMENT, make_engine
from better_compute.storage.uow import SqlTx


class Store:
    """What the service layer opens transactions on; SQLite or PostgreSQL behind one interface."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # SQLite has one writer at a time. Threads of this process queue here, in order, instead of
        # polling the database's busy handler (which sleeps and makes tail latency unpredictable).
        self._writer = threading.Lock() if engine.dialect.name == "sqlite" else None

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
            with self.engine.begin() as conn:
                yield SqlTx(conn)
            return
        with self._writer, self.engine.begin() as conn:
            yield SqlTx(conn)

    @contextmanager
    def read(self) -> Iterator[SqlTx]:
        """A unit of work that writes nothing; it is rolled back when done."""
        # PostgreSQL reads run in autocommit: no BEGIN/ROLLBACK round trips around a single query.
        options = {"isolation_level": "AUTOCOMMIT"} if self.dialect == "postgresql" else {READ_ONLY: True}
        with self.engine.connect().execution_options(**options) as conn:
            yield SqlTx(conn)
            conn.rollback()

    def analyze(self) -> None:
        """Refresh the planner's statistics, after a bulk load made them wrong by orders of magnitude."""
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("ANALYZE")

    def close(self) -> None:
        self.engine.dispose()
