"""Admission's one-round-trip read on PostgreSQL: it recovers when its prepared statements are gone,
binds any text safely, and a lost connection fails one reservation only."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from itertools import count
from typing import Any, TypeVar

import psycopg
import pytest
from sqlalchemy import text

from better_compute.domain.kernel.errors import Unavailable
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.storage.kernel import pg_simple
from better_compute.storage.store import Store
from tests.builders import T0, fleet_spec
from tests.conftest import _truncate_all

pytestmark = pytest.mark.postgres
T = TypeVar("T")
ACME = Principal(tenant_id="acme", is_admin=False, credential_id=None)
ADMISSION_STATEMENTS = {"bc_admission_lock", "bc_admission_snapshot"}


@pytest.fixture(autouse=True)
def batches(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every batch admission sends: a test of the batched read checks it was the one taken."""
    sent: list[bytes] = []
    run = pg_simple.run

    def counting(conn: Any, batch: bytes) -> Any:
        sent.append(batch)
        return run(conn, batch)

    monkeypatch.setattr(pg_simple, "run", counting)
    return sent


@pytest.fixture
def pg(pg_store_url: str) -> Iterator[Store]:
    store = Store.open(pg_store_url, migrate_schema=False)
    _truncate_all(store)
    load_fleet(store, fleet_spec(nodes=1, layout="all-1g.10gb"), T0)
    with store.begin() as tx:
        tx.conn.execute(
            text(
                'INSERT INTO quotas (tenant_id, pool_id, class, "limit", updated_at)'
                " VALUES ('acme', 'p1', 'gpu.mig', 100, :at)"
            ),
            {"at": T0},
        )
    try:
        yield store
    finally:
        store.close()


def _kept(store: Store, work: Callable[[], T]) -> T:
    """Run `work` on a thread that keeps its connections, as an admission worker does."""
    out: list[Any] = []

    def run() -> None:
        store.keep_connections()
        try:
            out.append(work())
        except BaseException as exc:  # handed to the test thread
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]  # type: ignore[no-any-return]


class Booker:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.index = BookingIndex()
        self.ids = count()
        # Loaded up front, as a server's is after its first request: a request that loads it reads
        # inside a transaction already begun, the usual way.
        with store.read() as tx:
            self.index.prepare(tx)

    def reserve(self, key: str | None = None, hour: int | None = None) -> reservations.ReservationView:
        n = next(self.ids)
        body: dict[str, Any] = {
            "poolId": "p1",
            "devices": [{"class": "gpu.mig", "count": 1}],
            "start": (T0 + timedelta(hours=1 + (n if hour is None else hour))).isoformat(),
            "duration": "1h",
        }
        if key is not None:
            body["idempotencyKey"] = key
        return reservations.create(self.store, self.index, ACME, body, T0, lambda: f"rsv-batch-{n}")

    def prepared(self) -> set[str]:
        """Admission's statements on this thread's connection, by name without their digest."""
        with self.store.begin() as tx:
            found = tx.conn.execute(text("SELECT name FROM pg_prepared_statements")).scalars()
            return {str(name).rpartition("_")[0] for name in found} & ADMISSION_STATEMENTS

    def writer_pid(self) -> int:
        with self.store.begin() as tx:
            return int(tx.conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_admission_prepares_its_statements_once_and_reads_in_one_round_trip(
    pg: Store, batches: list[bytes]
) -> None:
    booker = Booker(pg)

    def work() -> tuple[set[str], int, int]:
        booker.reserve()
        prepared = booker.prepared()
        pid = booker.writer_pid()
        for _ in range(3):
            booker.reserve()
        return prepared, pid, booker.writer_pid()

    prepared, pid_before, pid_after = _kept(pg, work)
    assert prepared == ADMISSION_STATEMENTS
    assert pid_before == pid_after
    assert len(batches) == 4
    assert all(b.startswith(b"BEGIN") and b"; EXECUTE bc_admission_lock_" in b for b in batches)
    with pg.read() as tx:
        assert tx.conn.execute(text("SELECT count(*) FROM reservations")).scalar_one() == 4


def test_dropped_statements_are_prepared_again_and_the_reservation_goes_through(
    pg: Store, batches: list[bytes]
) -> None:
    booker = Booker(pg)

    def work() -> list[str]:
        booker.reserve()
        assert booker.prepared() == ADMISSION_STATEMENTS
        with pg.begin() as tx:
            # A failed statement rolled back by psycopg itself: it forgets its prepared statements
            # with DEALLOCATE ALL, admission's among them.
            db = pg_simple.driver(tx.conn)
            assert db is not None
            with contextlib.suppress(psycopg.errors.DivisionByZero):
                db.execute("SELECT 1/0")
            db.rollback()
        assert booker.prepared() == set()
        made = booker.reserve()
        # The record of them was lost while they still exist: prepared again from a clean slate.
        with pg.begin() as tx:
            pg_simple.forget(tx.conn)
        again = booker.reserve()
        return [made.id, again.id, *sorted(booker.prepared())]

    assert _kept(pg, work) == ["rsv-batch-1", "rsv-batch-2", *sorted(ADMISSION_STATEMENTS)]
    # The first, one after the drop (refused, then repeated after preparing again), the last.
    assert len(batches) == 4


@pytest.mark.parametrize(
    "key",
    [
        pytest.param("o'neil", id="a single quote"),
        pytest.param("back\\slash", id="a backslash"),
        pytest.param("semi; ROLLBACK; --", id="SQL after a semicolon"),
        pytest.param("ünï 💡", id="non-ASCII letters and an emoji"),
        pytest.param("$1 %(t)s", id="placeholders in both psycopg styles"),
    ],
)
def test_any_idempotency_key_is_bound_as_text_and_replays(pg: Store, key: str, batches: list[bytes]) -> None:
    booker = Booker(pg)

    def work() -> tuple[str, str, bool]:
        first = booker.reserve(key, hour=5)
        again = booker.reserve(key, hour=5)
        return first.id, again.id, again.replayed

    first, again, replayed = _kept(pg, work)
    assert (first, again, replayed) == ("rsv-batch-0", "rsv-batch-0", True)
    assert len(batches) == 2
    with pg.read() as tx:
        stored = tx.conn.execute(text("SELECT idempotency_key FROM reservations")).scalars().all()
    assert stored == [key]


def test_a_lost_connection_fails_one_reservation_and_the_next_reconnects(
    pg: Store, pg_store_url: str, batches: list[bytes]
) -> None:
    booker = Booker(pg)

    def work() -> list[str]:
        booker.reserve()
        with psycopg.connect(pg_store_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (booker.writer_pid(),))
        outcomes = []
        for _ in range(2):
            try:
                booker.reserve()
                outcomes.append("reserved")
            except Unavailable:  # the lost connection: 503 UNAVAILABLE, not a refusal of the booking
                outcomes.append("failed")
        return outcomes

    assert _kept(pg, work) == ["failed", "reserved"]
    assert len(batches) == 3  # each attempt read in one batch: the failure was the batch's
    with pg.read() as tx:
        assert tx.conn.execute(text("SELECT count(*) FROM reservations")).scalar_one() == 2


@pytest.mark.parametrize(
    ("level", "read_only"),
    [
        pytest.param(None, None, id="psycopg's defaults"),
        pytest.param(psycopg.IsolationLevel.READ_COMMITTED, None, id="read committed"),
        pytest.param(psycopg.IsolationLevel.SERIALIZABLE, True, id="serializable and read only"),
    ],
)
def test_a_batch_begins_the_transaction_psycopg_would(
    pg_store_url: str, level: psycopg.IsolationLevel | None, read_only: bool | None
) -> None:
    show = "SELECT current_setting('transaction_isolation'), current_setting('transaction_read_only')"
    with psycopg.connect(pg_store_url) as db:
        db.isolation_level, db.read_only = level, read_only
        psycopgs = db.execute(show).fetchone()
        db.rollback()
        result = db.pgconn.exec_(pg_simple.begin(db) + b"; " + show.encode())
        ours = (result.get_value(0, 0), result.get_value(0, 1))
        db.pgconn.exec_(b"ROLLBACK")
    assert psycopgs is not None
    assert tuple(v.decode() for v in ours if v is not None) == psycopgs


def test_a_workload_lock_after_admission_on_one_connection_is_one_round_trip(
    pg: Store, batches: list[bytes]
) -> None:
    """Admission's batch and a workload write's (lock and log read) prepare their own statements on a
    shared connection. Defect: one flag said "prepared" for the connection, so the second batch
    ran unprepared, failed, was rolled back and sent again (its lock waited for twice)."""
    booker = Booker(pg)

    def work() -> None:
        booker.reserve()
        with pg.begin() as tx:
            tx.reservations.locked_tail("workloads:acme", booker.index.prepare(tx))
        booker.reserve()

    _kept(pg, work)
    assert len(batches) == 3
    assert b"EXECUTE bc_plain_lock_" in batches[1]
