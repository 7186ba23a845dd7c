"""The MIG layout gate's repository reads its rows back as `MigLayoutGate` records, on both stores."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import insert

from better_compute.domain.gate.records import MigLayoutGate
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.kernel.tables import capacity_mig_layouts
from better_compute.storage.store import Store
from tests.builders import T0, at, fleet_spec


def test_all_rows_reads_every_column_by_node(store: Store) -> None:
    load_fleet(store, fleet_spec(nodes=2, layout="all-1g.10gb"), T0)
    granted = MigLayoutGate(
        node_id="n-2",
        pool_id="p1",
        frozen_layout="all-1g.10gb",
        pending_layout="all-3g.40gb",
        state="granted",
        requested_at=T0,
        scheduled_from=at(1),
        granted_at=at(2),
        granted_generation=4,
        version=3,
        lease_owner="replica-a",
        lease_until=at(2) + timedelta(seconds=30),
    )
    pending = MigLayoutGate(
        node_id="n-1",
        pool_id="p1",
        frozen_layout=None,
        pending_layout="all-7g.80gb",
        state="pending",
        requested_at=T0,
    )
    with store.engine.begin() as conn:
        for gate in (granted, pending):
            conn.execute(insert(capacity_mig_layouts).values({f: getattr(gate, f) for f in gate.__slots__}))
    with store.read() as tx:
        assert tx.mig_layouts.all_rows() == [pending, granted]


def test_a_woken_node_scheduled_for_later_is_leased_unless_another_lease_holds_it(store: Store) -> None:
    """A node scheduled for later is leased before its time only when it is woken (a booking on it
    ended early) or its last lease ran out before `recheck`; a live lease of another reconciler
    keeps it from the woken one all the same."""
    load_fleet(store, fleet_spec(nodes=2, layout="all-1g.10gb"), T0)
    later = {"pool_id": "p1", "frozen_layout": "all-1g.10gb", "pending_layout": "all-3g.40gb"}
    mine = MigLayoutGate(node_id="n-1", state="scheduled", requested_at=T0, scheduled_from=at(5), **later)
    theirs = MigLayoutGate(node_id="n-2", state="scheduled", requested_at=T0, scheduled_from=at(5), **later)
    now = T0 + timedelta(minutes=1)
    rows = [
        {**{f: getattr(mine, f) for f in mine.__slots__}, "lease_owner": "a", "lease_until": now},
        {
            **{f: getattr(theirs, f) for f in theirs.__slots__},
            "lease_owner": "b",
            "lease_until": now + timedelta(seconds=10),
        },
    ]
    with store.engine.begin() as conn:
        conn.execute(insert(capacity_mig_layouts), rows)
    until, recheck = now + timedelta(seconds=15), now - timedelta(seconds=60)
    with store.begin() as tx:
        assert tx.mig_layouts.lease("a", now, until, 10, recheck) == []
        assert tx.mig_layouts.lease("a", now, until, 10, recheck, ["n-1", "n-2", "n-9"]) == ["n-1"]
        assert tx.mig_layouts.leased_to("n-1", "a", now)
        assert tx.mig_layouts.lease("b", now, until, 10, recheck, ["n-2"]) == ["n-2"]
