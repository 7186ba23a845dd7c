"""`pools.previewLayout` through the real app, on SQLite and PostgreSQL: what a new MIG layout would do,
node by node, who may ask, and that asking writes nothing."""

from __future__ import annotations

from typing import Any

from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.ledger import partition_allocation_id
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.ledger import ledger
from better_compute.storage.store import Store
from better_compute.wire.methods import METHODS
from tests.builders import T0, admin_token, api_client, at, bearer, stored_events, tenant_token

MIXED = "mixed:3g.40gb+2x2g.20gb"


def fleet() -> dict[str, object]:
    """Pool p1 (mig, all-1g.10gb, owner platform) over n-1 and n-2 (2x H100-80GB each; n-2 keeps its
    own layout) and pool px (exclusive) over x."""
    h100 = {"model": "H100-80GB", "count": 2}
    return {
        "tenants": [{"id": "platform"}, {"id": "acme"}, {"id": "beta"}],
        "clusters": [
            {
                "name": "c1",
                "region": "r1",
                "nodes": [
                    {"name": "n-1", "gpus": h100},
                    {"name": "n-2", "gpus": h100, "carriesPoolLayout": False},
                    {"name": "x", "gpus": {"model": "H100-80GB", "count": 1}},
                ],
            }
        ],
        "pools": [
            {
                "name": "p1",
                "cluster": "c1",
                "mode": "mig",
                "owner": "platform",
                "policy": {"migLayout": "all-1g.10gb"},
                "nodes": ["n-1", "n-2"],
            },
            {"name": "px", "cluster": "c1", "mode": "exclusive", "owner": "platform", "nodes": ["x"]},
        ],
    }


class Api:
    def __init__(self, store: Store) -> None:
        load_fleet(store, parse_fleet(fleet()), T0)
        self.store = store
        self.client = api_client(store)
        self.tokens = {"admin": admin_token(store)}
        for tenant in ("platform", "acme", "beta"):
            self.tokens[tenant] = tenant_token(store, tenant)

    def call(self, who: str, name: str, body: dict[str, Any]) -> Any:
        http = METHODS[name].render(body)
        return self.client.request(
            http.verb, http.path, params=http.query, json=http.json, headers=bearer(self.tokens[who])
        )

    def preview(self, who: str = "admin", layout: str = MIXED, pool: str = "p1") -> Any:
        return self.call(who, "pools.previewLayout", {"id": pool, "migLayout": layout})

    def atoms(self, node: str) -> list[dict[str, Any]]:
        found = self.call("admin", "atoms.list", {"pool": "p1", "class": "gpu.mig", "limit": 1000})
        return [a for a in found.json()["items"] if a["node"] == node]


def test_each_node_says_when_it_could_be_granted_who_holds_it_and_what_changes(store: Store) -> None:
    api = Api(store)
    n1, n2 = api.atoms("n-1"), api.atoms("n-2")
    ledger.book(store, [n1[0]["id"]], Window(T0, at(3)), "rsv-a", "acme", T0)
    ledger.book(store, [n1[1]["id"]], Window(at(1), at(5)), "rsv-b", "beta", T0)
    ledger.book(store, [n2[0]["id"]], Window(T0), "rsv-c", "acme", T0)
    gpu = n1[0]["gpuId"]
    assert ledger.book_partition_change(store, gpu, Window(at(6)), T0).status == "booked"

    answer = api.preview()
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["poolId"], body["from"], body["to"]) == ("p1", "all-1g.10gb", MIXED)
    first, second = body["nodes"]
    assert first["node"] == "n-1" and first["carriesPoolLayout"]
    assert first["grantableAt"] == "2026-12-01T14:00:00Z" and not first["heldOpenEnded"]
    assert first["heldBy"] == [
        {"allocationId": "rsv-a", "tenantId": "acme", "endsAt": "2026-12-01T12:00:00Z"},
        {"allocationId": "rsv-b", "tenantId": "beta", "endsAt": "2026-12-01T14:00:00Z"},
    ]
    assert first["changeHolds"] == [
        {
            "allocationId": partition_allocation_id(gpu, at(6)),
            "gpuId": gpu,
            "startsAt": "2026-12-01T15:00:00Z",
            "endsAt": None,
        }
    ]
    assert sorted(first["disappear"]) == sorted(a["id"] for a in n1)
    assert sorted((i["migProfile"], i["placementStart"]) for i in first["appear"]) == sorted(
        [("3g.40gb", 4), ("2g.20gb", 0), ("2g.20gb", 2)] * 2
    )
    assert first["capacity"] == {
        "before": {"3g.40gb": 0, "2g.20gb": 0, "1g.10gb": 14},
        "after": {"3g.40gb": 2, "2g.20gb": 4, "1g.10gb": 0},
    }
    assert second["node"] == "n-2" and not second["carriesPoolLayout"]
    assert second["grantableAt"] is None and second["heldOpenEnded"]
    assert second["heldBy"] == [{"allocationId": "rsv-c", "tenantId": "acme", "endsAt": None}]
    assert second["disappear"] == [] and second["appear"] == []
    assert second["capacity"] == {"before": {"1g.10gb": 14}, "after": {"1g.10gb": 14}}
    assert body["capacity"] == {
        "before": {"3g.40gb": 0, "2g.20gb": 0, "1g.10gb": 28},
        "after": {"3g.40gb": 2, "2g.20gb": 4, "1g.10gb": 14},
    }


def test_an_idle_node_is_grantable_at_the_moment_of_the_preview(store: Store) -> None:
    body = Api(store).preview().json()
    assert (
        [n["grantableAt"] for n in body["nodes"]] == [body["at"], body["at"]] == ["2026-12-01T09:00:00Z"] * 2
    )
    assert all(n["heldBy"] == [] and n["changeHolds"] == [] for n in body["nodes"])


def test_a_preview_writes_nothing(store: Store) -> None:
    api = Api(store)
    events = stored_events(store)
    pool = api.call("admin", "pools.get", {"id": "p1"}).json()
    atoms = api.atoms("n-1")
    assert api.preview().status_code == 200
    assert api.preview("platform", "all-disabled").status_code == 200
    assert stored_events(store) == events
    assert api.call("admin", "pools.get", {"id": "p1"}).json() == pool
    assert api.atoms("n-1") == atoms
    assert METHODS["pools.previewLayout"].retry_safe({"id": "p1"})


def test_the_owner_may_preview_a_tenant_with_quota_is_forbidden_any_other_sees_no_pool(store: Store) -> None:
    api = Api(store)
    offered = api.call("admin", "pools.offer", {"poolId": "p1", "tenantId": "acme", "quota": {"gpu.mig": 2}})
    assert offered.status_code == 200
    assert api.preview("platform").status_code == 200
    forbidden = api.preview("acme")
    assert forbidden.status_code == 403 and forbidden.json()["error"]["code"] == "FORBIDDEN"
    hidden, missing = api.preview("beta"), api.preview("beta", pool="nope")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"]["message"] == "pool p1 not found"
    assert missing.json()["error"]["message"] == "pool nope not found"


def test_a_layout_that_does_not_fit_is_refused_as_pools_update_refuses_it(store: Store) -> None:
    api = Api(store)
    for layout in ("mixed:3x3g.40gb", "all-9g.99gb", "sideways"):
        refused = api.preview(layout=layout)
        updated = api.call("admin", "pools.update", {"id": "p1", "policy": {"migLayout": layout}})
        assert refused.status_code == updated.status_code == 400, layout
        assert refused.json()["error"]["code"] == "INVALID_INPUT"
        assert refused.json()["error"] == updated.json()["error"], layout


def test_a_pool_that_is_not_mig_has_no_layout_to_preview(store: Store) -> None:
    refused = Api(store).preview(pool="px", layout="all-1g.10gb")
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "INVALID_STATE"
    assert (
        error["message"]
        == "pool px shares its GPUs as exclusive; only mig pools have a MIG layout to preview"
    )


def test_a_node_frozen_by_a_layout_change_shows_the_layout_it_is_told_and_the_change_state(
    store: Store,
) -> None:
    api = Api(store)
    before = api.preview().json()["nodes"]
    assert [(n["layout"], n["changeState"]) for n in before] == [("all-1g.10gb", None)] * 2
    changed = api.call("admin", "pools.update", {"id": "p1", "policy": {"migLayout": MIXED}})
    assert changed.status_code == 200, changed.text
    body = api.preview(layout="all-3g.40gb").json()
    assert (body["from"], body["to"]) == (MIXED, "all-3g.40gb")
    frozen = {n["node"]: (n["layout"], n["changeState"]) for n in body["nodes"]}
    assert frozen["n-1"] == ("all-1g.10gb", "pending")
