"""The stock's catalog (clusters, pool seats, cordoned nodes) is read again whenever an event that
may change it reaches the booking index: a cluster's phase, a node's cordon, a pool added by a
fleet file; and a tenant's rules (quota rows, offers, placement policies) whenever one of those is
written. Placement decides on both, so a stale copy would place into a cordoned cluster or past a
quota."""

from __future__ import annotations

from datetime import UTC, datetime

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.entrypoints.ids import RandomIds
from better_compute.service.fleet import clusters, pools
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.placement import class_quotas
from better_compute.service.placement.placement_stock import Catalog, Rules, Stock
from better_compute.service.tenancy import credentials, policies, tenants
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
    assert (first.clusters["c1"].phase, list(first.seats), first.cordoned) == (
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
    assert list(read(store, index, stock).seats) == ["p1", "p2"]


def test_the_rules_follow_quota_rows_offers_and_policies(store: Store) -> None:
    raw = fleet(1)
    raw["tenants"] = [{"id": "platform"}, {"id": "acme"}]
    raw["deviceClasses"] = [
        {
            "name": "h100",
            "class": "gpu",
            "selector": {"matchExpressions": [{"key": "gpuModel", "op": "In", "values": ["H100-80GB"]}]},
        }
    ]
    load_fleet(store, parse_fleet(raw), NOW)
    index, stock = BookingIndex(), Stock()

    def rules() -> Rules:
        with store.read() as tx:
            index.sync(tx)
            return stock.rules(tx, index, "acme", "h100")

    first = rules()
    assert (first.quotas, first.class_rows, first.policies) == ((), (), ())
    assert rules() is first
    pools.offer(store, ADMIN, "p1", "acme", {"gpu": 4}, NOW)
    assert [(q.pool_id, q.limit) for q in rules().quotas] == [("p1", 4)]
    class_quotas.set_class_quota(
        store,
        ADMIN,
        tenant_id="acme",
        device_class="h100",
        scope="fleet",
        cluster_id=None,
        guaranteed_devices=2,
        now=NOW,
    )
    assert [r.guaranteed_devices for r in rules().class_rows] == [2]
    made = policies.create(
        store,
        ADMIN,
        name="no-c1",
        tenant_id="acme",
        pool_id=None,
        limits=None,
        constraints={"deniedClusters": ["c1"]},
        now=NOW,
        new_id=RandomIds().policy,
    )
    assert [p.id for p in rules().policies] == [made.id]
    policies.delete(store, ADMIN, made.id, NOW)
    assert rules().policies == ()


def test_a_tenant_seen_once_is_refused_once_deleted(store: Store) -> None:
    """The stock keeps a tenant's existence (a workload create asks it each time) only until the
    catalog moves: a deleted tenant is no longer taken for one."""
    raw = fleet(1)
    raw["tenants"] = [{"id": "platform"}, {"id": "acme"}, {"id": "beta"}]
    load_fleet(store, parse_fleet(raw), NOW)
    index, stock = BookingIndex(), Stock()

    def exists(tenant_id: str) -> bool:
        with store.read() as tx:
            index.sync(tx)
            return stock.tenant_exists(tx, index, tenant_id)

    assert exists("beta") and exists("beta")
    assert not exists("nobody")
    tenants.delete(store, ADMIN, "beta", NOW)
    assert not exists("beta")
    assert exists("acme")


def test_events_that_touch_no_atom_keep_the_index_read_of_a_pools_atoms(store: Store) -> None:
    """Re-reading every pool's atoms costs a full read of the fleet's atoms: a credential, an offer
    or a policy must not cause it; a cordon must."""
    raw = fleet(1)
    raw["tenants"] = [{"id": "platform"}, {"id": "acme"}]
    load_fleet(store, parse_fleet(raw), NOW)
    index = BookingIndex()

    def atoms_read() -> object:
        with store.read() as tx:
            index.sync(tx)
            return index.pool_atoms(tx, "p1")

    first = atoms_read()
    credentials.create(store, ADMIN, "acme", "ci", NOW, new_id=RandomIds().credential)
    pools.offer(store, ADMIN, "p1", "acme", {"gpu": 4}, NOW)
    policies.create(
        store,
        ADMIN,
        name="p",
        tenant_id="acme",
        pool_id=None,
        limits={"gpuCount": 2},
        now=NOW,
        new_id=RandomIds().policy,
    )
    assert atoms_read() is first
    clusters.update_node(store, ADMIN, "n-1", True, NOW)
    assert atoms_read() is not first
