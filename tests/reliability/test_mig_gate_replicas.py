"""Reconciler replicas on PostgreSQL, as real processes: three work over the gated nodes, each step of a
node is taken exactly once (by one of them), and the nodes a killed replica held are taken over once
its leases run out, not before. How the work happens to be split is up to the scheduler, so it is
not asserted."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import pools
from better_compute.service.gate import node_spec
from better_compute.storage.store import Store
from tests.builders import T0, small_fleet
from tests.processes import race_context
from tests.reliability import mig_gate_worker

pytestmark = pytest.mark.postgres

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="gate-admin")
NODES = 12
LEASE_S = 3.0


def _converge_granted(store: Store) -> None:
    """Play the nodes' daemons: a granted node reads its spec and reports it observed."""
    with store.read() as tx:
        granted = [g.node_id for g in tx.mig_layouts.all_rows() if g.state == "granted"]
    for node in granted:
        served = node_spec.read(store, node, datetime.now(UTC))
        with store.begin() as tx:
            tx.nodes.mark_observed(node, served.generation, datetime.now(UTC))


def test_replicas_share_the_nodes_and_take_over_a_dead_ones_leases(pg_store: Store) -> None:
    load_fleet(pg_store, parse_fleet(small_fleet(nodes=NODES)), T0)
    pools.update(pg_store, ADMIN, "p1", policy={"migLayout": "all-2g.20gb"}, now=datetime.now(UTC))
    url = pg_store.engine.url.render_as_string(hide_password=False)
    ctx = race_context()
    ours, theirs = ctx.Pipe()
    dying = ctx.Process(target=mig_gate_worker.hoarder, args=(url, LEASE_S, theirs))
    dying.start()
    held, lease_until = ours.recv()
    assert sorted(held) == sorted(f"n-{i + 1}" for i in range(NODES))
    dying.kill()
    dying.join(30)
    with ctx.Pool(3) as workers:
        replicas = [
            workers.apply_async(mig_gate_worker.replica, (url, f"r{i}", LEASE_S, 120)) for i in range(3)
        ]
        deadline = time.monotonic() + 150
        while not all(r.ready() for r in replicas) and time.monotonic() < deadline:
            _converge_granted(pg_store)
            time.sleep(0.05)
        steps = [s for r in replicas for s in r.get(timeout=30)]
    with pg_store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM capacity_mig_layouts")).scalar_one() == 0
    per_node = Counter((node, step) for node, step, _, _ in steps)
    assert set(per_node.values()) == {1}, per_node  # each step of each node taken once, by one replica
    assert {step for _, step in per_node} == {"Schedule", "Grant", "Apply"}
    assert {node for node, _ in per_node} == set(held)
    assert min(at for _, _, _, at in steps) >= lease_until  # the dead replica's nodes waited for its leases
