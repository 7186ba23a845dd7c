"""One visibility rule, pinned method by method through the real app (docs/api.md#conventions).

A tenant token that names another tenant gets, from every method, the answer it would get for a
tenant id that does not exist, so no answer tells it which tenants are real:

- methods that act for the tenant they name (`reservations.create`, `reservations.list`,
  `quotas.list`, `policies.list`) answer NOT_FOUND, "tenant <id> not found";
- methods whose purpose is to name another tenant (a pool's owner granting quota with `quotas.set`
  or `pools.offer`) answer alike whether or not that tenant exists; a caller that may not grant in
  the pool gets the pool's answer, whichever tenant it names;
- admin-only methods are FORBIDDEN to a tenant token, whichever tenant it names.

Before, `quotas.list` said NOT_FOUND, `reservations.list` an empty page and `reservations.create`
FORBIDDEN ("this credential acts for tenant acme, not beta").
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from better_compute.storage.store import Store
from tests.api.test_tenancy import Api, load

GHOST = "ghost-tenant"
"""A tenant id that does not exist."""

BOOKING = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"}


def answer(response: Any, tenant_id: str) -> tuple[int, Any]:
    """Status and body with the tenant's id taken out: what must not differ between two tenants."""
    return response.status_code, json.loads(response.text.replace(tenant_id, "<tenant>"))


def not_found(tenant_id: str) -> dict[str, Any]:
    return {
        "error": {
            "code": "NOT_FOUND",
            "message": f"tenant {tenant_id} not found",
            "details": {"tenantId": tenant_id},
        }
    }


def offered(store: Store, *tenants: str) -> Api:
    """Pool p1 (mig, owned by platform) with MIG quota for `tenants`."""
    api = load(store)
    for tenant in tenants:
        body = {"poolId": "p1", "tenantId": tenant, "quota": {"gpu.mig": 2}}
        assert api.call("admin", "pools.offer", body).status_code == 200
    return api


def test_visibility_reservations_create_for_another_tenant_is_not_found(store: Store) -> None:
    api = offered(store, "acme", "beta")
    other = api.call("acme", "reservations.create", {**BOOKING, "tenantId": "beta"})
    assert other.status_code == 404 and other.json() == not_found("beta")
    ghost = api.call("acme", "reservations.create", {**BOOKING, "tenantId": GHOST})
    assert answer(ghost, GHOST) == answer(other, "beta")
    # Nothing was booked for beta; the same request for acme itself is booked.
    assert api.call("admin", "reservations.list", {"tenantId": "beta"}).json()["items"] == []
    assert api.call("acme", "reservations.create", {**BOOKING, "tenantId": "acme"}).status_code == 201


def test_visibility_reservations_list_of_another_tenant_is_not_found(store: Store) -> None:
    api = offered(store, "acme", "beta")
    assert api.call("beta", "reservations.create", BOOKING).status_code == 201
    other = api.call("acme", "reservations.list", {"tenantId": "beta"})
    assert other.status_code == 404 and other.json() == not_found("beta")
    ghost = api.call("acme", "reservations.list", {"tenantId": GHOST})
    assert answer(ghost, GHOST) == answer(other, "beta")
    assert api.call("acme", "reservations.list", {"tenantId": "acme"}).json()["items"] == []
    assert len(api.call("admin", "reservations.list", {"tenantId": "beta"}).json()["items"]) == 1


def test_visibility_quotas_list_of_another_tenant_is_not_found(store: Store) -> None:
    api = offered(store, "acme", "beta")
    other = api.call("acme", "quotas.list", {"tenantId": "beta"})
    assert other.status_code == 404 and other.json() == not_found("beta")
    ghost = api.call("acme", "quotas.list", {"tenantId": GHOST})
    assert answer(ghost, GHOST) == answer(other, "beta")
    assert [r["tenantId"] for r in api.call("acme", "quotas.list", {"tenantId": "acme"}).json()["items"]] == [
        "acme"
    ]


def test_visibility_policies_list_of_another_tenant_is_not_found(store: Store) -> None:
    api = load(store)
    policy = {"name": "one-gpu", "tenantId": "beta", "limits": {"gpuCount": 1}}
    assert api.call("admin", "policies.create", policy).status_code == 201
    other = api.call("acme", "policies.list", {"tenantId": "beta"})
    assert other.status_code == 404 and other.json() == not_found("beta")
    ghost = api.call("acme", "policies.list", {"tenantId": GHOST})
    assert answer(ghost, GHOST) == answer(other, "beta")
    assert api.call("acme", "policies.list", {"tenantId": "acme"}).json()["items"] == []


GRANTS = [
    pytest.param(
        "quotas.set",
        lambda tenant: {"tenantId": tenant, "poolId": "p1", "class": "gpu.mig", "limit": 1},
        id="quotas.set",
    ),
    pytest.param(
        "pools.offer",
        lambda tenant: {"poolId": "p1", "tenantId": tenant, "quota": {"gpu.mig": 1}},
        id="pools.offer",
    ),
]


@pytest.mark.parametrize(("method", "body"), GRANTS)
def test_visibility_an_owner_grants_to_another_tenant_alike_whether_or_not_it_exists(
    store: Store, method: str, body: Any
) -> None:
    api = load(store)  # p1 is platform's
    other = api.call("platform", method, body("beta"))
    assert other.status_code == 200, other.text
    assert answer(api.call("platform", method, body(GHOST)), GHOST) == answer(other, "beta")


@pytest.mark.parametrize(("method", "body"), GRANTS)
def test_visibility_a_tenant_that_may_not_grant_gets_the_pools_answer_whichever_tenant_it_names(
    store: Store, method: str, body: Any
) -> None:
    api = load(store)
    # acme cannot see p1: NOT_FOUND for the pool, as if it did not exist.
    unseen = api.call("acme", method, body("beta"))
    assert unseen.status_code == 404
    assert unseen.json()["error"] == {
        "code": "NOT_FOUND",
        "message": "pool p1 not found",
        "details": {"poolId": "p1"},
    }
    for tenant in (GHOST, "acme"):
        assert answer(api.call("acme", method, body(tenant)), tenant) == answer(unseen, "beta")
    # beta sees p1 through its quota but does not own it: FORBIDDEN, whichever tenant it names.
    api.call("admin", "pools.offer", {"poolId": "p1", "tenantId": "beta", "quota": {"gpu.mig": 1}})
    seen = api.call("beta", method, body("acme"))
    assert seen.status_code == 403 and seen.json()["error"] == {
        "code": "FORBIDDEN",
        "message": f"{method} in pool p1 needs its owner's or a fleet-admin token",
        "details": {"poolId": "p1", "action": method},
    }
    for tenant in (GHOST, "beta"):
        assert answer(api.call("beta", method, body(tenant)), tenant) == answer(seen, "acme")


ADMIN_ONLY = [
    pytest.param(
        "policies.create",
        lambda tenant: {"name": "x", "tenantId": tenant, "limits": {"gpuCount": 1}},
        id="policies.create",
    ),
    pytest.param("credentials.create", lambda tenant: {"tenantId": tenant}, id="credentials.create"),
    pytest.param(
        "pools.create",
        lambda tenant: {"name": "p2", "clusterId": "c1", "mode": "mig", "ownerTenantId": tenant},
        id="pools.create",
    ),
]


@pytest.mark.parametrize(("method", "body"), ADMIN_ONLY)
def test_visibility_admin_only_methods_are_forbidden_whichever_tenant_is_named(
    store: Store, method: str, body: Any
) -> None:
    api = load(store)
    other = api.call("acme", method, body("beta"))
    assert other.status_code == 403 and other.json()["error"] == {
        "code": "FORBIDDEN",
        "message": f"{method} needs a fleet-admin token",
        "details": {"action": method},
    }
    for tenant in (GHOST, "acme"):
        assert answer(api.call("acme", method, body(tenant)), tenant) == answer(other, "beta")


@pytest.mark.parametrize("method", ["tenants.list", "credentials.list"])
def test_visibility_tenant_and_credential_lists_name_no_tenant(store: Store, method: str) -> None:
    api = load(store)
    own = api.call("acme", method).json()["items"]
    assert own and {item.get("tenantId", item.get("id")) for item in own} == {"acme"}
    named = api.call("acme", method, {"tenantId": "beta"})
    assert named.status_code == 400 and named.json()["error"] == {
        "code": "INVALID_INPUT",
        "message": "tenantId: unknown query parameter; use limit or cursor",
        "details": {"field": "tenantId", "accepted": ["limit", "cursor"]},
    }


def test_visibility_pools_list_filters_by_owner_among_the_pools_the_token_sees(store: Store) -> None:
    """`ownerTenantId` filters what the token sees, it is not a tenant the call acts for: another
    owner's pools the tenant has no quota in are not there, exactly as for an owner that does not exist."""
    api = load(store)
    other = api.call("acme", "pools.list", {"ownerTenantId": "platform"})
    assert other.status_code == 200 and other.json() == {"items": [], "nextCursor": None}
    assert answer(api.call("acme", "pools.list", {"ownerTenantId": GHOST}), GHOST) == answer(
        other, "platform"
    )
    api.call("admin", "pools.offer", {"poolId": "p1", "tenantId": "acme", "quota": {"gpu.mig": 1}})
    offered_to_acme = api.call("acme", "pools.list", {"ownerTenantId": "platform"}).json()["items"]
    assert [p["id"] for p in offered_to_acme] == ["p1"]


@pytest.mark.parametrize("method", ["reservations.get", "reservations.cancel", "reservations.release"])
def test_visibility_another_tenants_reservation_answers_like_a_missing_one(store: Store, method: str) -> None:
    api = offered(store, "beta")
    theirs = api.call("beta", "reservations.create", BOOKING).json()["id"]
    other = api.call("acme", method, {"id": theirs})
    assert other.status_code == 404 and other.json()["error"] == {
        "code": "NOT_FOUND",
        "message": f"reservation {theirs} not found",
        "details": {"id": theirs},
    }
    missing = api.call("acme", method, {"id": "r-missing"})
    assert json.loads(missing.text.replace("r-missing", theirs)) == other.json()
    assert api.call("beta", "reservations.get", {"id": theirs}).json()["status"] == "active"
