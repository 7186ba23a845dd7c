"""`better-compute reconcile` as real processes on PostgreSQL: one leases every gated node and is
SIGKILLed holding them; two others take the nodes over once those leases run out, never before, and
each step of each node is taken exactly once (one `node.mig.*` event of each kind per node)."""

from __future__ import annotations

import signal
import subprocess
import sys
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

pytestmark = pytest.mark.postgres

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="gate-admin")
NODES = 8
LEASE_S = 4


def reconcile(url: str) -> subprocess.Popen[bytes]:
    args = ["reconcile", "--database-url", url, "--lease-seconds", str(LEASE_S), "--interval", "0.1"]
    return subprocess.Popen(
        [sys.executable, "-m", "better_compute.entrypoints.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def rows(store: Store) -> list[tuple[str, str, str | None, datetime | None]]:
    with store.engine.connect() as conn:
        found = conn.execute(
            text("SELECT node_id, state, lease_owner, lease_until FROM capacity_mig_layouts")
        )
        return [(r[0], r[1], r[2], r[3]) for r in found]


def until(probe: object, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if probe():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {seconds:.0f} s: {what}")


def test_reconcile_processes_take_over_a_killed_ones_nodes_after_its_leases(pg_store: Store) -> None:
    load_fleet(pg_store, parse_fleet(small_fleet(nodes=NODES)), T0)
    pools.update(pg_store, ADMIN, "p1", policy={"migLayout": "all-2g.20gb"}, now=datetime.now(UTC))
    url = pg_store.engine.url.render_as_string(hide_password=False)
    first = reconcile(url)
    try:
        # It schedules and grants every (idle) node, then waits for them to converge, holding them.
        until(lambda: {s for _, s, _, _ in rows(pg_store)} == {"granted"}, 60, "every node granted")
        until(lambda: len({o for _, _, o, _ in rows(pg_store)}) == 1, 30, "one owner for every node")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    expires = max(u for _, _, _, u in rows(pg_store) if u is not None)
    others = [reconcile(url) for _ in range(2)]
    try:
        for node, _, _, _ in rows(pg_store):  # the nodes converge: only a live reconciler may apply
            served = node_spec.read(pg_store, node, datetime.now(UTC))
            with pg_store.begin() as tx:
                tx.nodes.mark_observed(node, served.generation, datetime.now(UTC))
        until(lambda: rows(pg_store) == [], 90, "every change applied")
    finally:
        for proc in others:
            proc.send_signal(signal.SIGTERM)
        for proc in others:
            proc.wait(30)
    with pg_store.engine.connect() as conn:
        events = conn.execute(text("SELECT type, subject, at FROM events WHERE type LIKE 'node.mig.%'")).all()
    kinds = Counter((t, s) for t, s, _ in events)
    assert set(kinds.values()) == {1}, kinds
    assert {t for t, _ in kinds} == {"node.mig.scheduled", "node.mig.granted", "node.mig.applied"}
    applied = [at for t, _, at in events if t == "node.mig.applied"]
    assert len(applied) == NODES
    assert min(applied) >= expires  # the killed process's nodes waited for its leases to run out
    assert all(p.returncode == 0 for p in others)
