"""The stock's catalog (clusters, pool seats, cordoned nodes) is read again whenever an event that
may change it reaches the booking index: a cluster's phase, a node's cordon, a pool added by a
fleet file. Placement decides on it, so a stale copy would place into a cordoned cluster."""

from __future__ import annotations

from datetime import UTC, datetime

from better_compute.domain.credentials import Principal
from better_compute.domain.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service import clusters
from better_compute.service.booking_index import BookingIndex
from better_compute.service.placement_stock import Catalog, Stock
from better_compute.storage.store import Store

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="test-admin")
NOW = datetime(2026, 12, 1, 9, tzinfo=UTC)


def fleet(pools: int) -> dict[str, object]:
    return {
        "tenants": [{"id": "platform"}],
        "clusters": [
            {
                "name": "c1",
                "region": "r1",
                "nodes": [{"name": "n", "replicas": 2, "gpus": {"model": "H100-80GB", "count": 8}}],
            }
        ],
        "pools": [
            {"name": f"p{i}", "cluster": "c1", "mode": "exclusive", "owner": "platform", "nodes": [f"n-{i}"]}
            for i in range(1, pools + 1)
        ],
    }


def read(store: Store, index: BookingIndex, stock: Stock) -> Catalog:
    with store.read() as tx:
        index.sync(tx)
        return stock.catalog(tx, index)


def test_the_catalog_follows_phases_cordons_and_new_pools(store: Store) -> None:
    load_fleet(store, parse_fleet(fleet(1)), NOW)
    index, stock = BookingIndex(), Stock()
    first = read(store, index, stock)
    assert (first.clusters["c1"].phase, [s[0] for s in first.seats], first.cordoned) == (
        "active",
        ["p1"],
        set(),
    )
    assert read(store, index, stock) is first  # nothing changed: the same read serves

    clusters.update(store, ADMIN, "c1", "cordoned", NOW)
    assert read(store, index, stock).clusters["c1"].phase == "cordoned"
    clusters.update_node(store, ADMIN, "n-2", True, NOW)
    assert read(store, index, stock).cordoned == {"n-2"}
    load_fleet(store, parse_fleet(fleet(2)), NOW)
    assert [s[0] for s in read(store, index, stock).seats] == ["p1", "p2"]
