"""IAM policies: gpuCount counts whole GPUs, gpuSlices fractions; every applicable policy must pass."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from better_compute.domain.kernel.errors import Forbidden, InvalidInput
from better_compute.domain.tenancy.iam import Policy, check_policies, parse_policy, reservation_counts


def test_parse_policy() -> None:
    assert parse_policy({"name": "small", "tenantId": "acme", "limits": {"gpuCount": 2}}) == Policy(
        "small", "acme", None, 2, None
    )
    assert parse_policy(
        {"name": "p", "tenantId": "acme", "poolId": "pool-1", "limits": {"gpuSlices": 0, "gpuCount": 1}}
    ) == Policy("p", "acme", "pool-1", 1, 0)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        pytest.param("x", "policy", id="a policy that is not an object"),
        pytest.param({"tenantId": "a", "limits": {"gpuCount": 1}}, "name", id="a policy without a name"),
        pytest.param({"name": " ", "tenantId": "a", "limits": {"gpuCount": 1}}, "name", id="a blank name"),
        pytest.param({"name": "n", "limits": {"gpuCount": 1}}, "tenantId", id="a policy without a tenant"),
        pytest.param(
            {"name": "n", "tenantId": "a", "poolId": 3, "limits": {"gpuCount": 1}},
            "poolId",
            id="a pool id that is not a string",
        ),
        pytest.param({"name": "n", "tenantId": "a"}, "limits", id="a policy without limits"),
        pytest.param(
            {"name": "n", "tenantId": "a", "limits": {}}, "limits", id="limits with no limit in them"
        ),
        pytest.param(
            {"name": "n", "tenantId": "a", "limits": {"gpuCount": None}},
            "limits",
            id="a limit without a number",
        ),
        pytest.param(
            {"name": "n", "tenantId": "a", "limits": {"gpuCount": -1}},
            "limits.gpuCount",
            id="a negative limit",
        ),
        pytest.param(
            {"name": "n", "tenantId": "a", "limits": {"gpuSlices": 1.5}},
            "limits.gpuSlices",
            id="a fraction of a slice",
        ),
        pytest.param(
            {"name": "n", "tenantId": "a", "limits": {"gpuSlices": True}},
            "limits.gpuSlices",
            id="a boolean for a number",
        ),
        pytest.param(
            {"name": "n", "tenantId": "a", "limits": {"gpus": 1}},
            "limits.gpus",
            id="a limit that does not exist",
        ),
        pytest.param(
            {"name": "n", "tenantId": "a", "limits": {"gpuCount": 1}, "extra": 1},
            "extra",
            id="a misspelt field",
        ),
    ],
)
def test_parse_policy_refuses(raw: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_policy(raw)
    assert err.value.details["field"] == field


def test_gpu_count_does_not_count_slices() -> None:
    policy = Policy("two-gpus", "acme", gpu_count=2)
    check_policies([policy], "p1", gpu_count=2, gpu_slices=7)
    with pytest.raises(Forbidden) as err:
        check_policies([policy], "p1", gpu_count=3, gpu_slices=0)
    assert err.value.details == {"policy": "two-gpus", "limit": 2, "requested": 3, "key": "gpuCount"}
    assert "policy two-gpus limits gpuCount to 2" in err.value.message


def test_gpu_slices_does_not_count_whole_gpus() -> None:
    policy = Policy("few-slices", "acme", gpu_slices=1)
    check_policies([policy], "p1", gpu_count=8, gpu_slices=1)
    with pytest.raises(Forbidden) as err:
        check_policies([policy], "p1", gpu_count=0, gpu_slices=2)
    assert err.value.details == {"policy": "few-slices", "limit": 1, "requested": 2, "key": "gpuSlices"}


def test_policies_are_cumulative_and_scoped_to_a_pool() -> None:
    everywhere = Policy("a-everywhere", "acme", gpu_count=4)
    in_p2 = Policy("b-in-p2", "acme", pool_id="p2", gpu_count=1)
    check_policies([everywhere, in_p2], "p1", gpu_count=4, gpu_slices=0)
    with pytest.raises(Forbidden, match="b-in-p2"):
        check_policies([everywhere, in_p2], "p2", gpu_count=2, gpu_slices=0)
    with pytest.raises(Forbidden, match="a-everywhere"):
        check_policies([in_p2, everywhere], "p2", gpu_count=5, gpu_slices=0)


def test_policies_of_another_tenant_are_skipped_when_the_tenant_is_named() -> None:
    theirs = Policy("theirs", "globex", gpu_count=0)
    check_policies([theirs], "p1", 1, 0, tenant_id="acme")
    with pytest.raises(Forbidden):
        check_policies([theirs], "p1", 1, 0)


def test_reservation_counts() -> None:
    assert reservation_counts({"gpu": 2, "gpu.mig": 3, "gpu.slot": 1}) == (2, 4)
    assert reservation_counts({}) == (0, 0)


@given(st.integers(0, 10), st.integers(0, 10), st.integers(0, 10), st.integers(0, 10))
def test_each_limit_sees_only_its_own_count(
    count_limit: int, slice_limit: int, count: int, slices: int
) -> None:
    policy = Policy("p", "t", gpu_count=count_limit, gpu_slices=slice_limit)
    if count <= count_limit and slices <= slice_limit:
        check_policies([policy], "pool", count, slices)
    else:
        with pytest.raises(Forbidden) as err:
            check_policies([policy], "pool", count, slices)
        assert err.value.details["key"] == ("gpuCount" if count > count_limit else "gpuSlices")


def test_policy_limits_are_bounded_like_quota_limits() -> None:
    base = {"name": "big", "tenantId": "acme"}
    assert parse_policy({**base, "limits": {"gpuCount": 2**31 - 1}}).gpu_count == 2**31 - 1
    for bad in (10**30, -1, True, 1.5):
        with pytest.raises(InvalidInput, match=r"limits\.gpuCount must be an integer from 0 to 2147483647"):
            parse_policy({**base, "limits": {"gpuCount": bad}})
