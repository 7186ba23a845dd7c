"""The device-class quota rule (seed 001, "Cluster vs fleet quota"), stated on the seed's own examples."""

from __future__ import annotations

import pytest

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.placement.class_quotas import (
    DEFAULT_WEIGHT,
    ClassQuota,
    QuotaVerdict,
    admit,
    is_class_row,
    parse_class_quota,
)
from tests.builders import T0

H100 = "h100-80gb-sxm"


def cluster_row(cluster: str, guaranteed: int) -> ClassQuota:
    return ClassQuota("prj", H100, "cluster", cluster, guaranteed, 0, DEFAULT_WEIGHT, T0)


def fleet_row(guaranteed: int) -> ClassQuota:
    return ClassQuota("prj", H100, "fleet", None, guaranteed, 0, DEFAULT_WEIGHT, T0)


def test_the_project_holds_16_h100s_in_iad_1_and_the_cluster_quota_is_16_it_cant_deploy_more_to_iad_1_but_can_still_use_fra_1() -> (
    None
):
    rows = [cluster_row("iad-1", 16)]
    held = {"iad-1": 16}
    assert admit(rows, held, "iad-1", 1) == QuotaVerdict(
        admitted=False,
        cluster_id="iad-1",
        asked=1,
        held=16,
        scope="cluster",
        limit=16,
        reason="insufficient_quota",
    )
    fra = admit(rows, held, "fra-1", 8)
    assert fra.admitted and fra.reason is None and fra.limit is None  # no row for fra-1: not limited


def test_the_fleet_quota_is_32_and_it_holds_16_in_iad_1_and_16_in_fra_1_at_the_limit_everywhere() -> None:
    rows = [fleet_row(32)]
    held = {"iad-1": 16, "fra-1": 16}
    for cluster in ("iad-1", "fra-1", "ord-1"):
        verdict = admit(rows, held, cluster, 1)
        assert (verdict.admitted, verdict.reason, verdict.scope, verdict.limit, verdict.held) == (
            False,
            "insufficient_quota",
            "fleet",
            32,
            32,
        ), cluster
    assert admit(rows, held, "iad-1", 0).admitted  # asking for nothing more fits at the limit


def test_cluster_quota_takes_precedence_in_that_cluster_fleet_quota_checked_only_if_no_cluster_specific_quota_exists() -> (
    None
):
    rows = [cluster_row("iad-1", 24), fleet_row(32)]
    held = {"iad-1": 16, "fra-1": 16}
    # In iad-1 the cluster row decides, though the fleet row is full.
    iad = admit(rows, held, "iad-1", 8)
    assert (iad.admitted, iad.scope, iad.limit, iad.held, iad.asked) == (True, "cluster", 24, 16, 8)
    refused = admit(rows, held, "iad-1", 9)
    assert (refused.admitted, refused.reason, refused.scope) == (False, "insufficient_quota", "cluster")
    # In fra-1 there is no cluster row: the fleet row counts both clusters.
    fra = admit(rows, held, "fra-1", 1)
    assert (fra.admitted, fra.scope, fra.limit, fra.held) == (False, "fleet", 32, 32)
    # A cluster row below the fleet row also wins in its cluster.
    tight = admit([cluster_row("iad-1", 4), fleet_row(100)], {"iad-1": 4}, "iad-1", 1)
    assert (tight.admitted, tight.scope) == (False, "cluster")


def test_with_no_row_for_the_class_nothing_limits_the_tenant() -> None:
    verdict = admit([], {"iad-1": 1000}, "iad-1", 1000)
    assert verdict == QuotaVerdict(admitted=True, cluster_id="iad-1", asked=1000, held=1000)


def test_a_zero_row_allows_nothing_and_the_limit_is_inclusive() -> None:
    assert not admit([fleet_row(0)], {}, "iad-1", 1).admitted
    assert admit([cluster_row("iad-1", 16)], {"iad-1": 15}, "iad-1", 1).admitted


def test_admit_takes_one_class_and_a_count_not_below_zero() -> None:
    other = ClassQuota("prj", "a100", "fleet", None, 1, 0, 1.0, T0)
    with pytest.raises(ValueError, match="one device class"):
        admit([fleet_row(1), other], {}, "iad-1", 1)
    with pytest.raises(ValueError, match="must be >= 0"):
        admit([fleet_row(1)], {}, "iad-1", -1)


def test_a_row_is_parsed_with_defaults_and_each_refusal_names_its_field() -> None:
    row = parse_class_quota("prj", H100, "fleet", None, 32, None, None, T0)
    assert (row.cluster_id, row.floor_devices, row.over_quota_weight) == (None, 0, 1.0)
    bad: list[tuple[tuple[object, ...], str]] = [
        (("prj", H100, "cluster", None, 1, None, None), "clusterId"),
        (("prj", H100, "fleet", "iad-1", 1, None, None), "clusterId"),
        (("prj", H100, "fleet", None, -1, None, None), "guaranteedDevices"),
        (("prj", H100, "fleet", None, True, None, None), "guaranteedDevices"),
        (("prj", H100, "fleet", None, 4, 5, None), "floorDevices"),
        (("prj", H100, "fleet", None, 4, None, 0), "overQuotaWeight"),
        (("prj", H100, "fleet", None, 4, None, float("nan")), "overQuotaWeight"),
        (("prj", H100, "fleet", None, 4, None, 1000.01), "overQuotaWeight"),
        (("prj", H100, "pool", None, 4, None, None), "scope"),
        (("prj", None, "fleet", None, 4, None, None), "deviceClass"),
    ]
    for args, field in bad:
        with pytest.raises(InvalidInput) as refused:
            parse_class_quota(*args, T0)
        assert refused.value.details["field"] == field, args
    assert parse_class_quota("prj", H100, "fleet", None, 4, 4, 1000, T0).over_quota_weight == 1000.0


def test_a_request_naming_any_device_class_field_is_a_device_class_row() -> None:
    assert not is_class_row({"tenantId", "poolId", "class", "limit"}, None)
    assert not is_class_row({"tenantId", "poolId", "class", "limit", "scope"}, "pool")
    assert is_class_row({"tenantId", "deviceClass"}, None)
    assert is_class_row({"tenantId", "scope"}, "fleet")
    assert is_class_row({"tenantId", "poolId", "floorDevices"}, None)
