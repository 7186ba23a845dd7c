"""`service.placement.class_quotas.figures` on SQLite and PostgreSQL: a tenant's rows for a device class and the
devices of the class it holds now per cluster, read from live bookings on atoms of the class."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from better_compute.domain.kernel.errors import NotFound
from better_compute.service.placement import class_quotas
from better_compute.storage.store import Store
from tests.api.test_class_quotas import CLUSTER_ROW, World
from tests.builders import T0


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


def reserve(world: World, pool: str, count: int, who: dict[str, str] | None = None, **extra: Any) -> None:
    body = {"poolId": pool, "devices": [{"class": "gpu", "count": count}], "duration": "1h", **extra}
    made = world.http.post("/v1/reservations", json=body, headers=who or world.acme)
    assert made.status_code == 201, made.text


def test_figures_count_what_the_tenant_holds_now_per_cluster(world: World, store: Store) -> None:
    for pool in ("p-iad-1", "p-fra-1"):
        assert world.put({"tenantId": "acme", "poolId": pool, "class": "gpu", "limit": 4}).status_code == 200
    assert world.put({**CLUSTER_ROW, "guaranteedDevices": 3}).status_code == 200
    fleet = {"tenantId": "acme", "deviceClass": "h100-80gb", "scope": "fleet", "guaranteedDevices": 4}
    assert world.put(fleet).status_code == 200
    reserve(world, "p-iad-1", 3)
    reserve(world, "p-fra-1", 1)
    reserve(world, "p-fra-1", 2, start=(T0 + timedelta(hours=2)).isoformat())  # not held yet
    reserve(world, "p-fra-1", 1, who=world.admin, tenantId="platform")  # another tenant's

    got = class_quotas.figures(store, "acme", "h100-80gb", T0)
    assert got.held == {"iad-1": 3, "fra-1": 1}
    assert sorted((r.scope, r.cluster_id, r.guaranteed_devices) for r in got.rows) == [
        ("cluster", "iad-1", 3),
        ("fleet", None, 4),
    ]
    # iad-1 has its own row, full; fra-1 falls to the fleet row, which counts both clusters.
    iad, fra = got.admit("iad-1", 1), got.admit("fra-1", 1)
    assert (iad.admitted, iad.reason, iad.scope, iad.held, iad.limit) == (
        False,
        "insufficient_quota",
        "cluster",
        3,
        3,
    )
    assert (fra.admitted, fra.reason, fra.scope, fra.held, fra.limit) == (
        False,
        "insufficient_quota",
        "fleet",
        4,
        4,
    )
    # Once the hour is over nothing is held, and the future booking is still not.
    later = class_quotas.figures(store, "acme", "h100-80gb", T0 + timedelta(minutes=90))
    assert later.held == {}
    assert class_quotas.figures(store, "acme", "h100-80gb", T0 + timedelta(hours=2)).held == {"fra-1": 2}


def test_figures_of_an_unknown_class_are_not_found_and_a_tenant_without_rows_has_none(
    world: World, store: Store
) -> None:
    with pytest.raises(NotFound) as missing:
        class_quotas.figures(store, "acme", "b200", T0)
    assert missing.value.details == {"deviceClass": "b200"}
    empty = class_quotas.figures(store, "acme", "h100-80gb", T0)
    assert empty.rows == () and empty.held == {} and empty.admit("iad-1", 100).admitted
