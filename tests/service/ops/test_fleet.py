"""The fleet loader writes pools through the pools rules: the same checks, generations and events."""

from __future__ import annotations

import pytest

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import pools
from better_compute.storage.store import Store
from tests.builders import T0, at, small_fleet, stored_events

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="admin")


def test_reloading_a_fleet_file_cannot_change_a_pools_mode_with_its_generation_unchanged(
    store: Store,
) -> None:
    fleet = small_fleet(nodes=1, layout="all-1g.10gb")
    load_fleet(store, parse_fleet(fleet), T0)
    turned = small_fleet(nodes=1, mode="exclusive")
    with pytest.raises(InvalidInput) as refused:
        load_fleet(store, parse_fleet(turned), at(1))
    assert refused.value.message == (
        "a pool's sharing mode is fixed at creation: pool p1 is mig; create another pool for exclusive"
    )
    kept = pools.get_pool(store, ADMIN, "p1").pool
    assert (kept.mode, kept.generation) == ("mig", 1)


def test_reloading_a_fleet_file_with_a_new_layout_is_a_pool_update(store: Store) -> None:
    load_fleet(store, parse_fleet(small_fleet(nodes=1, layout="all-1g.10gb")), T0)
    load_fleet(store, parse_fleet(small_fleet(nodes=1, layout="all-1g.10gb")), at(1))
    assert pools.get_pool(store, ADMIN, "p1").pool.generation == 1  # the same file changes nothing
    assert stored_events(store, "pool.updated") == []
    load_fleet(store, parse_fleet(small_fleet(nodes=1, layout="all-3g.40gb")), at(2))
    changed = pools.get_pool(store, ADMIN, "p1").pool
    assert (changed.generation, changed.settings.layout) == (2, "all-3g.40gb")
    (requested,) = stored_events(store, "pool.mig_layout.requested")
    assert requested["payload"] == {"from": "all-1g.10gb", "to": "all-3g.40gb", "nodes": ["n"]}
