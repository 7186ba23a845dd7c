"""An event loop's thread keeps its PostgreSQL connections; they stay correct, recover and go back."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TypeVar

import psycopg
import pytest
from sqlalchemy import text

from better_compute.domain.kernel.errors import Unavailable
from better_compute.storage.store import Store

pytestmark = pytest.mark.postgres
T = TypeVar("T")


@pytest.fixture
def pg(pg_store_url: str) -> Iterator[Store]:
    store = Store.open(pg_store_url, migrate_schema=False, pool_size=1)
    with store.begin() as tx:
        tx.conn.execute(text("DELETE FROM tenants WHERE id LIKE 'conn-%'"))
    try:
        yield store
    finally:
        store.close()


def _backend(store: Store, write: bool) -> int:
    with store.begin() if write else store.read() as tx:
        return int(tx.conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _on_loop(work: Callable[[], T]) -> T:
    async def run() -> T:
        return work()

    return asyncio.run(run())


def _add_tenant(store: Store, tenant_id: str) -> None:
    with store.begin() as tx:
        tx.conn.execute(
            text("INSERT INTO tenants (id, name, created_at) VALUES (:id, :name, :at)"),
            {"id": tenant_id, "name": tenant_id, "at": datetime.now(UTC)},
        )


def _tenants(store: Store) -> set[str]:
    with store.read() as tx:
        return {r[0] for r in tx.conn.execute(text("SELECT id FROM tenants WHERE id LIKE 'conn-%'"))}


def test_a_loop_thread_reuses_one_connection_for_writes_and_one_for_reads(pg: Store) -> None:
    writes = _on_loop(lambda: {_backend(pg, True) for _ in range(5)})
    reads = _on_loop(lambda: {_backend(pg, False) for _ in range(5)})
    assert len(writes) == 1 and len(reads) == 1
    assert writes != reads


def test_connections_go_back_to_the_pool_when_the_loop_thread_ends(pg: Store) -> None:
    # pool_size=1 allows three connections: a leak would exhaust it by the second thread, so two
    # threads show it (each gc.collect() takes seconds late in a worker of the whole suite).
    for n in range(2):
        thread = threading.Thread(target=_on_loop, args=(lambda: (_backend(pg, True), _backend(pg, False)),))
        thread.start()
        thread.join(timeout=30)
        assert not thread.is_alive(), f"thread {n} waited for a connection"
        gc.collect()
        assert pg.engine.pool.checkedout() == 0  # type: ignore[attr-defined]


def test_a_nested_unit_of_work_is_its_own_transaction(pg: Store) -> None:
    def work() -> None:
        with pytest.raises(RuntimeError), pg.begin() as outer:
            outer.conn.execute(
                text("INSERT INTO tenants (id, name, created_at) VALUES ('conn-outer', 'o', :at)"),
                {"at": datetime.now(UTC)},
            )
            _add_tenant(pg, "conn-inner")  # commits by itself
            assert "conn-outer" not in _tenants(pg)  # the outer write is not visible outside it
            raise RuntimeError("the outer unit of work fails")

    _on_loop(work)
    assert _tenants(pg) == {"conn-inner"}


def test_a_lost_connection_fails_one_unit_of_work_and_the_next_reconnects(
    pg: Store, pg_store_url: str
) -> None:
    def work() -> list[str]:
        _add_tenant(pg, "conn-before")
        assert _tenants(pg) == {"conn-before"}
        pids = [_backend(pg, True), _backend(pg, False)]
        with psycopg.connect(pg_store_url, autocommit=True) as admin:
            for pid in pids:
                admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))  # waits for it to end
        outcomes = []
        for attempt in range(2):
            try:
                _add_tenant(pg, f"conn-after-{attempt}")
                outcomes.append("write ok")
            except Unavailable:
                outcomes.append("write failed")
            try:
                _tenants(pg)
                outcomes.append("read ok")
            except Unavailable:
                outcomes.append("read failed")
        return outcomes

    outcomes = _on_loop(work)
    # The first failure starts an outage: the thread's read connection, made before it, is made anew
    # before it is used, rather than failing a unit of work of its own.
    assert outcomes == ["write failed", "read ok", "write ok", "read ok"]
    assert "conn-after-1" in _tenants(pg)


def test_a_thread_told_to_keep_its_connections_reuses_them(pg: Store) -> None:
    held: list[int] = []

    def work() -> None:
        pg.keep_connections()
        assert len({_backend(pg, True) for _ in range(5)}) == 1
        held.append(pg.engine.pool.checkedout())  # type: ignore[attr-defined]

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=30)
    assert held == [1]  # kept between units of work, not checked back in
    gc.collect()
    assert pg.engine.pool.checkedout() == 0  # type: ignore[attr-defined]


def test_a_failed_unit_of_work_rolls_back_and_keeps_prepared_statements(pg: Store) -> None:
    def prepared(prepare_one: bool) -> int:
        with pg.begin() as tx:
            db = tx.conn.connection.driver_connection
            assert db is not None
            if prepare_one:
                db.execute("SELECT 1 FROM tenants WHERE id = %s", ("x",), prepare=True)
            count = db.execute("SELECT count(*) FROM pg_prepared_statements", prepare=False).fetchone()
            return int(count[0])

    def work() -> tuple[int, int]:
        before = prepared(True)
        with pytest.raises(RuntimeError), pg.begin() as tx:
            tx.conn.execute(
                text("INSERT INTO tenants (id, name, created_at) VALUES ('conn-failed', 'f', :at)"),
                {"at": datetime.now(UTC)},
            )
            raise RuntimeError("refused")
        return before, prepared(False)

    before, after = _on_loop(work)
    assert before >= 1 and after >= before
    assert "conn-failed" not in _tenants(pg)
