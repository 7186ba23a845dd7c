"""`tenants.delete` through the real app, on SQLite and PostgreSQL: refused while the tenant owns a
pool or holds a reservation not over; done, its tokens stop working, its rows go, its id stays taken."""

from __future__ import annotations

import pytest

from better_compute.storage.store import Store
from tests.api.test_reservations import World, error
from tests.builders import stored_events


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


def test_a_tenant_that_owns_pools_is_not_deleted_and_the_pools_are_named(world: World) -> None:
    r = world.http.delete("/v1/tenants/platform", headers=world.admin)
    assert r.status_code == 409 and error(r)["code"] == "INVALID_STATE"
    assert error(r)["message"] == (
        "tenant platform owns 3 pool(s) (a100, h100, l40s); delete them first (pools.delete)"
    )
    assert error(r)["details"]["pools"] == ["a100", "h100", "l40s"]


def test_a_tenant_holding_a_reservation_is_deleted_only_once_it_is_over(world: World) -> None:
    world.offer("a100", "acme", gpu=1)
    made = world.reserve(world.acme, "a100", [{"class": "gpu", "count": 1}], duration="1h")
    assert made.status_code == 201, made.text
    rsv = made.json()["id"]
    held = world.http.delete("/v1/tenants/acme", headers=world.admin)
    assert held.status_code == 409 and error(held)["code"] == "INVALID_STATE"
    assert error(held)["message"] == (
        f"tenant acme holds reservations that are not over ({rsv}); cancel or release them first"
    )
    world.clock.now = world.clock.now.replace(hour=10)  # the hour is over
    gone = world.http.delete("/v1/tenants/acme", headers=world.admin)
    assert gone.status_code == 200, gone.text
    assert gone.json()["id"] == "acme" and gone.json()["deletedAt"].startswith("2026-12-01T10:00:00")
    # Its history stays: the reservation still names it.
    assert world.http.get(f"/v1/reservations/{rsv}", headers=world.admin).json()["tenantId"] == "acme"


def test_a_deleted_tenant_loses_its_tokens_rows_and_policies_and_its_id_stays_taken(
    world: World, store: Store
) -> None:
    world.offer("a100", "acme", gpu=2)
    policy = {"name": "small", "tenantId": "acme", "limits": {"gpuCount": 1}}
    assert world.http.post("/v1/policies", json=policy, headers=world.admin).status_code == 201
    assert world.http.get("/v1/whoami", headers=world.acme).status_code == 200

    gone = world.http.delete("/v1/tenants/acme", headers=world.admin)
    assert gone.status_code == 200, gone.text

    refused = world.http.get("/v1/whoami", headers=world.acme)
    assert refused.status_code == 401 and error(refused)["code"] == "UNAUTHENTICATED"
    tenants = world.http.get("/v1/tenants", headers=world.admin).json()["items"]
    assert "acme" not in [t["id"] for t in tenants]
    assert (
        world.http.get("/v1/quotas", params={"tenantId": "acme"}, headers=world.admin).json()["items"] == []
    )
    assert (
        world.http.get("/v1/policies", params={"tenantId": "acme"}, headers=world.admin).json()["items"] == []
    )
    booked = world.http.post(
        "/v1/reservations",
        json={
            "tenantId": "acme",
            "poolId": "a100",
            "devices": [{"class": "gpu", "count": 1}],
            "duration": "1h",
        },
        headers=world.admin,
    )
    assert booked.status_code == 404 and error(booked)["message"] == "tenant acme not found"
    token = world.http.post("/v1/credentials", json={"tenantId": "acme"}, headers=world.admin)
    assert token.status_code == 404 and error(token)["code"] == "NOT_FOUND"
    again = world.http.post("/v1/tenants", json={"id": "acme", "name": "ACME again"}, headers=world.admin)
    assert again.status_code == 409 and error(again)["code"] == "CONFLICT"
    assert (
        error(again)["message"]
        == "tenant acme was deleted, and a tenant id is never reused; choose another id"
    )
    twice = world.http.delete("/v1/tenants/acme", headers=world.admin)
    assert twice.status_code == 404 and error(twice)["message"] == "tenant acme not found"

    (event,) = stored_events(store, "tenant.deleted")
    assert event["subject"] == "acme"
    assert event["payload"] == {"revokedCredentials": 1, "removedQuotas": 1, "removedPolicies": 1}


def test_only_the_admin_deletes_a_tenant(world: World) -> None:
    own = world.http.delete("/v1/tenants/acme", headers=world.acme)
    assert own.status_code == 403 and error(own)["code"] == "FORBIDDEN"
    assert world.http.get("/v1/whoami", headers=world.acme).status_code == 200
