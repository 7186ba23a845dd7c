"""Existence leaks: a tenant cannot tell a pool it may not see from a pool that does not exist, and a
pool owner cannot tell an existing tenant id from one that does not exist.

Before, `reservations.create` in an invisible pool answered QUOTA_EXCEEDED (or INVALID_INPUT with the
pool's sharing mode), while a missing pool was NOT_FOUND; and an owner's `quotas.set` or `pools.offer`
for a tenant id that does not exist was NOT_FOUND while one for an existing tenant succeeded.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from better_compute.storage.store import Store
from tests.api.test_tenancy import Api, load

# Requests whose refusal in a visible pool would say something about the pool: its sharing mode
# (a slot in a MIG pool), or the tenant's quota there.
BODIES: list[Any] = [
    pytest.param(
        {"devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"},
        id="a MIG instance, which the pool's quota would refuse",
    ),
    pytest.param(
        {"devices": [{"class": "gpu.slot", "count": 1}], "duration": "1h"},
        id="a slot, which the pool's sharing mode would refuse",
    ),
    pytest.param({"devices": [{"class": "gpu", "count": 1}], "duration": "1h"}, id="a whole GPU"),
    pytest.param(
        {"devices": [{"class": "gpu", "count": 1, "sharing": "mps"}], "duration": "1h"},
        id="a whole GPU shared by MPS, which the pool's sharing mode would refuse",
    ),
    pytest.param(
        {"devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h", "idempotencyKey": "k-1"},
        id="a MIG instance with an idempotency key",
    ),
]


def _answer(response: Any, pool_id: str) -> tuple[int, str]:
    """The answer with the pool's id taken out: what must not differ between the two pools."""
    return response.status_code, json.dumps(response.json(), sort_keys=True).replace(pool_id, "<pool>")


@pytest.mark.parametrize("body", BODIES)
def test_existence_leaks_an_invisible_pool_answers_like_a_missing_one(
    store: Store, body: dict[str, Any]
) -> None:
    api = load(store)  # pool p1 (mig), owned by platform; acme has no quota in it
    unseen = api.call("acme", "reservations.create", {**body, "poolId": "p1"})
    missing = api.call("acme", "reservations.create", {**body, "poolId": "p9"})
    assert _answer(unseen, "p1") == _answer(missing, "p9")
    assert unseen.status_code == 404 and unseen.json()["error"]["message"] == "pool p1 not found"


def _owner_grants(api: Api, tenant_id: str) -> list[tuple[int, str]]:
    answers = []
    for name, body in (
        ("quotas.set", {"tenantId": tenant_id, "poolId": "p1", "class": "gpu", "limit": 2}),
        ("pools.offer", {"poolId": "p1", "tenantId": tenant_id, "quota": {"gpu.mig": 3}}),
    ):
        response = api.call("platform", name, body)
        answers.append(
            (response.status_code, json.dumps(response.json(), sort_keys=True).replace(tenant_id, "<tenant>"))
        )
    return answers


def test_existence_leaks_an_owner_cannot_probe_tenant_ids(store: Store) -> None:
    api = load(store)
    existing = _owner_grants(api, "beta")
    unknown = _owner_grants(api, "ghost-tenant")
    assert existing == unknown
    assert [status for status, _ in existing] == [200, 200]
    # The admin, who may list every tenant anyway, is told.
    refused = api.call(
        "admin", "quotas.set", {"tenantId": "ghost-2", "poolId": "p1", "class": "gpu", "limit": 1}
    )
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "NOT_FOUND"
    # What the owner granted to the unknown id is kept, and applies once the admin creates that tenant.
    assert api.call("admin", "tenants.create", {"id": "ghost-tenant", "name": "Ghost"}).status_code == 201
    rows = api.call("admin", "quotas.list", {"tenantId": "ghost-tenant"}).json()["items"]
    assert {(r["class"], r["limit"]) for r in rows} == {("gpu", 2), ("gpu.mig", 3)}


def test_existence_leaks_an_owner_offer_answers_alike_for_a_tenant_the_admin_already_offered_to(
    store: Store,
) -> None:
    """Rows the admin wrote exist only for real tenants: an owner's answer shows only its own rows."""
    api = load(store)
    offer = {"poolId": "p1", "tenantId": "beta", "quota": {"gpu.mig": 2}}
    assert api.call("admin", "pools.offer", offer).status_code == 200
    answers = {}
    for tenant in ("beta", "ghost-tenant"):
        r = api.call("platform", "pools.offer", {"poolId": "p1", "tenantId": tenant, "quota": {"gpu": 1}})
        answers[tenant] = (r.status_code, json.dumps(r.json(), sort_keys=True).replace(tenant, "<tenant>"))
    assert answers["beta"] == answers["ghost-tenant"]


def test_existence_leaks_nodes_do_not_name_pools_the_tenant_cannot_see(store: Store) -> None:
    api = load(store)  # p1 owned by platform; acme has no rows in it
    assert api.call("acme", "pools.get", {"id": "p1"}).status_code == 404
    assert {n["poolId"] for n in api.call("acme", "nodes.list").json()["items"]} == {None}
    assert {n["poolId"] for n in api.call("platform", "nodes.list").json()["items"]} == {"p1"}
    assert {n["poolId"] for n in api.call("admin", "nodes.list").json()["items"]} == {"p1"}
