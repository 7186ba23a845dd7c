"""The server's admission breaks ties between equally good GPUs by the pool's recorded request sizes
(docs/concepts.md#reservations, rule 2), through the real app on SQLite and PostgreSQL.

The pool: node `n1` with two whole GPUs, node `n2` with one. A request for one GPU finds all three
equal by rule 2 (untouched, one atom each); by id it goes to n1. Once the pool's record says it is
asked for two GPUs on a node, n1's pair is worth keeping whole: the GPU goes to n2, which leaves the
pool able to serve the next two-GPU request."""

from __future__ import annotations

import warnings
from datetime import timedelta
from typing import Any

import pytest

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.storage.store import Store
from tests.builders import T0, admin_token, bearer, real_app, tenant_token
from tests.node_world import Clock

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.both_stores  # the choice is the same on both databases

FLEET: dict[str, Any] = {
    "tenants": [{"id": "platform"}],
    "clusters": [
        {
            "name": "c1",
            "region": "r1",
            "nodes": [
                {"name": "n1", "gpus": {"model": "A100-80GB", "count": 2}},
                {"name": "n2", "gpus": {"model": "A100-80GB", "count": 1}},
            ],
        }
    ],
    "pools": [
        {"name": "a100", "cluster": "c1", "mode": "exclusive", "owner": "platform", "nodes": ["n1", "n2"]}
    ],
}

ONE = [{"class": "gpu", "count": 1}]
TWO = [{"class": "gpu", "count": 2}]


class World:
    def __init__(self, store: Store) -> None:
        load_fleet(store, parse_fleet(FLEET), T0)
        self.store = store
        self.clock = Clock()
        self.http = TestClient(real_app(store, clock=self.clock))
        self.platform = bearer(tenant_token(store, "platform"))
        admin = bearer(admin_token(store))
        body = {"poolId": "a100", "tenantId": "platform", "quota": {"gpu": 3}}
        offered = self.http.post("/v1/pools/a100/offers", json=body, headers=admin)
        assert offered.status_code in (200, 201), offered.text

    def reserve(self, devices: list[dict[str, Any]], duration: str = "1h") -> dict[str, Any]:
        body = {"poolId": "a100", "devices": devices, "duration": duration}
        r = self.http.post("/v1/reservations", json=body, headers=self.platform)
        assert r.status_code == 201, r.text
        return dict(r.json())

    def two_gpus_were_asked(self) -> None:
        """The record: one reservation of two GPUs (on n1, the only node that has two), over by the
        time the next one is asked for, and 2 hours old then (well inside the 30 days)."""
        assert nodes_of(self.reserve(TWO)) == ["n1", "n1"]
        self.clock.now = T0 + timedelta(hours=2)


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


def nodes_of(reservation: dict[str, Any]) -> list[str]:
    return sorted(a["node"] for a in reservation["atoms"])


def test_a_gpu_goes_where_the_recorded_demand_strands_least(world: World) -> None:
    world.two_gpus_were_asked()
    one = world.reserve(ONE)
    assert nodes_of(one) == ["n2"]  # by id it would be n1's first GPU
    # n1's two GPUs stayed together: a two-GPU request is still served, on one node.
    assert nodes_of(world.reserve(TWO)) == ["n1", "n1"]


def test_without_history_the_choice_is_by_id_as_before(world: World) -> None:
    # No record: the pool is measured against the sizes its atoms come in (one GPU), which every
    # free GPU serves; no GPU is better than another, and the smallest id wins.
    one = world.reserve(ONE)
    assert nodes_of(one) == ["n1"]
    assert one["atoms"][0]["gpuId"] == min(a["gpuId"] for a in gpus(world))


def test_admission_without_the_record_takes_the_smallest_id_even_after_history(world: World) -> None:
    """What the server shipped before: the same record, the choice by ids alone (no `gradients`)."""
    world.two_gpus_were_asked()
    owner = Principal(tenant_id="platform", is_admin=False, credential_id=None)
    view = reservations.create(
        world.store,
        BookingIndex(),
        owner,
        {"poolId": "a100", "devices": ONE, "duration": "1h"},
        world.clock.now,
        lambda: "rsv-plain",
    )
    assert [a.node for a in view.atoms] == ["n1"]


def gpus(world: World) -> list[dict[str, Any]]:
    r = world.http.get("/v1/atoms", params={"pool": "a100"}, headers=world.platform)
    assert r.status_code == 200, r.text
    return list(r.json()["items"])
