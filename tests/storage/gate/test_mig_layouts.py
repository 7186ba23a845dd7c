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
