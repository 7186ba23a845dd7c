"""The MIG torture test (`tests/torture/torture.py` says what runs and what is checked). `make test`
runs it bounded; `make torture` runs it long (TORTURE_ATTEMPTS per placer, TORTURE_CHANGES layout
changes at least, the placers stopping after TORTURE_SECONDS if that is set and comes first),
printing the counts, the time taken and any violation."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import text

from better_compute.domain.tenancy.records import Quota
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from tests.processes import race_context
from tests.torture import torture

pytestmark = pytest.mark.postgres

PLACERS = 3
NODES = 4


def _int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def test_placers_racing_layout_changes_never_break_the_atom_rule(pg_store: Store, tmp_path: Path) -> None:
    attempts = _int("TORTURE_ATTEMPTS", 150)
    changes = _int("TORTURE_CHANGES", 12)
    pause = float(os.environ.get("TORTURE_CHANGE_PAUSE", "0.4"))
    load_fleet(pg_store, torture.fleet(NODES), torture.now())
    with pg_store.begin() as tx:
        tx.quotas.put([Quota(t, "p1", "gpu.mig", 1_000_000, torture.now()) for t in torture.TENANTS])
    stop, placed = tmp_path / "stop", tmp_path / "placed"
    url = pg_store.engine.url.render_as_string(hide_password=False)
    started = time.monotonic()
    ctx = race_context()
    with ctx.Pool(PLACERS + 3) as workers:
        nodes = workers.apply_async(torture.node_process, (url, NODES, str(stop)))
        gate = workers.apply_async(torture.reconciler, (url, str(stop)))
        changing = workers.apply_async(torture.changer, (url, changes, pause, str(placed)))
        seconds = float(s) if (s := os.environ.get("TORTURE_SECONDS")) else None
        placing = [
            workers.apply_async(torture.placer, (url, w, attempts, w, seconds)) for w in range(PLACERS)
        ]
        outcomes: Counter[str] = sum((p.get(timeout=14400) for p in placing), Counter())
        placed.touch()  # the changer stops once it has made its changes
        made = changing.get(timeout=14400)
        stop.touch()  # the gate and the nodes go on a little longer, so the last change goes through
        record = nodes.get(timeout=600)
        passes = gate.get(timeout=600)
    elapsed = time.monotonic() - started
    found = torture.violations(pg_store, record, outcomes.elements())
    with pg_store.engine.connect() as conn:
        applied = conn.execute(
            text("SELECT count(*) FROM events WHERE type = 'node.mig.applied'")
        ).scalar_one()
    summary = {
        "attempts": sum(v for k, v in outcomes.items() if not k.startswith("release-")),
        "outcomes": dict(outcomes),
        "layout_changes": made,
        "nodes_applied": applied,
        "destroyed_instances": len(record.destroyed),
        "gate_passes": passes,
        "node_passes": record.passes,
        "seconds": round(elapsed, 1),
        "violations": len(found),
    }
    print(json.dumps(summary))
    assert found == [], found[:20]
    assert outcomes["booked"] > 0 and made > 0 and applied > 0, summary
