"""Endpoints taking nodes while tenants book their instances, in racing processes on PostgreSQL: no
node is ever taken by two endpoints, and no tenant's booking is live on a node from the moment an
endpoint took it; every request ends taken, failed or refused with a code.

Each creator takes one endpoint (of one node) and each booker holds one booking at a time, so at most
CREATORS + BOOKERS nodes are busy at any instant, fewer than NODES: both sides always find room, and
the test proves the race whichever process starts first."""

from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import text

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.endpoints import endpoints
from better_compute.storage.store import Store
from tests.builders import T0, small_fleet
from tests.processes import race_context
from tests.reliability.endpoint_race_worker import OWNER, book, create, retry

NODES = 6
CREATORS = 3
BOOKERS = 2

OVERLAP_SQL = (
    "SELECT count(*) FROM endpoint_instances i JOIN atoms a ON a.node_id = i.node_id"
    " JOIN bookings b ON b.atom_id = a.id"
    " WHERE b.state = 'live' AND b.tenant_id IS NOT NULL AND (b.ends_at IS NULL OR b.ends_at > :now)"
)
"""Tenants' live bookings reaching past the race's instant on nodes an endpoint took (at that instant)."""


@pytest.mark.postgres
def test_endpoints_and_bookings_racing_never_share_a_node(pg_store: Store) -> None:
    store = pg_store
    fleet = small_fleet(nodes=NODES, layout="all-1g.10gb")
    fleet["pools"][0]["ownerQuota"] = {"gpu.mig": 10_000}  # type: ignore[index]
    load_fleet(store, parse_fleet(fleet), T0)
    with store.engine.begin() as conn:  # every node runs a daemon (joined), so each is a candidate
        conn.execute(text("UPDATE nodes SET public_key = 'race'"))
    url = store.engine.url.render_as_string(hide_password=False)
    ctx = race_context()
    with ctx.Pool(CREATORS + BOOKERS) as workers:
        bookers = [workers.apply_async(book, (url, w, 60)) for w in range(BOOKERS)]
        creators = [workers.apply_async(create, (url, w, 4)) for w in range(CREATORS)]
        made: Counter[str] = sum((c.get(timeout=240) for c in creators), Counter())
        booked: Counter[str] = sum((b.get(timeout=240) for b in bookers), Counter())
    with store.engine.connect() as conn:
        overlaps = conn.execute(text(OVERLAP_SQL), {"now": T0}).scalar_one()
        taken = conn.execute(text("SELECT count(*), count(DISTINCT node_id) FROM endpoint_instances")).one()
        creating = conn.execute(text("SELECT count(*) FROM endpoints WHERE status = 'Creating'")).scalar_one()
    assert CREATORS + BOOKERS < NODES
    assert 0 < made["Creating"] <= CREATORS and booked["booked"] > 0, (made, booked)
    assert set(made) <= {"Creating", "Failed", "refused:CONFLICT"}, made
    assert set(booked) <= {"booked", "released", "refused:INSUFFICIENT_CAPACITY", "refused:CONFLICT"}, booked
    assert taken[0] == taken[1] == creating == made["Creating"] <= NODES
    assert overlaps == 0


RETRIERS = 3
FAILED = 4
RETRY_NODES = 7
"""Odd, so the retriers' endpoints of two nodes (FAILED * 2 > RETRY_NODES) always leave one node to
the bookers, and the bookers (one node each at a time) always leave room for two endpoints: both sides
find room whichever process starts first."""


@pytest.mark.postgres
def test_failed_endpoints_retried_by_racing_processes_while_tenants_book_never_share_a_node(
    pg_store: Store,
) -> None:
    """`Failed` endpoints of two instances each (more than the pool holds) taken again by racing
    retriers, as several server processes do, while tenants book: each endpoint takes all its
    nodes or none, no node twice, and no tenant's booking is live on a node an endpoint took."""
    store = pg_store
    fleet = small_fleet(nodes=RETRY_NODES, layout="all-1g.10gb")
    fleet["pools"][0]["ownerQuota"] = {"gpu.mig": 10_000}  # type: ignore[index]
    load_fleet(store, parse_fleet(fleet), T0)
    with store.engine.begin() as conn:  # joined, but cordoned: every endpoint is Failed at first
        conn.execute(text("UPDATE nodes SET public_key = 'race', cordoned = true"))
    for n in range(FAILED):
        raw = {
            "name": f"wait-{n}",
            "tenantId": "platform",
            "variants": [
                {
                    "name": "AllTraffic",
                    "poolId": "p1",
                    "instanceCount": 2,
                    "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": ["mig-7g.80gb"]}],
                }
            ],
        }
        assert endpoints.create(store, OWNER, raw, T0).status == "Failed"
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE nodes SET cordoned = false"))
    url = store.engine.url.render_as_string(hide_password=False)
    ctx = race_context()
    with ctx.Pool(RETRIERS + BOOKERS) as workers:
        bookers = [workers.apply_async(book, (url, w, 40)) for w in range(BOOKERS)]
        retriers = [workers.apply_async(retry, (url, 20)) for _ in range(RETRIERS)]
        took = sum(r.get(timeout=240) for r in retriers)
        booked: Counter[str] = sum((b.get(timeout=240) for b in bookers), Counter())
    with store.engine.connect() as conn:
        overlaps = conn.execute(text(OVERLAP_SQL), {"now": T0}).scalar_one()
        per_endpoint = dict(
            conn.execute(text("SELECT endpoint, count(*) FROM endpoint_instances GROUP BY endpoint")).all()
        )
        statuses = dict(conn.execute(text("SELECT name, status FROM endpoints")).all())
    assert FAILED * 2 > RETRY_NODES and RETRY_NODES % 2 == 1 and RETRY_NODES - BOOKERS >= 2 * 2
    assert 0 < took == len(per_endpoint) <= RETRY_NODES // 2, (took, per_endpoint)
    assert set(per_endpoint.values()) == {2}  # all its nodes or none
    assert {n for n, s in statuses.items() if s == "Creating"} == set(per_endpoint)
    assert {s for n, s in statuses.items() if n not in per_endpoint} <= {"Failed"}
    assert booked["booked"] > 0, booked
    assert overlaps == 0
