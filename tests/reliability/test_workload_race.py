"""Workloads of two projects created, scaled and deleted at once never take more than the fleet and
the quotas allow (each project's quota is counted under its workload lock; an atom two projects
choose at once is settled by the ledger's exclusion constraint).

Eight real processes (four a project, each with its own store, booking index and stock, as server
processes have) race on a nearly full fleet: 3 clusters x 2 nodes x 8 H100s, one pool a cluster
offered to both projects. acme has a cluster row of the device class in every cluster (those decide
there); globex has a fleet row only (it decides everywhere). Together they could ask for more than
the fleet has. The checks are made by SQL, on the ledger and the workload tables themselves.
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
from better_compute.service.placement import class_quotas
from better_compute.storage.store import Store
from tests.processes import race_context
from tests.reliability.workload_race_worker import ADMIN, DEVICE_CLASS, run

pytestmark = pytest.mark.postgres

SCALE = int(os.environ.get("BC_RACE_SCALE", "1"))
"""Raise for a soak: `BC_RACE_SCALE=8` makes 320 writes a client."""
CLIENTS = 8
ROUNDS = 40 * SCALE
CLUSTERS = ("c1", "c2", "c3")
GPUS_PER_CLUSTER = 16
ACME_PER_CLUSTER = 10
GLOBEX_FLEET = 24

LIVE = "b.state = 'live' AND (b.ends_at IS NULL OR b.ends_at > :now)"

OVERLAPS_SQL = (
    "SELECT count(*) FROM bookings a JOIN bookings b ON a.atom_id = b.atom_id AND a.id < b.id"
    " WHERE a.state = 'live' AND b.state = 'live'"
    " AND tstzrange(a.starts_at, a.ends_at) && tstzrange(b.starts_at, b.ends_at)"
)
"""Two live bookings of one atom whose windows overlap (what the exclusion constraint forbids)."""

HELD_SQL = (
    "SELECT b.tenant_id, p.cluster_id, count(DISTINCT b.atom_id) FROM bookings b"
    " JOIN pools p ON p.id = b.pool_id"
    f" WHERE {LIVE} AND b.tenant_id IS NOT NULL GROUP BY b.tenant_id, p.cluster_id"
)
"""Devices each project holds now per cluster, from the ledger."""

REPLICA_BOOKINGS_SQL = (
    "SELECT d.id, d.cluster_id, d.tenant_id, d.workload_id, r.allocation_id,"
    f" (SELECT count(*) FROM bookings b WHERE b.allocation_id = r.allocation_id AND {LIVE}),"
    f" (SELECT count(*) FROM bookings b JOIN pools p ON p.id = b.pool_id"
    f"   WHERE b.allocation_id = r.allocation_id AND {LIVE} AND p.cluster_id <> d.cluster_id)"
    " FROM replicas r JOIN deployments d ON d.id = r.deployment_id"
)
"""Each replica row: its deployment, and its allocation's live bookings (and those outside the
deployment's cluster)."""

ORPHANS_SQL = (
    f"SELECT count(*) FROM bookings b WHERE {LIVE} AND b.tenant_id IS NOT NULL"
    " AND NOT EXISTS (SELECT 1 FROM replicas r WHERE r.allocation_id = b.allocation_id)"
)
"""Live tenant bookings that no replica row accounts for."""


def _fleet(now: datetime) -> dict[str, object]:
    return {
        "tenants": [{"id": "platform"}, {"id": "acme"}, {"id": "globex"}],
        "deviceClasses": [
            {
                "name": DEVICE_CLASS,
                "class": "gpu",
                "selector": {"matchExpressions": [{"key": "gpuModel", "op": "In", "values": ["H100-80GB"]}]},
            }
        ],
        "clusters": [
            {
                "name": c,
                "region": f"r-{c}",
                "nodes": [{"name": f"{c}-n", "replicas": 2, "gpus": {"model": "H100-80GB", "count": 8}}],
            }
            for c in CLUSTERS
        ],
        "pools": [
            {
                "name": f"p-{c}",
                "cluster": c,
                "mode": "exclusive",
                "owner": "platform",
                "nodes": [f"{c}-n-1", f"{c}-n-2"],
            }
            for c in CLUSTERS
        ],
    }


def _prepare(store: Store, now: datetime) -> None:
    load_fleet(store, parse_fleet(_fleet(now)), now)
    for c in CLUSTERS:
        for project in ("acme", "globex"):
            pools.offer(store, ADMIN, f"p-{c}", project, {"gpu": GPUS_PER_CLUSTER}, now)
        class_quotas.set_class_quota(
            store,
            ADMIN,
            tenant_id="acme",
            device_class=DEVICE_CLASS,
            scope="cluster",
            cluster_id=c,
            guaranteed_devices=ACME_PER_CLUSTER,
            now=now,
        )
    class_quotas.set_class_quota(
        store,
        ADMIN,
        tenant_id="globex",
        device_class=DEVICE_CLASS,
        scope="fleet",
        cluster_id=None,
        guaranteed_devices=GLOBEX_FLEET,
        now=now,
    )


def test_racing_workload_writes_stay_within_the_fleet_and_the_quotas(pg_store: Store) -> None:
    store = pg_store
    _prepare(store, datetime.now(UTC))
    url = store.engine.url.render_as_string(hide_password=False)
    ctx = race_context()
    with ctx.Pool(CLIENTS) as workers:
        clients = [
            workers.apply_async(run, (url, w, ("acme", "globex")[w % 2], ROUNDS, 7)) for w in range(CLIENTS)
        ]
        outcomes: Counter[str] = sum((c.get(timeout=120 * SCALE) for c in clients), Counter())

    now = datetime.now(UTC)
    with store.engine.connect() as conn:
        overlaps = conn.execute(text(OVERLAPS_SQL)).scalar_one()
        held = {(t, c): n for t, c, n in conn.execute(text(HELD_SQL), {"now": now}).all()}
        replicas = conn.execute(text(REPLICA_BOOKINGS_SQL), {"now": now}).all()
        orphans = conn.execute(text(ORPHANS_SQL), {"now": now}).scalar_one()
    with store.read() as tx:
        counts = {}
        for w in {r[3] for r in replicas}:
            found = tx.workloads.get(w)
            assert found is not None, w
            counts[w] = found.spec.device_count

    # The race was run: workloads were placed, scaled and deleted, and the fleet or a quota ran out.
    assert outcomes["created"] > 0 and outcomes["scaled"] > 0 and outcomes["deleted"] > 0, outcomes
    assert outcomes["short"] > 0, outcomes
    assert set(outcomes) <= {"created", "placed", "short", "scaled", "deleted"}, outcomes

    assert overlaps == 0
    by_cluster: Counter[str] = Counter()
    for (_, cluster), n in held.items():
        by_cluster[cluster] += n
    assert all(n <= GPUS_PER_CLUSTER for n in by_cluster.values()), by_cluster
    assert sum(by_cluster.values()) > 0.5 * GPUS_PER_CLUSTER * len(CLUSTERS), held  # nearly full
    for c in CLUSTERS:
        assert held.get(("acme", c), 0) <= ACME_PER_CLUSTER, held
    assert sum(n for (t, _), n in held.items() if t == "globex") <= GLOBEX_FLEET, held

    # Every replica row holds its workload's devices, in its deployment's cluster, and nothing else
    # is held: the replica rows add up to the ledger.
    wrong = [r for r in replicas if r[5] != counts[r[3]] or r[6] != 0]
    assert wrong == [], wrong[:5]
    assert orphans == 0
    devices: Counter[tuple[str, str]] = Counter()
    for r in replicas:
        devices[(r[2], r[1])] += counts[r[3]]
    assert dict(devices) == held
    replica_devices: Counter[str] = Counter()
    for (_, cluster), n in devices.items():
        replica_devices[cluster] += n
    assert all(n <= GPUS_PER_CLUSTER for n in replica_devices.values()), replica_devices
