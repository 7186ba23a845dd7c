"""The events stream under transactions that commit out of id order, on PostgreSQL.

An event's id comes from a sequence when the row is written, not when its transaction commits, so a
smaller id can become visible after a larger one. A stream that followed ids alone would serve the
larger, move its cursor past the smaller, and never serve that one. These tests hold transactions
open on their own connections, in both orders, and check that a follower gets every committed
event exactly once, and none of a transaction that rolls back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Connection, text

from better_compute.domain.tenancy.credentials import Principal
from better_compute.domain.tenancy.events import TenantCreated
from better_compute.service.ops import events
from better_compute.storage.kernel.events import append
from better_compute.storage.store import Store
from tests.builders import T0

pytestmark = pytest.mark.postgres

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="g-admin")


class Follower:
    """A client of `events.list` that resumes after the last id it received, as the CLI does."""

    def __init__(self, store: Store, limit: int = 2) -> None:
        self.store = store
        self.limit = limit
        self.after: str | None = None
        self.seen: list[str] = []

    def settle(self, count: int) -> list[str]:
        """Poll until `count` more events arrived: a maintenance transaction of the server's own
        (autovacuum's ANALYZE takes a transaction id) can hold the stream back a moment."""
        got: list[str] = []
        for _ in range(500):
            got += self.poll()
            if len(got) >= count:
                return got
            time.sleep(0.01)
        return got

    def poll(self) -> list[str]:
        """Read to the end of what the stream holds now; the subjects read this time."""
        got: list[str] = []
        while True:
            page = events.list_events(self.store, ADMIN, after=self.after, limit=self.limit)
            got += [e.event.subject for e in page.items]
            if page.items:
                self.after = str(page.items[-1].id)
            if page.next_cursor is None:
                self.seen += got
                return got


@contextmanager
def open_transaction(store: Store) -> Iterator[Connection]:
    """A connection inside a transaction the test ends itself (commit, or rollback on leaving)."""
    conn = store.engine.connect()
    tx = conn.begin()
    try:
        yield conn
    finally:
        if tx.is_active:
            tx.rollback()
        conn.close()


def event_id(conn: Connection, subject: str) -> int:
    return int(conn.execute(text("SELECT id FROM events WHERE subject = :s"), {"s": subject}).scalar_one())


def write(conn: Connection, subject: str) -> int:
    append(conn, TenantCreated(subject, subject), T0)
    return event_id(conn, subject)


def test_a_smaller_id_that_commits_later_is_not_skipped(pg_store: Store) -> None:
    follower = Follower(pg_store)
    with pg_store.begin() as tx:
        tx.events.append(TenantCreated("first", "first"), T0)
    assert follower.settle(1) == ["first"]
    with open_transaction(pg_store) as slow, open_transaction(pg_store) as quick:
        small = write(slow, "slow")
        large = write(quick, "quick")
        assert small < large
        quick.commit()
        # The larger id is visible, but the smaller may still commit: nothing is served past it.
        assert follower.poll() == []
        slow.commit()
    assert follower.settle(2) == ["slow", "quick"]
    assert follower.seen == ["first", "slow", "quick"]
    assert follower.poll() == []


def test_an_older_transaction_writing_a_larger_id_is_served_once_it_commits(pg_store: Store) -> None:
    follower = Follower(pg_store)
    with open_transaction(pg_store) as old, open_transaction(pg_store) as young:
        old.execute(text("SELECT pg_current_xact_id()"))  # the older transaction, by its id
        young.execute(text("SELECT pg_current_xact_id()"))
        small = write(young, "young")
        young.commit()
        assert follower.poll() == []  # the older transaction is still open and may write events
        large = write(old, "old")
        assert small < large
        old.commit()
    # In transaction order: the older transaction's event first, though its id is larger.
    assert follower.settle(2) == ["old", "young"]
    assert follower.poll() == []


def test_a_rolled_back_transaction_holds_the_stream_only_until_it_ends(pg_store: Store) -> None:
    follower = Follower(pg_store)
    with open_transaction(pg_store) as doomed:
        write(doomed, "doomed")
        with pg_store.begin() as tx:
            tx.events.append(TenantCreated("kept", "kept"), T0)
        assert follower.poll() == []
    assert follower.settle(1) == ["kept"]


def test_an_open_transaction_of_another_database_does_not_hold_the_stream(
    pg_store: Store, postgres_url: str
) -> None:
    from tests.conftest import own_database

    follower = Follower(pg_store)
    with own_database(postgres_url, "bc_other") as other_url:
        other = Store.open(other_url)
        try:
            with open_transaction(other) as elsewhere:
                write(elsewhere, "elsewhere")  # an open writer in another database on the server
                with pg_store.begin() as tx:
                    tx.events.append(TenantCreated("here", "here"), T0)
                assert follower.settle(1) == ["here"]
        finally:
            other.close()


def test_racing_writers_are_each_served_once(pg_store: Store) -> None:
    """Writers commit concurrently, each holding its transaction open a moment after writing, while
    a follower polls; afterwards it has every committed event exactly once."""
    follower = Follower(pg_store, limit=3)
    writers, per_writer = 4, 15
    go = threading.Barrier(writers + 1)
    failures: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            go.wait()
            for i in range(per_writer):
                with open_transaction(pg_store) as conn:
                    write(conn, f"w{n}-{i}")
                    conn.execute(text("SELECT pg_sleep(0.002)"))
                    if i % 5 == 4:
                        continue  # rolled back on leaving
                    conn.commit()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    go.wait()
    while any(t.is_alive() for t in threads):
        follower.poll()
    for t in threads:
        t.join()
    committed = {f"w{n}-{i}" for n in range(writers) for i in range(per_writer) if i % 5 != 4}
    follower.settle(len(committed) - len(follower.seen))
    assert failures == []
    assert sorted(follower.seen) == sorted(committed)
    assert len(follower.seen) == len(set(follower.seen))
