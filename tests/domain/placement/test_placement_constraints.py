"""Placement constraints: a cluster must pass every constraint of every policy that applies."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from better_compute.domain.fleet.records import Cluster
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.placement.constraints import (
    MAX_ITEMS,
    Constraints,
    applicable,
    deny,
    parse_constraints,
)
from better_compute.domain.tenancy.iam import Policy, parse_policy, updated
from tests.builders import T0

FRA = Cluster("fra-1", "eu-central", ("eu", "de"), "active", T0)
IAD = Cluster("iad-1", "us-east", ("us",), "active", T0)
BARE = Cluster("bare-1", "us-west", (), "active", T0)


def policy(name: str, pid: str = "", **constraints: Any) -> Policy:
    return Policy(name, "acme", id=pid or f"pol-{name}", constraints=Constraints(**constraints))


def test_deny_allowed_regions_names_the_policy_the_regions_and_the_clusters_region() -> None:
    us_only = policy("us-only", allowed_regions=("us-east", "us-west"))
    denial = deny([us_only], FRA, "h100")
    assert denial is not None
    assert (denial.policy_id, denial.policy_name, denial.constraint) == (
        "pol-us-only",
        "us-only",
        "allowedRegions",
    )
    assert denial.message == "policy us-only allows regions us-east, us-west; cluster fra-1 is in eu-central"
    assert deny([us_only], IAD, "h100") is None


def test_deny_denied_clusters() -> None:
    no_fra = policy("no-fra", denied_clusters=("fra-1",))
    denial = deny([no_fra], FRA, "h100")
    assert denial is not None and denial.constraint == "deniedClusters"
    assert denial.message == "policy no-fra denies cluster fra-1"
    assert deny([no_fra], IAD, "h100") is None


def test_deny_allowed_clusters() -> None:
    only_iad = policy("only-iad", allowed_clusters=("iad-1",))
    denial = deny([only_iad], FRA, "h100")
    assert denial is not None and denial.constraint == "allowedClusters"
    assert denial.message == "policy only-iad allows clusters iad-1; cluster fra-1 is not one of them"
    assert deny([only_iad], IAD, "h100") is None


def test_deny_allowed_residencies_needs_one_label_in_common() -> None:
    eu = policy("eu-data", allowed_residencies=("eu", "ch"))
    assert deny([eu], FRA, "h100") is None
    denial = deny([eu], IAD, "h100")
    assert denial is not None and denial.constraint == "allowedResidencies"
    assert denial.message == "policy eu-data allows residencies eu, ch; cluster iad-1 has residency us"
    bare = deny([eu], BARE, "h100")
    assert bare is not None and bare.message.endswith("cluster bare-1 has no residency label")


def test_deny_allowed_device_classes() -> None:
    h100 = policy("h100-only", allowed_device_classes=("h100-80gb-sxm",))
    assert deny([h100], FRA, "h100-80gb-sxm") is None
    denial = deny([h100], FRA, "a100-40gb")
    assert denial is not None and denial.constraint == "allowedDeviceClasses"
    assert (
        denial.message
        == "policy h100-only allows device classes h100-80gb-sxm; this placement asks for a100-40gb"
    )


def test_the_deny_list_wins_over_the_allow_list_within_a_policy() -> None:
    both = policy("both", allowed_clusters=("fra-1",), denied_clusters=("fra-1",))
    denial = deny([both], FRA, "h100")
    assert denial is not None and denial.constraint == "deniedClusters"


def test_a_policy_without_constraints_denies_nothing() -> None:
    assert deny([Policy("limits-only", "acme", gpu_count=2, id="pol-1")], FRA, "h100") is None
    assert Constraints().is_empty() and not Constraints(cost_ceiling="1").is_empty()
    # A cost ceiling is recorded, not enforced.
    assert deny([policy("cheap", cost_ceiling="0.01")], FRA, "h100") is None


def test_policies_are_cumulative_a_tenant_and_a_workload_policy_both_apply() -> None:
    tenant = Policy("eu-only", "acme", id="pol-t", constraints=Constraints(allowed_residencies=("eu",)))
    workload = Policy(
        "train-placement",
        "acme",
        id="pol-w",
        constraints=Constraints(denied_clusters=("fra-1",)),
        subject_type="workload",
        subject_id="wkl-1",
    )
    fenced = Policy(
        "fra-h100",
        None,
        id="pol-c",
        constraints=Constraints(allowed_device_classes=("h100",)),
        subject_type="cluster",
        subject_id="fra-1",
    )
    others = [
        Policy("globex", "globex", id="pol-g", constraints=Constraints(allowed_regions=("x",))),
        Policy(
            "endpoint",
            "acme",
            id="pol-e",
            constraints=Constraints(allowed_regions=("x",)),
            subject_type="endpoint",
            subject_id="wkl-1",
        ),
        Policy("other-cluster", None, id="pol-o", subject_type="cluster", subject_id="iad-1"),
    ]
    every = [*others, fenced, workload, tenant]
    found = applicable(every, tenant_id="acme", workload_id="wkl-1", cluster_id="fra-1")
    assert {p.id for p in found} == {"pol-t", "pol-w", "pol-c"}
    # fra-1 passes the tenant's policy (eu) and the cluster's (h100), not the workload's.
    denial = deny(found, FRA, "h100")
    assert denial is not None and denial.policy_name == "train-placement"
    # Without the workload's policy it passes; IAD fails the tenant's.
    without = applicable(every, tenant_id="acme", workload_id=None, cluster_id="fra-1")
    assert {p.id for p in without} == {"pol-t", "pol-c"} and deny(without, FRA, "h100") is None
    iad = applicable(every, tenant_id="acme", workload_id="wkl-1", cluster_id="iad-1")
    assert {p.id for p in iad} == {"pol-t", "pol-w", "pol-o"}
    refused = deny(iad, IAD, "h100")
    assert refused is not None and refused.policy_name == "eu-only"


def test_deny_names_the_first_policy_by_name_then_id_whatever_the_order_given() -> None:
    a = policy("a", "pol-2", allowed_regions=("x",))
    a_again = policy("a", "pol-1", allowed_regions=("y",))
    b = policy("b", "pol-0", allowed_regions=("z",))
    for order in ([a, a_again, b], [b, a, a_again], [a_again, b, a]):
        denial = deny(order, FRA, "h100")
        assert denial is not None and denial.policy_id == "pol-1"


names = st.lists(
    st.sampled_from(["us-east", "us-west", "eu-central", "fra-1", "iad-1", "eu", "us"]), max_size=3
)


@given(
    names, names, names, names, names, st.sampled_from([FRA, IAD, BARE]), st.sampled_from(["h100", "a100"])
)
def test_a_cluster_passes_exactly_when_it_meets_every_non_empty_constraint(
    regions: list[str],
    residencies: list[str],
    clusters: list[str],
    denied: list[str],
    classes: list[str],
    cluster: Cluster,
    device_class: str,
) -> None:
    c = Constraints(tuple(regions), tuple(residencies), tuple(classes), tuple(clusters), tuple(denied))
    passes = (
        cluster.id not in denied
        and (not clusters or cluster.id in clusters)
        and (not regions or cluster.region in regions)
        and (not residencies or bool(set(cluster.residency) & set(residencies)))
        and (not classes or device_class in classes)
    )
    one = Policy("p", "acme", id="pol-p", constraints=c)
    assert (deny([one], cluster, device_class) is None) == passes
    # Adding a policy never lets through a cluster that was refused (cumulative).
    other = Policy("q", "acme", id="pol-q", constraints=Constraints(allowed_regions=("us-east",)))
    if not passes:
        assert deny([one, other], cluster, device_class) is not None


def test_parse_policy_reads_subjects_and_constraints() -> None:
    seeded = parse_policy(
        {
            "name": "us-only",
            "allowedRegions": ["us-east", "us-west", "us-east"],
            "subjectType": "workload",
            "subjectId": "wkl-01",
            "tenantId": "acme",
        }
    )
    assert (seeded.tenant_id, seeded.subject_type, seeded.subject_id) == ("acme", "workload", "wkl-01")
    assert seeded.constraints.allowed_regions == ("us-east", "us-west") and seeded.limits() == {}
    cluster = parse_policy(
        {
            "name": "c",
            "subjectType": "cluster",
            "subjectId": "fra-1",
            "deniedClusters": [],
            "costCeiling": "12.50",
        }
    )
    assert (cluster.tenant_id, cluster.subject_id, cluster.constraints.cost_ceiling) == (
        None,
        "fra-1",
        "12.50",
    )
    old_style = parse_policy({"name": "two", "tenantId": "acme", "limits": {"gpuCount": 2}})
    assert (old_style.subject_type, old_style.subject_id) == ("tenant", "acme")
    assert parse_policy({"name": "t", "subjectId": "acme", "allowedClusters": ["c1"]}).tenant_id == "acme"


@pytest.mark.parametrize(
    ("raw", "field", "message"),
    [
        pytest.param(
            {"tenantId": "a"},
            "limits",
            "a policy must set limits (gpuCount, gpuSlices), placement",
            id="nothing set",
        ),
        pytest.param(
            {"tenantId": "a", "costCeiling": "-1"},
            "costCeiling",
            "must not be negative",
            id="a negative ceiling",
        ),
        pytest.param(
            {"tenantId": "a", "costCeiling": 1.5}, "costCeiling", "decimal string", id="a float ceiling"
        ),
        pytest.param(
            {"tenantId": "a", "allowedRegions": "us-east"},
            "allowedRegions",
            "must be a list",
            id="a string for a list",
        ),
        pytest.param(
            {"tenantId": "a", "allowedRegions": ["r"] * (MAX_ITEMS + 1)},
            "allowedRegions",
            "at most 64",
            id="too many",
        ),
        pytest.param(
            {"tenantId": "a", "allowedRegions": ["ok", ""]},
            "allowedRegions[1]",
            "non-empty",
            id="an empty name",
        ),
        pytest.param(
            {"tenantId": "a", "allowedRegions": ["x" * 65]},
            "allowedRegions[0]",
            "at most 64",
            id="a long name",
        ),
        pytest.param(
            {"tenantId": "a", "deniedClusters": ["c\x00"]},
            "deniedClusters[0]",
            "must not contain",
            id="a NUL",
        ),
        pytest.param(
            {"tenantId": "a", "allowedClusters": ["c" * 65]},
            "allowedClusters[0]",
            "at most 64",
            id="a long cluster id",
        ),
        pytest.param(
            {"tenantId": "a", "allowedDeviceClasses": ["H100"]},
            "allowedDeviceClasses[0]",
            "lowercase",
            id="a bad class name",
        ),
        pytest.param(
            {"subjectType": "pod", "tenantId": "a", "allowedRegions": ["r"]},
            "subjectType",
            "tenant, endpoint, workload or cluster",
            id="an unknown subject type",
        ),
        pytest.param(
            {"subjectType": "workload", "tenantId": "a", "allowedRegions": ["r"]},
            "subjectId",
            "must name the workload",
            id="a workload without its id",
        ),
        pytest.param(
            {"subjectType": "workload", "subjectId": "w", "allowedRegions": ["r"]},
            "tenantId",
            "tenant of workload w",
            id="a workload without its tenant",
        ),
        pytest.param(
            {"subjectType": "cluster", "subjectId": "c", "tenantId": "a", "allowedRegions": ["r"]},
            "tenantId",
            "belongs to no tenant",
            id="a cluster with a tenant",
        ),
        pytest.param(
            {"subjectType": "cluster", "subjectId": "c", "limits": {"gpuCount": 1}},
            "limits",
            "limits cap a tenant's reservations",
            id="limits on a cluster",
        ),
        pytest.param(
            {
                "subjectType": "workload",
                "subjectId": "w",
                "tenantId": "a",
                "poolId": "p",
                "allowedRegions": ["r"],
            },
            "poolId",
            "scopes a tenant's limits",
            id="a pool on a workload",
        ),
        pytest.param(
            {"subjectId": "b", "tenantId": "a", "allowedRegions": ["r"]},
            "subjectId",
            "subjectId names tenant b but tenantId names a",
            id="two tenants",
        ),
        pytest.param(
            {"subjectType": "workload", "subjectId": "w" * 65, "tenantId": "a", "allowedRegions": ["r"]},
            "subjectId",
            "at most 64",
            id="a long subject",
        ),
    ],
)
def test_parse_policy_refuses_with_the_field(raw: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_policy({"name": "n", **raw})
    assert err.value.details["field"] == field
    assert message in err.value.message


def test_parse_constraints_keeps_the_ceiling_as_written() -> None:
    assert parse_constraints({"costCeiling": "12.500"}).cost_ceiling == "12.500"
    assert parse_constraints({}) == Constraints()


def test_updated_replaces_what_is_given_and_keeps_the_rest() -> None:
    old = parse_policy(
        {
            "name": "n",
            "tenantId": "a",
            "limits": {"gpuCount": 2},
            "allowedRegions": ["us"],
            "deniedClusters": ["c"],
        }
    )
    new = updated(old, {"allowedRegions": ["eu"], "deniedClusters": None})
    assert new.constraints == Constraints(allowed_regions=("eu",)) and new.gpu_count == 2
    assert updated(old, {"limits": None}).limits() == {}
    with pytest.raises(InvalidInput, match="a policy must set limits") as err:
        updated(old, {"limits": None, "allowedRegions": [], "deniedClusters": []})
    assert err.value.details["field"] == "limits"
    with pytest.raises(InvalidInput, match="fixed"):
        updated(old, {"name": "other"})
