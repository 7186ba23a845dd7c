"""Placers racing nodes that restart whole, as real processes on PostgreSQL, with no forged report:
placers reserve whole GPUs and MIG instances for later windows while every node restarts again and
again at a layout other than its pool's (its GPUs whole) and then converges its spec. Checked by SQL
after the run: no GPU held whole and in parts at once, no two bookings of one atom at once, and no
booking left on an atom its node no longer has (a restart's instances are put back under their
bookings). Which placer wins which atom is up to the scheduler, so it is not asserted."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from sqlalchemy import text

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.records import Quota
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from tests.builders import small_fleet
from tests.processes import race_context
from tests.reliability import layout_restart_worker as worker

pytestmark = pytest.mark.postgres

NODES = 3
GPUS = 2
ROUNDS = 12
ATTEMPTS = 40

FAMILY_OVERLAPS = """
SELECT count(*) FROM bookings a JOIN bookings b
  ON b.gpu_id = a.gpu_id AND b.class > a.class AND b.allocation_id <> a.allocation_id
 WHERE a.state = 'live' AND b.state = 'live' AND a.tenant_id IS NOT NULL AND b.tenant_id IS NOT NULL
   AND tstzrange(a.starts_at, a.ends_at, '[)') && tstzrange(b.starts_at, b.ends_at, '[)')
"""
"""A GPU held whole (`gpu`) by one booking and in parts (`gpu.mig`) by another at the same time."""

OVERLAPS = """
SELECT count(*) FROM bookings a JOIN bookings b ON b.atom_id = a.atom_id AND b.id > a.id
 WHERE a.state = 'live' AND b.state = 'live'
   AND tstzrange(a.starts_at, a.ends_at, '[)') && tstzrange(b.starts_at, b.ends_at, '[)')
"""

STRANDED = """
SELECT count(*) FROM bookings b JOIN atoms a ON a.id = b.atom_id
 WHERE b.state = 'live' AND b.tenant_id IS NOT NULL AND (b.ends_at IS NULL OR b.ends_at > now())
   AND (NOT a.present OR NOT a.bookable OR a.pool_id IS DISTINCT FROM b.pool_id)
"""


def test_placers_racing_nodes_restarting_whole_never_hold_a_gpu_whole_and_in_parts(pg_store: Store) -> None:
    load_fleet(pg_store, parse_fleet(small_fleet(nodes=NODES, gpus=GPUS)), worker.now())  # type: ignore[arg-type]
    with pg_store.begin() as tx:
        tx.quotas.put([Quota("platform", "p1", cls, 10_000, worker.now()) for cls in ("gpu", "gpu.mig")])
    url = pg_store.engine.url.render_as_string(hide_password=False)
    base = time.time()
    nodes = [f"n-{i + 1}" for i in range(NODES)]
    ctx = race_context()
    with ctx.Pool(5) as workers:
        restarting = workers.apply_async(worker.restarter, (url, nodes, GPUS, ROUNDS))
        placing = [
            workers.apply_async(worker.placer, (url, n, cls, ATTEMPTS, base))
            for n, cls in enumerate(("gpu", "gpu", "gpu.mig", "gpu.mig"))
        ]
        outcomes = [p.get(timeout=600) for p in placing]
        assert restarting.get(timeout=600) == ROUNDS
    with pg_store.engine.connect() as conn:
        counts = {
            "family_overlaps": conn.execute(text(FAMILY_OVERLAPS)).scalar_one(),
            "overlaps": conn.execute(text(OVERLAPS)).scalar_one(),
            "stranded": conn.execute(text(STRANDED)).scalar_one(),
        }
    booked: Counter[str] = sum((Counter({k: v}) for o in outcomes for k, v in o.items()), Counter())
    assert counts == {"family_overlaps": 0, "overlaps": 0, "stranded": 0}, (counts, booked)
    assert outcomes[2]["booked"] + outcomes[3]["booked"] > 0, outcomes  # the instances did take work
    unknown = [k for o in outcomes for k in o if k != "booked" and not k.startswith("refused:")]
    assert unknown == []
