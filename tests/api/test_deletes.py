"""Deleting through the real app, on SQLite and PostgreSQL: `policies.delete`."""

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
