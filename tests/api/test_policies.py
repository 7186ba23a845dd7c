"""Policies through the real app: limits, placement constraints or both, attached to a subject
(docs/concepts.md#placement-constraints)."""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.domain.placement.workloads import Workload, WorkloadSpec
from better_compute.storage.store import Store
from tests.api.test_tenancy import Api, code, load
from tests.builders import T0, bearer

US_ONLY = {
    "name": "us-only",
    "allowed_regions": ["us-east", "us-west"],
    "subject_type": "workload",
    "subject_id": "wkl-01hq0v",
    "tenant_id": "acme",
}


def loaded(store: Store) -> Api:
    """The tenancy fleet, with acme's workload `wkl-01hq0v` that the seed's example names."""
    api = load(store)
    spec = WorkloadSpec(
        name="web", tenant_id="acme", device_class="h100-80gb-sxm", device_count=1, replicas=0
    )
    with store.begin() as tx:
        assert tx.workloads.add(Workload("wkl-01hq0v", spec, 1, T0))
    return api


def create(api: Api, body: dict[str, Any], who: str = "admin") -> Any:
    return api.call(who, "policies.create", body)


def test_a_policy_in_the_seeds_snake_case_is_created_and_answered_in_camel_case(store: Store) -> None:
    api = loaded(store)
    made = create(api, US_ONLY)
    assert made.status_code == 201, made.text
    policy = made.json()
    assert {k: policy[k] for k in ("name", "tenantId", "poolId", "subjectType", "subjectId")} == {
        "name": "us-only",
        "tenantId": "acme",
        "poolId": None,
        "subjectType": "workload",
        "subjectId": "wkl-01hq0v",
    }
    assert policy["allowedRegions"] == ["us-east", "us-west"] and policy["deniedClusters"] == []
    assert policy["limits"] == {"gpuCount": None, "gpuSlices": None}
    assert (policy["costCeiling"], policy["generation"]) == (None, 1)
    camel = create(
        api,
        {
            "name": "eu-data",
            "tenantId": "acme",
            "allowedResidencies": ["eu"],
            "allowedDeviceClasses": ["h100-80gb-sxm"],
            "costCeiling": "12.50",
            "limits": {"gpuCount": 4},
        },
    )
    assert camel.status_code == 201, camel.text
    both = camel.json()
    assert (both["subjectType"], both["subjectId"], both["costCeiling"]) == ("tenant", "acme", "12.50")
    assert both["allowedResidencies"] == ["eu"] and both["limits"]["gpuCount"] == 4
    assert code(create(api, US_ONLY)) == "CONFLICT"


def test_policies_are_listed_by_subject_as_the_seed_writes_it(store: Store) -> None:
    api = loaded(store)
    workload = create(api, US_ONLY).json()
    create(api, {"name": "two-gpus", "tenantId": "acme", "limits": {"gpuCount": 2}})
    fenced = create(
        api, {"name": "no-c1", "subjectType": "cluster", "subjectId": "c1", "deniedClusters": ["c1"]}
    )
    assert fenced.status_code == 201, fenced.text
    assert fenced.json()["tenantId"] is None
    seed = api.client.get(
        "/v1/policies?subject_type=workload&subject=wkl-01hq0v", headers=bearer(api.tokens["admin"])
    )
    assert seed.status_code == 200, seed.text
    assert [p["id"] for p in seed.json()["items"]] == [workload["id"]]
    camel = api.call("admin", "policies.list", {"subjectType": "workload", "subject": "wkl-01hq0v"})
    assert [p["id"] for p in camel.json()["items"]] == [workload["id"]]
    names = lambda r: sorted(p["name"] for p in r.json()["items"])  # noqa: E731
    assert names(api.call("admin", "policies.list", {"subjectType": "cluster"})) == ["no-c1"]
    assert names(api.call("admin", "policies.list", {"tenantId": "acme"})) == ["two-gpus", "us-only"]
    # A tenant lists its own policies and the clusters' (which apply to it too), never another's.
    assert names(api.call("acme", "policies.list")) == ["no-c1", "two-gpus", "us-only"]
    assert names(api.call("beta", "policies.list")) == ["no-c1"]
    bad = api.call("admin", "policies.list", {"subjectType": "pod"})
    assert bad.status_code == 400 and code(bad) == "INVALID_INPUT"


def test_get_a_policy_a_tenant_reads_its_own_and_the_clusters(store: Store) -> None:
    api = loaded(store)
    mine = create(api, US_ONLY).json()
    fenced = create(
        api, {"name": "eu", "subjectType": "cluster", "subjectId": "c1", "allowedRegions": ["r1"]}
    ).json()
    theirs = create(api, {"name": "b", "tenantId": "beta", "allowedClusters": ["c1"]}).json()
    assert api.call("admin", "policies.get", {"id": theirs["id"]}).json()["name"] == "b"
    assert api.call("acme", "policies.get", {"id": mine["id"]}).json() == mine
    assert api.call("acme", "policies.get", {"id": fenced["id"]}).json() == fenced
    hidden = api.call("acme", "policies.get", {"id": theirs["id"]})
    missing = api.call("acme", "policies.get", {"id": "pol-nope"})
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"]["message"] == f"policy {theirs['id']} not found"


def test_update_replaces_limits_and_constraints_with_a_generation(store: Store) -> None:
    api = loaded(store)
    made = create(
        api, {"name": "p", "tenantId": "acme", "limits": {"gpuCount": 2}, "allowedRegions": ["r1"]}
    ).json()
    pid = made["id"]
    assert code(api.call("acme", "policies.update", {"id": pid, "allowedRegions": ["r2"]})) == "FORBIDDEN"
    changed = api.call("admin", "policies.update", {"id": pid, "allowed_regions": ["r2"], "generation": 1})
    assert changed.status_code == 200, changed.text
    assert changed.json()["allowedRegions"] == ["r2"] and changed.json()["generation"] == 2
    assert changed.json()["limits"]["gpuCount"] == 2
    stale = api.call("admin", "policies.update", {"id": pid, "deniedClusters": ["c2"], "generation": 1})
    assert stale.status_code == 409 and code(stale) == "CONFLICT"
    assert stale.json()["error"]["details"]["reason"] == "generation_mismatch"
    assert stale.json()["error"]["details"]["current"] == 2
    no_limits = api.call("admin", "policies.update", {"id": pid, "limits": None})
    assert no_limits.json()["limits"] == {"gpuCount": None, "gpuSlices": None}
    assert no_limits.json()["generation"] == 3
    empty = api.call("admin", "policies.update", {"id": pid, "allowedRegions": []})
    assert empty.status_code == 400 and code(empty) == "INVALID_INPUT"
    assert empty.json()["error"]["message"].startswith("a policy must set limits")
    renamed = api.call("admin", "policies.update", {"id": pid, "name": "q"})
    assert renamed.status_code == 400 and code(renamed) == "INVALID_INPUT"
    assert (
        code(api.call("admin", "policies.update", {"id": "pol-nope", "allowedRegions": ["r1"]}))
        == "NOT_FOUND"
    )
    assert api.call("admin", "policies.get", {"id": pid}).json()["generation"] == 3
    events = api.call("admin", "events.list", {"type": "policy.updated"}).json()["items"]
    assert [e["payload"]["generation"] for e in events] == [2, 3]


def test_subjects_must_exist_and_names_stay_unique_per_cluster(store: Store) -> None:
    api = loaded(store)
    ghost = create(
        api, {"name": "x", "subjectType": "cluster", "subjectId": "nope", "allowedRegions": ["r1"]}
    )
    assert ghost.status_code == 404 and code(ghost) == "NOT_FOUND"
    assert ghost.json()["error"]["message"] == "cluster nope not found"
    body = {"name": "x", "subjectType": "cluster", "subjectId": "c1", "deniedClusters": ["c2"]}
    assert create(api, body).status_code == 201
    again = create(api, body)
    assert (
        again.status_code == 409
        and again.json()["error"]["message"] == "cluster c1 already has a policy named x"
    )
    assert code(create(api, {"name": "x", "tenantId": "nope", "allowedRegions": ["r1"]})) == "NOT_FOUND"
    tenant_again = create(api, {"name": "x", "subjectId": "nope", "allowedRegions": ["r1"]})
    assert code(tenant_again) == "NOT_FOUND"
    no_workload = create(api, {**US_ONLY, "subject_id": "wkl-nope"})
    assert (
        no_workload.status_code == 404
        and no_workload.json()["error"]["message"] == "workload wkl-nope not found"
    )
    theirs = create(api, {**US_ONLY, "tenant_id": "beta"})
    assert code(theirs) == "NOT_FOUND"


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        pytest.param({"allowedRegions": ["r"] * 65}, "allowedRegions", id="too many regions"),
        pytest.param({"allowed_clusters": ["c1", "c" * 65]}, "allowedClusters[1]", id="a long cluster id"),
        pytest.param({"deniedClusters": ["c\x00"]}, "deniedClusters[0]", id="a NUL"),
        pytest.param({"allowedDeviceClasses": ["H100 SXM"]}, "allowedDeviceClasses[0]", id="a bad class"),
        pytest.param({"allowedResidencies": [""]}, "allowedResidencies[0]", id="an empty label"),
        pytest.param({"costCeiling": "cheap"}, "costCeiling", id="a ceiling that is no decimal"),
        pytest.param({"subjectType": "cluster", "subjectId": "c1"}, "tenantId", id="a cluster with a tenant"),
        pytest.param({}, "limits", id="neither limits nor constraints"),
    ],
)
def test_bad_policies_are_refused_naming_the_field(store: Store, extra: dict[str, Any], field: str) -> None:
    api = loaded(store)
    refused = create(api, {"name": "bad", "tenantId": "acme", **extra})
    assert refused.status_code == 400 and code(refused) == "INVALID_INPUT", refused.text
    assert refused.json()["error"]["details"]["field"] == field


def test_a_constraints_only_policy_limits_no_reservation(store: Store) -> None:
    api = loaded(store)
    offered = api.call("admin", "pools.offer", {"poolId": "p1", "tenantId": "acme", "quota": {"gpu.mig": 8}})
    assert offered.status_code == 200, offered.text
    assert create(api, {"name": "nowhere", "tenantId": "acme", "allowedRegions": ["mars"]}).status_code == 201
    assert create(api, {**US_ONLY, "name": "w"}).status_code == 201
    body = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 3}], "duration": "1h"}
    reserved = api.call("acme", "reservations.create", body)
    assert reserved.status_code == 201, reserved.text
    assert create(api, {"name": "small", "tenantId": "acme", "limits": {"gpuSlices": 1}}).status_code == 201
    limited = api.call("acme", "reservations.create", {**body, "start": "2026-12-02T09:00:00Z"})
    assert limited.status_code == 403 and limited.json()["error"]["details"]["policy"] == "small"
