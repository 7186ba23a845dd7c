"""The event tail's read is looked up by index however skewed the planner's statistics are.

Admission runs it thousands of times a second as a prepared statement with a generic plan. With the
part that asks about transactions written as a plain `id <= $last` filter, PostgreSQL chose to walk
the id index below `last`, that is every event ever written (35 ms at 200,000 events, growing with
the log). Counted by rows examined, not by time.

It runs on a database of its own: in the run's shared one, the events and indexes earlier tests left
behind (dead rows in `ix_events_tx`) move the planner's costs for the `open` part, whose estimate
under these statistics is every row, by more than the few per cent between its index scan and a
sequential scan, so the plan would depend on which tests ran before it.
"""

from __future__ import annotations

import psycopg
import pytest

from better_compute.storage.kernel import pg_simple
from better_compute.storage.ledger.reservations import _PG_TAIL_EVENTS, _PG_TAIL_STATE
from better_compute.storage.store import Store
from tests.conftest import own_database


def _examined(plan: dict[str, object]) -> int:
    """Rows every scan of the plan read, those its filters removed included."""
    own = 0
    if "Scan" in str(plan.get("Node Type", "")):
        own = int(plan.get("Actual Rows", 0)) + int(plan.get("Rows Removed by Filter", 0))  # type: ignore[call-overload]
    return own + sum(_examined(p) for p in plan.get("Plans", []))  # type: ignore[attr-defined]


@pytest.mark.postgres
@pytest.mark.parametrize("seqscan", ["on", "off"])
def test_event_tail_read_looks_events_up_by_index(postgres_url: str, seqscan: str) -> None:
    with own_database(postgres_url, "bc_tail") as url:
        _check_plan(url, seqscan)


def _check_plan(pg_store_url: str, seqscan: str) -> None:
    store = Store.open(pg_store_url)
    try:
        with store.engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM events")
            # One transaction writes them all: the statistics see a single `tx` for the whole log.
            conn.exec_driver_sql(
                "INSERT INTO events (type, subject, payload, at)"
                " SELECT 'ledger.booked', 'x', '{}', now() FROM generate_series(1, 20000)"
            )
            conn.exec_driver_sql("ANALYZE events")
            last = int(conn.exec_driver_sql("SELECT max(id) FROM events").scalar_one())
    finally:
        store.close()
    statement = pg_simple.Statement(
        "bc_test_tail",
        "SELECT " + _PG_TAIL_EVENTS + ", " + _PG_TAIL_STATE,
        {"last": "bigint", "limit": "bigint", "open": "bigint[]", "from": "bigint"},
    )
    with psycopg.connect(pg_store_url) as conn:
        conn.execute(f"SET plan_cache_mode = force_generic_plan; SET enable_seqscan = {seqscan}")
        conn.execute(statement.prepare())
        for _ in range(6):  # PostgreSQL settles on a generic plan after five executions
            conn.execute(f"EXECUTE {statement.name} ({last - 10}, 5000, '{{1,2,3}}', 2000000000)")
        (plan,) = conn.execute(
            f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {statement.name} ({last - 10}, 5000, '{{1,2,3}}', 2000000000)"
        ).fetchone()  # type: ignore[misc]
        conn.execute("DELETE FROM events")
        conn.commit()
    assert _examined(plan[0]["Plan"]) < 100
