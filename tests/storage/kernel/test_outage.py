"""A database that cannot be reached or written is told apart from our own faults once, in storage
(storage/kernel/outage.py), on the drivers' real errors: the first is `Unavailable`, said in one log line
when it starts and one when it ends; a refused constraint or a broken statement stays what it is."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from better_compute.domain.kernel.errors import Unavailable
from better_compute.storage.kernel.db import make_engine
from better_compute.storage.kernel.outage import Outage, kind_of
from better_compute.storage.store import Store

OUTAGE_LOG = "better_compute.storage.kernel.outage"


def add_tenant(store: Store, tenant_id: str) -> None:
    with store.begin() as tx:
        tx.conn.execute(
            text("INSERT INTO tenants (id, name, created_at) VALUES (:id, :name, :at)"),
            {"id": tenant_id, "name": tenant_id, "at": datetime.now(UTC)},
        )


@pytest.fixture(autouse=True)
def outages_said() -> Iterator[None]:
    """The outage log on, as a server process has it: a command run in this process before
    (`admin bootstrap` through the CLI's runner) turns it off for its own one-line answer
    (`entrypoints.server_commands.quiet_outages`), and it would stay off for the rest of the run."""
    log = logging.getLogger(OUTAGE_LOG)
    was = log.disabled
    log.disabled = False
    yield
    log.disabled = was


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == OUTAGE_LOG]


def test_a_refused_constraint_or_a_broken_statement_is_not_unavailable(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    add_tenant(store, "t1")
    with caplog.at_level(logging.WARNING, logger=OUTAGE_LOG):
        with pytest.raises(IntegrityError):
            add_tenant(store, "t1")
        with pytest.raises(DBAPIError), store.read() as tx:
            tx.conn.execute(text("SELEC 1"))
        with pytest.raises(DBAPIError), store.begin() as tx:
            tx.conn.execute(text("UPDATE no_such_table SET x = 1"))
    assert store.outage.kind is None
    assert said(caplog) == []
    store.check()  # and the store is ready


def read_only(path: Path) -> Store:
    """A store on the SQLite file `path` opened read-only (SQLite's `mode=ro`: what a file whose mode
    or mount forbids writing gives, whoever runs the test)."""
    return Store(make_engine(f"sqlite:///file:{path}?mode=ro&uri=true"))


def test_a_read_only_sqlite_database_refuses_writes_as_unavailable_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "bc.db"
    Store.open(f"sqlite:///{path}").close()
    store = read_only(path)
    try:
        with caplog.at_level(logging.WARNING, logger=OUTAGE_LOG):
            for n in range(3):
                with pytest.raises(Unavailable) as refused:
                    add_tenant(store, f"t{n}")
                assert refused.value.retry_after == 30 and refused.value.read_only
                assert refused.value.code == "UNAVAILABLE"
            with store.read() as tx:  # reads are served, and do not end it
                assert tx.conn.execute(text("SELECT count(*) FROM tenants")).scalar_one() == 0
            with store.begin() as tx:  # a write transaction that writes nothing proves nothing either
                tx.conn.execute(text("SELECT count(*) FROM tenants"))
            with pytest.raises(Unavailable):
                store.check()
        assert store.outage.kind == "read_only"
        assert said(caplog) == [
            f"the SQLite database file:{path} cannot be written (attempt to write a readonly database):"
            " requests that write answer 503 UNAVAILABLE and /readyz is not ready until it can be written"
        ]
    finally:
        store.close()


def cannot_open(tmp_path: Path) -> sqlite3.OperationalError:
    try:
        sqlite3.connect(f"file:{tmp_path / 'missing' / 'bc.db'}?mode=ro", uri=True).close()
    except sqlite3.OperationalError as exc:
        return exc
    raise AssertionError("SQLite opened a file in a directory that does not exist")


def test_an_outage_is_said_once_when_it_starts_and_once_when_it_ends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    error = cannot_open(tmp_path)
    outage = Outage("the SQLite database /srv/bc.db")
    with caplog.at_level(logging.WARNING, logger=OUTAGE_LOG):
        refusals = [outage.failed(error) for _ in range(3)]
        outage.ended()
        outage.ended()
    assert all(r is not None and r.retry_after == 5 and not r.read_only for r in refusals)
    first, last = said(caplog)
    assert first == (
        "the SQLite database /srv/bc.db cannot be reached (unable to open database file): requests that"
        " need it answer 503 UNAVAILABLE and /readyz is not ready until it answers again"
    )
    assert last.startswith("the SQLite database /srv/bc.db answers again, after ")
    assert outage.kind is None and outage.started == 1


def test_what_says_the_store_is_out_of_reach(tmp_path: Path) -> None:
    assert kind_of(cannot_open(tmp_path)) == "unreachable"
    assert kind_of(PoolTimeout("QueuePool limit of size 10 overflow 10 reached")) == "unreachable"
    broken = sqlite3.connect(":memory:")
    with pytest.raises(sqlite3.OperationalError) as syntax:
        broken.execute("SELEC 1")
    with pytest.raises(sqlite3.IntegrityError) as constraint:
        broken.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        broken.execute("INSERT INTO t VALUES (1), (1)")
    broken.close()
    assert kind_of(syntax.value) is None
    assert kind_of(constraint.value) is None
    assert kind_of(ValueError("naive datetime given to the store")) is None


@pytest.mark.postgres
def test_a_postgres_database_that_refuses_writes_is_unavailable_until_it_takes_one(
    pg_store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store.open(pg_store_url, migrate_schema=False)
    try:
        with caplog.at_level(logging.WARNING, logger=OUTAGE_LOG):
            # A read-only transaction: what a standby (or default_transaction_read_only) answers.
            with pytest.raises(Unavailable) as refused, store.begin() as tx:
                tx.conn.execute(text("SET TRANSACTION READ ONLY"))
                tx.conn.execute(text("DELETE FROM tenants WHERE id = 'no-such-tenant'"))
            assert refused.value.retry_after == 30
            assert store.outage.kind == "read_only"
            store.check()  # the primary takes the write that changes nothing: the outage is over
        assert store.outage.kind is None
        start, end = said(caplog)
        assert " cannot be written (cannot execute DELETE in a read-only transaction): " in start
        assert " can be written again, after " in end
    finally:
        store.close()
