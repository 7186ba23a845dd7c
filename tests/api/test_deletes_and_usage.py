"""Deleting and reading usage through the real app, on SQLite and PostgreSQL: `policies.delete`, `pools.delete`, `quotas.list` with `used`."""

from __future__ import annotations

import pytest

from better_compute.storage.store import Store
from tests.api.test_reservations import World, error


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


def test_a_deleted_policy_limits_no_later_reservation(world: World) -> None:
    body = {"name": "one-gpu", "tenantId": "platform", "poolId": "a100", "limits": {"gpuCount": 1}}
    made = world.http.post("/v1/policies", json=body, headers=world.admin)
    assert made.status_code == 201, made.text
    policy_id = made.json()["id"]
    two = [{"class": "gpu", "count": 2}]
    limited = world.reserve(world.platform, "a100", two)
    assert limited.status_code == 403 and error(limited)["code"] == "FORBIDDEN", limited.text
    denied = world.http.delete(f"/v1/policies/{policy_id}", headers=world.platform)
    assert denied.status_code == 403 and error(denied)["code"] == "FORBIDDEN"
    gone = world.http.delete(f"/v1/policies/{policy_id}", headers=world.admin)
    assert gone.status_code == 200 and gone.json()["id"] == policy_id
    assert world.http.get("/v1/policies", headers=world.admin).json()["items"] == []
    assert world.reserve(world.platform, "a100", two).status_code == 201
    again = world.http.delete(f"/v1/policies/{policy_id}", headers=world.admin)
    assert again.status_code == 404 and error(again)["code"] == "NOT_FOUND"


def test_only_an_empty_pool_is_deleted_with_its_quota_rows_and_policies(world: World) -> None:
    has_nodes = world.http.delete("/v1/pools/a100", headers=world.admin)
    assert has_nodes.status_code == 409 and error(has_nodes)["code"] == "INVALID_STATE"
    assert error(has_nodes)["message"].startswith("pool a100 still has 2 node(s) (")
    assert (
        world.reserve(world.platform, "a100", [{"class": "gpu", "count": 1}], duration="1h").status_code
        == 201
    )
    emptied = world.http.patch("/v1/pools/l40s", json={"id": "l40s", "nodes": []}, headers=world.admin)
    assert emptied.status_code == 200, emptied.text
    quota = {"tenantId": "platform", "poolId": "l40s", "class": "gpu.slot", "limit": 2}
    assert world.http.put("/v1/quotas", json=quota, headers=world.admin).status_code == 200
    body = {"name": "slots", "tenantId": "platform", "poolId": "l40s", "limits": {"gpuSlices": 1}}
    assert world.http.post("/v1/policies", json=body, headers=world.admin).status_code == 201
    denied = world.http.delete("/v1/pools/l40s", headers=world.acme)
    assert denied.status_code == 403
    gone = world.http.delete("/v1/pools/l40s", headers=world.admin)
    assert gone.status_code == 200, gone.text
    assert gone.json()["id"] == "l40s"
    assert world.http.get("/v1/pools/l40s", headers=world.admin).status_code == 404
    assert world.http.get("/v1/quotas", params={"poolId": "l40s"}, headers=world.admin).json()["items"] == []
    assert (
        world.http.get("/v1/policies", params={"poolId": "l40s"}, headers=world.admin).json()["items"] == []
    )
    # A pool with reservation history keeps it: emptied of nodes, a100 still cannot go.
    world.clock.now = world.clock.now.replace(hour=12)
    assert (
        world.http.patch("/v1/pools/a100", json={"id": "a100", "nodes": []}, headers=world.admin).status_code
        == 200
    )
    kept = world.http.delete("/v1/pools/a100", headers=world.admin)
    assert kept.status_code == 409 and "has reservations" in error(kept)["message"]


def test_quotas_list_shows_what_is_held_now_beside_the_limit(world: World) -> None:
    world.offer("a100", "acme", gpu=3)
    assert world.reserve(world.acme, "a100", [{"class": "gpu", "count": 2}], duration="2h").status_code == 201
    later = world.reserve(world.acme, "a100", [{"class": "gpu", "count": 1}], start="2026-12-01T20:00:00Z")
    assert later.status_code == 201, later.text
    rows = world.http.get("/v1/quotas", params={"tenantId": "acme"}, headers=world.acme).json()["items"]
    assert [(r["poolId"], r["class"], r["used"], r["limit"]) for r in rows] == [("a100", "gpu", 2, 3)]
    world.clock.now = world.clock.now.replace(hour=20, minute=30)
    rows = world.http.get("/v1/quotas", params={"tenantId": "acme"}, headers=world.acme).json()["items"]
    assert [(r["used"], r["limit"]) for r in rows] == [(1, 3)]


def test_quotas_list_over_a_window_shows_the_most_held_at_once(world: World) -> None:
    world.offer("a100", "acme", gpu=3)
    one = [{"class": "gpu", "count": 1}]
    for start in ("2026-12-01T10:00:00Z", "2026-12-01T11:00:00Z", "2026-12-01T10:30:00Z"):
        assert world.reserve(world.acme, "a100", one, start=start, duration="1h").status_code == 201
    now = world.http.get("/v1/quotas", params={"tenantId": "acme"}, headers=world.acme).json()["items"]
    assert [(r["used"], r["limit"]) for r in now] == [(0, 3)]
    window = {"tenantId": "acme", "from": "2026-12-01T10:00:00Z", "to": "2026-12-01T12:00:00Z"}
    peak = world.http.get("/v1/quotas", params=window, headers=world.acme).json()["items"]
    assert [(r["used"], r["limit"]) for r in peak] == [(2, 3)]  # back to back, and one across both
    hour = world.http.get(
        "/v1/quotas", params={"tenantId": "acme", "from": "2026-12-01T11:30:00Z"}, headers=world.acme
    ).json()["items"]
    assert [r["used"] for r in hour] == [1]
    bad = world.http.get(
        "/v1/quotas",
        params={"from": "2026-12-01T12:00:00Z", "to": "2026-12-01T11:00:00Z"},
        headers=world.acme,
    )
    assert bad.status_code == 400 and error(bad)["code"] == "INVALID_INPUT"
