"""Preemption under a race (docs/scheduling.md#preemption-by-priority), on PostgreSQL with real processes:
three projects place high-priority work that evicts preemptible work while preemptible work of all three keeps
coming back and the retrier places again what waits. Two projects evicting each other's work at once take
each other's workload lock without waiting (`try_lock`), so nothing deadlocks; the ledger's
exclusion constraint is the last fence. The checks are made by SQL.
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import pools
from better_compute.service.placement import priority_classes
from better_compute.storage.store import Store
from tests.processes import race_context
from tests.reliability.preemption_race_worker import ADMIN, DEVICE_CLASS, run
from tests.reliability.test_workload_race import ORPHANS_SQL, OVERLAPS_SQL, REPLICA_BOOKINGS_SQL

pytestmark = pytest.mark.postgres

SCALE = int(os.environ.get("BC_RACE_SCALE", "1"))
ROUNDS = 30 * SCALE
PROJECTS = ("acme", "globex", "initech")
CLIENTS = 6
GPUS = 16

PREEMPTED_SQL = "SELECT e.subject, e.payload FROM events e WHERE e.type = 'workload.preempted'"


def _prepare(store: Store, now: datetime) -> None:
    fleet = {
        "tenants": [{"id": "platform"}, *({"id": p} for p in PROJECTS)],
        "deviceClasses": [
            {
                "name": DEVICE_CLASS,
                "class": "gpu",
                "selector": {"matchExpressions": [{"key": "gpuModel", "op": "In", "values": ["H100-80GB"]}]},
            }
        ],
        "clusters": [
            {
                "name": "c1",
                "region": "r1",
                "nodes": [{"name": "n", "replicas": 2, "gpus": {"model": "H100-80GB", "count": 8}}],
            }
        ],
        "pools": [
            {"name": "p", "cluster": "c1", "mode": "exclusive", "owner": "platform", "nodes": ["n-1", "n-2"]}
        ],
    }
    load_fleet(store, parse_fleet(fleet), now)
    for project in PROJECTS:
        pools.offer(store, ADMIN, "p", project, {"gpu": GPUS}, now)
    priority_classes.create(store, ADMIN, "batch", 1, True, now)
    priority_classes.create(store, ADMIN, "prod", 100, False, now)


def test_racing_preemptions_never_double_book_never_deadlock_and_never_evict_protected_work(
    pg_store: Store,
) -> None:
    store = pg_store
    _prepare(store, datetime.now(UTC))
    url = store.engine.url.render_as_string(hide_password=False)
    ctx = race_context()
    with ctx.Pool(CLIENTS) as workers:
        clients = [
            workers.apply_async(
                run,
                (
                    url,
                    w,
                    PROJECTS[w % len(PROJECTS)],
                    ("batch", "batch", "prod") if w % 2 else ("batch",),
                    ROUNDS,
                    11,
                ),
            )
            for w in range(CLIENTS)
        ]
        outcomes: Counter[str] = sum((c.get(timeout=180 * SCALE) for c in clients), Counter())

    now = datetime.now(UTC)
    with store.engine.connect() as conn:
        overlaps = conn.execute(text(OVERLAPS_SQL)).scalar_one()
        replicas = conn.execute(text(REPLICA_BOOKINGS_SQL), {"now": now}).all()
        orphans = conn.execute(text(ORPHANS_SQL), {"now": now}).scalar_one()
        preempted = conn.execute(text(PREEMPTED_SQL)).all()
    with store.read() as tx:
        counts = {}
        for w in {r[3] for r in replicas}:
            found = tx.workloads.get(w)
            assert found is not None, w
            counts[w] = found.spec.device_count
        victims = {}
        for subject, _ in preempted:
            found = tx.workloads.get(subject)
            if found is not None:
                victims[subject] = found.spec.priority_class

    # the race was run, and evictions happened in it
    assert outcomes["created"] > 0 and outcomes["preempted"] > 0, outcomes
    assert preempted, outcomes
    # refusals are answers a client may get, never a server fault
    assert {k for k in outcomes if k.startswith("refused:")} <= {"refused:CONFLICT"}, outcomes

    assert overlaps == 0
    wrong = [r for r in replicas if r[5] != counts[r[3]] or r[6] != 0]
    assert wrong == [], wrong[:5]
    assert orphans == 0
    assert sum(counts[r[3]] for r in replicas) <= GPUS
    # only preemptible work was ever evicted
    assert set(victims.values()) <= {"batch"}, victims
    for _, payload in preempted:
        assert payload["why"] in ("priority", "floor", "fair_share"), payload
