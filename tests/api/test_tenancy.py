"""Tenancy through the real app: who may create, see, share and limit what
(docs/concepts.md#quotas-iam-policies-and-tenancy)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from better_compute.domain.tenancy.records import Tenant
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from better_compute.wire.methods import METHODS
from tests.builders import T0, admin_token, api_client, bearer, fleet_spec, tenant_token


class Api:
    """The app with one token per caller: `admin`, the pool owner `platform`, and tenants `acme`, `beta`."""

    def __init__(self, store: Store) -> None:
        self.client = api_client(store)
        self.tokens = {"admin": admin_token(store)}
        with store.begin() as tx:
            tx.tenants.put([Tenant("beta", "Beta", T0)])
        for tenant in ("platform", "acme", "beta"):
            self.tokens[tenant] = tenant_token(store, tenant)

    def call(self, who: str, name: str, body: dict[str, Any] | None = None) -> Any:
        """Call a method as the method table renders it, so routes and table cannot drift apart."""
        http = METHODS[name].render(body or {})
        return self.client.request(
            http.verb, http.path, params=http.query, json=http.json, headers=bearer(self.tokens[who])
        )


def load(store: Store, **kw: Any) -> Api:
    load_fleet(store, fleet_spec(**kw), T0)
    return Api(store)


def code(response: Any) -> str:
    return str(response.json()["error"]["code"])


def test_tenants_are_created_by_the_admin_and_see_only_themselves(store: Store) -> None:
    api = load(store)
    created = api.call("admin", "tenants.create", {"id": "gamma-2", "name": "Gamma"})
    assert created.status_code == 201
    assert created.json() == {
        "id": "gamma-2",
        "name": "Gamma",
        "createdAt": "2026-12-01T09:00:00Z",
        "deletedAt": None,
    }
    again = api.call("admin", "tenants.create", {"id": "gamma-2", "name": "Other"})
    assert again.status_code == 409 and code(again) == "CONFLICT"
    for bad in ("Gamma", "-x", "a_b", "a" * 64):
        refused = api.call("admin", "tenants.create", {"id": bad, "name": "x"})
        assert refused.status_code == 400 and code(refused) == "INVALID_INPUT", bad
    refused = api.call("acme", "tenants.create", {"id": "delta", "name": "Delta"})
    assert refused.status_code == 403 and code(refused) == "FORBIDDEN"
    everyone = api.call("admin", "tenants.list").json()
    assert [t["id"] for t in everyone["items"]] == ["acme", "beta", "gamma-2", "platform"]
    assert [t["id"] for t in api.call("acme", "tenants.list").json()["items"]] == ["acme"]
    first = api.call("admin", "tenants.list", {"limit": 2}).json()
    assert [t["id"] for t in first["items"]] == ["acme", "beta"] and first["nextCursor"] == "beta"
    rest = api.call("admin", "tenants.list", {"limit": 2, "cursor": first["nextCursor"]}).json()
    assert [t["id"] for t in rest["items"]] == ["gamma-2", "platform"] and rest["nextCursor"] is None


def test_a_tenant_sees_only_pools_it_owns_or_has_quota_in(store: Store) -> None:
    api = load(store, nodes=1, layout="all-3g.40gb")
    assert [p["id"] for p in api.call("admin", "pools.list").json()["items"]] == ["p1"]
    assert [p["id"] for p in api.call("platform", "pools.list").json()["items"]] == ["p1"]
    assert api.call("acme", "pools.list").json()["items"] == []
    hidden = api.call("acme", "pools.get", {"id": "p1"})
    assert hidden.status_code == 404 and code(hidden) == "NOT_FOUND"
    # A hidden pool is answered exactly as a pool that does not exist.
    missing = api.call("acme", "pools.get", {"id": "nope"})
    assert missing.status_code == 404
    assert hidden.json() == json.loads(missing.text.replace("nope", "p1"))
    assert api.call("acme", "atoms.list").json()["items"] == []
    assert api.call("acme", "atoms.list", {"pool": "p1"}).json()["items"] == []
    # Inventory itself is readable by every tenant.
    assert len(api.call("acme", "gpus.list").json()["items"]) == 2
    assert len(api.call("acme", "nodes.list").json()["items"]) == 1

    offered = api.call("admin", "pools.offer", {"poolId": "p1", "tenantId": "acme", "quota": {"gpu.mig": 2}})
    assert offered.status_code == 200
    assert [p["id"] for p in api.call("acme", "pools.list").json()["items"]] == ["p1"]
    assert api.call("acme", "pools.get", {"id": "p1"}).json()["nodes"] == ["n"]
    atoms = api.call("acme", "atoms.list", {"class": "gpu.mig"}).json()["items"]
    assert len(atoms) == 4 and {a["poolId"] for a in atoms} == {"p1"}
    assert api.call("beta", "atoms.list").json()["items"] == []
    filtered = api.call(
        "admin", "pools.list", {"clusterId": "c1", "mode": "mig", "ownerTenantId": "platform"}
    )
    assert [p["id"] for p in filtered.json()["items"]] == ["p1"]
    assert api.call("admin", "pools.list", {"mode": "mps"}).json()["items"] == []


@pytest.mark.parametrize("mode", ["timeslice", "mps"])
def test_timeslice_and_mps_pools_are_single_tenant(store: Store, mode: str) -> None:
    api = load(store, mode=mode)
    refused = api.call("admin", "pools.offer", {"poolId": "p1", "tenantId": "acme", "quota": {"gpu.slot": 2}})
    assert refused.status_code == 409 and code(refused) == "INVALID_STATE"
    assert "single-tenant" in refused.json()["error"]["message"]
    assert refused.json()["error"]["details"] == {
        "poolMode": mode,
        "ownerTenantId": "platform",
        "tenantId": "acme",
        "reason": "single_tenant_pool",
    }
    # quotas.set is another way in, so it obeys the same rule.
    refused = api.call(
        "admin", "quotas.set", {"tenantId": "acme", "poolId": "p1", "class": "gpu.slot", "limit": 1}
    )
    assert refused.status_code == 409 and code(refused) == "INVALID_STATE"
    assert api.call("admin", "quotas.list", {"poolId": "p1"}).json()["items"] == []
    # The owner may have slot rows, through either door.
    owner = api.call(
        "platform", "pools.offer", {"poolId": "p1", "tenantId": "platform", "quota": {"gpu.slot": 4}}
    )
    assert owner.status_code == 200
    assert owner.json() == {
        "poolId": "p1",
        "tenantId": "platform",
        "quotas": [
            {"tenantId": "platform", "poolId": "p1", "class": "gpu.slot", "limit": 4, "scope": "pool"}
        ],
    }


@pytest.mark.parametrize("mode", ["mig", "exclusive"])
def test_mig_and_exclusive_pools_are_offered_like_any_other(store: Store, mode: str) -> None:
    api = load(store, mode=mode)
    cls = "gpu.mig" if mode == "mig" else "gpu"
    offered = api.call("platform", "pools.offer", {"poolId": "p1", "tenantId": "acme", "quota": {cls: 3}})
    assert offered.status_code == 200
    assert offered.json()["quotas"] == [
        {"tenantId": "acme", "poolId": "p1", "class": cls, "limit": 3, "scope": "pool"}
    ]
    # Offering again replaces the rows it names and keeps the others.
    api.call("admin", "pools.offer", {"poolId": "p1", "tenantId": "acme", "quota": {"gpu.slot": 1}})
    api.call("admin", "pools.offer", {"poolId": "p1", "tenantId": "acme", "quota": {"gpu.slot": 2}})
    rows = api.call("acme", "quotas.list", {"poolId": "p1"}).json()["items"]
    assert sorted((r["class"], r["limit"]) for r in rows) == sorted([(cls, 3), ("gpu.slot", 2)])


def test_offer_and_quota_writes_need_the_owner_or_the_admin(store: Store) -> None:
    api = load(store)
    offer = {"poolId": "p1", "tenantId": "acme", "quota": {"gpu.mig": 1}}
    assert api.call("platform", "pools.offer", offer).status_code == 200
    # acme sees the pool through its quota but does not own it: FORBIDDEN.
    seen = api.call("acme", "pools.offer", {**offer, "tenantId": "beta"})
    assert seen.status_code == 403 and code(seen) == "FORBIDDEN"
    seen = api.call(
        "acme", "quotas.set", {"tenantId": "acme", "poolId": "p1", "class": "gpu.mig", "limit": 9}
    )
    assert seen.status_code == 403
    # beta cannot see it at all: NOT_FOUND, the same answer as for a pool that does not exist.
    unseen = api.call("beta", "quotas.set", {"tenantId": "beta", "poolId": "p1", "class": "gpu", "limit": 1})
    missing = api.call(
        "beta", "quotas.set", {"tenantId": "beta", "poolId": "nope", "class": "gpu", "limit": 1}
    )
    assert unseen.status_code == missing.status_code == 404
    assert code(unseen) == code(missing) == "NOT_FOUND"
    assert api.call("admin", "pools.offer", {**offer, "tenantId": "nobody"}).status_code == 404
    assert api.call("admin", "pools.offer", {**offer, "quota": {}}).status_code == 400
    assert api.call("admin", "pools.offer", {**offer, "quota": {"gpu.big": 1}}).status_code == 400
    assert api.call("admin", "pools.offer", {**offer, "quota": {"gpu": -1}}).status_code == 400


def test_quotas_set_and_list(store: Store) -> None:
    api = load(store)
    row = {"tenantId": "acme", "poolId": "p1", "class": "gpu.mig", "limit": 5}
    first = api.call("platform", "quotas.set", row)
    assert first.status_code == 200 and first.json() == {**row, "scope": "pool"}
    assert api.call("admin", "quotas.set", {**row, "limit": 7}).json()["limit"] == 7
    api.call("admin", "quotas.set", {**row, "tenantId": "beta", "class": "gpu"})
    everyone = api.call("admin", "quotas.list").json()["items"]
    assert [(r["tenantId"], r["class"], r["limit"]) for r in everyone] == [
        ("acme", "gpu.mig", 7),
        ("beta", "gpu", 5),
    ]
    assert [r["tenantId"] for r in api.call("acme", "quotas.list").json()["items"]] == ["acme"]
    assert [
        r["tenantId"] for r in api.call("admin", "quotas.list", {"tenantId": "beta"}).json()["items"]
    ] == ["beta"]
    other = api.call("acme", "quotas.list", {"tenantId": "beta"})
    assert other.status_code == 404 and code(other) == "NOT_FOUND"
    page = api.call("admin", "quotas.list", {"limit": 1}).json()
    assert len(page["items"]) == 1 and page["nextCursor"] is not None
    rest = api.call("admin", "quotas.list", {"limit": 1, "cursor": page["nextCursor"]}).json()
    assert rest["items"][0]["tenantId"] == "beta" and rest["nextCursor"] is None
    for bad in (
        {**row, "limit": -1},
        {**row, "class": "gpu.big"},
        {**row, "limit": 2**40},
        {**row, "extra": 1},
    ):
        refused = api.call("admin", "quotas.set", bad)
        assert refused.status_code == 400 and code(refused) == "INVALID_INPUT", bad
    assert api.call("admin", "quotas.set", {**row, "tenantId": "nobody"}).status_code == 404


def test_pools_create_update_through_the_api(store: Store) -> None:
    api = load(store, nodes=2)
    body = {
        "name": "p2",
        "clusterId": "c1",
        "mode": "mig",
        "ownerTenantId": "acme",
        "policy": {"migLayout": "all-1g.10gb"},
        "ownerQuota": {"gpu.mig": 7},
    }
    assert code(api.call("acme", "pools.create", body)) == "FORBIDDEN"
    taken = api.call("admin", "pools.create", {**body, "nodes": ["n-1"]})
    assert taken.status_code == 409 and code(taken) == "INVALID_STATE"
    created = api.call("admin", "pools.create", body)
    assert created.status_code == 201
    assert created.json()["generation"] == 1 and created.json()["nodes"] == []
    assert api.call("acme", "quotas.list", {"poolId": "p2"}).json()["items"] == [
        {"tenantId": "acme", "poolId": "p2", "class": "gpu.mig", "limit": 7, "scope": "pool", "used": 0}
    ]
    assert api.call("admin", "pools.create", body).status_code == 409

    update = {"id": "p2", "policy": {"migLayout": "all-3g.40gb"}, "generation": 1}
    assert code(api.call("acme", "pools.update", update)) == "FORBIDDEN"
    changed = api.call("admin", "pools.update", update)
    assert changed.status_code == 200
    assert changed.json()["policy"]["migLayout"] == "all-3g.40gb" and changed.json()["generation"] == 2
    stale = api.call("admin", "pools.update", update)
    assert stale.status_code == 409 and code(stale) == "CONFLICT"
    assert stale.json()["error"]["details"]["generation"] == 2
    mode = api.call("admin", "pools.update", {"id": "p2", "mode": "timeslice"})
    assert mode.status_code == 400 and code(mode) == "INVALID_INPUT"
    wrong = api.call("admin", "pools.update", {"id": "p2", "policy": {"replicas": 4}})
    assert wrong.status_code == 400
    assert api.call("admin", "pools.update", {"id": "nope"}).status_code == 404
    assert api.call("admin", "pools.get", {"id": "p2"}).json()["generation"] == 2


def test_policies_create_and_list(store: Store) -> None:
    api = load(store)
    body = {"name": "two-gpus", "tenantId": "acme", "limits": {"gpuCount": 2}}
    assert code(api.call("acme", "policies.create", body)) == "FORBIDDEN"
    created = api.call("admin", "policies.create", body)
    assert created.status_code == 201
    policy = created.json()
    assert policy["id"].startswith("pol-") and policy["poolId"] is None
    assert policy["limits"] == {"gpuCount": 2, "gpuSlices": None}
    assert code(api.call("admin", "policies.create", body)) == "CONFLICT"
    api.call(
        "admin", "policies.create", {**body, "tenantId": "beta", "poolId": "p1", "limits": {"gpuSlices": 3}}
    )
    assert (
        code(api.call("admin", "policies.create", {**body, "name": "none", "limits": {}})) == "INVALID_INPUT"
    )
    assert code(api.call("admin", "policies.create", {**body, "name": "x", "poolId": "nope"})) == "NOT_FOUND"
    assert (
        code(api.call("admin", "policies.create", {**body, "name": "x", "tenantId": "nope"})) == "NOT_FOUND"
    )
    assert len(api.call("admin", "policies.list").json()["items"]) == 2
    assert [p["name"] for p in api.call("acme", "policies.list").json()["items"]] == ["two-gpus"]
    assert [p["tenantId"] for p in api.call("admin", "policies.list", {"poolId": "p1"}).json()["items"]] == [
        "beta"
    ]
    assert code(api.call("acme", "policies.list", {"tenantId": "beta"})) == "NOT_FOUND"


MALFORMED: list[Any] = [
    None,
    [],
    "text",
    17,
    {"id": None},
    {"id": "\x00", "name": "\x00"},
    {"tenantId": "\x00", "poolId": "\x00", "class": "gpu", "limit": 1},
    {"tenantId": "a" * 5000, "poolId": "p1", "class": "gpu", "limit": 2**70},
    {"name": "x" * 300, "clusterId": "\x00", "mode": "mig", "ownerTenantId": "acme", "nodes": ["\x00"]},
    {"name": "ok", "clusterId": "c1", "mode": "mig", "ownerTenantId": "acme", "nodes": ["n-1", "n-1"]},
    {
        "name": "ok",
        "clusterId": "c1",
        "mode": "timeslice",
        "ownerTenantId": "acme",
        "policy": {"replicas": 99},
    },
    {
        "name": "ok",
        "clusterId": "c1",
        "mode": "mig",
        "ownerTenantId": "acme",
        "policy": {"migLayout": "all-9g"},
    },
    {"name": "ok", "clusterId": "c1", "mode": "exclusive", "ownerTenantId": "acme", "meter": "m" * 100},
    {"id": "p1", "nodes": ["\x00"], "generation": 2**80, "policy": {"migLayout": ""}},
    {"poolId": "p1", "tenantId": "acme", "quota": {"gpu": 2**40}},
    {"name": "\x00", "tenantId": "acme", "limits": {"gpuCount": -1}},
    {"tenantId": "\x00", "name": "n\x00"},
    {"tenantId": "acme", "poolId": "\x00", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"},
    {"tenantId": "a\x00", "poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"},
    {"tenantId": "acme", "poolId": "\ud800", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"},
    {"tenantId": "\udfff", "poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"},
    {"id": "\ud800", "name": "\ud800"},
    {
        "tenantId": "acme",
        "poolId": "p1",
        "devices": [{"class": "gpu.mig", "count": 1}],
        "duration": "1h",
        "idempotencyKey": "k\x00",
    },
    {
        "tenantId": "acme",
        "poolId": "p1",
        "devices": [
            {
                "class": "gpu.mig",
                "count": 2**80,
                "selector": {
                    "matchExpressions": [{"key": "migProfile\x00", "operator": "In", "values": ["\x00"]}]
                },
            }
        ],
        "duration": "99999999d",
        "start": "\x00",
    },
]


WRITES = ["tenants.create", "credentials.create", "pools.create", "pools.update", "pools.offer"]
WRITES += ["quotas.set", "policies.create", "policies.update", "reservations.create"]


@pytest.mark.parametrize("name", WRITES)
def test_no_malformed_request_is_a_server_error(store: Store, name: str) -> None:
    api = load(store, nodes=2)
    method = METHODS[name]
    path = method.path.replace("{id}", "p1").replace("{poolId}", "p1")
    admin = bearer(api.tokens["admin"])
    for body in MALFORMED:
        # Encoded here: JSON escapes a lone surrogate (`\\ud800`), which no UTF-8 encoder will write.
        raw = json.dumps(body).encode()
        response = api.client.request(
            method.verb, path, content=raw, headers={**admin, "Content-Type": "application/json"}
        )
        assert response.status_code < 500, (body, response.text)
        if response.status_code >= 400:
            assert code(response) in ("INVALID_INPUT", "NOT_FOUND", "CONFLICT", "INVALID_STATE"), body
    garbage = api.client.request(
        method.verb, path, content=b"{not json", headers={**admin, "Content-Type": "application/json"}
    )
    assert garbage.status_code == 400 and code(garbage) == "INVALID_INPUT"


@pytest.mark.parametrize(
    "query",
    [
        pytest.param("/v1/pools/%00", id="a NUL in a pool id"),
        pytest.param("/v1/quotas?tenantId=%00", id="a NUL in the tenant filter"),
        pytest.param("/v1/atoms?pool=%00", id="a NUL in the pool filter"),
        pytest.param("/v1/tenants?limit=0", id="a page of zero"),
    ],
)
def test_malformed_queries_are_invalid_input(store: Store, query: str) -> None:
    api = load(store)
    response = api.client.get(query, headers=bearer(api.tokens["acme"]))
    assert response.status_code == 400 and code(response) == "INVALID_INPUT"
