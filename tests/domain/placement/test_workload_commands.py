"""`domain.placement.commands.place_workload_of`: a workload request as JSON read into placement's
command, and `workload_spec` checking it."""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.placement.commands import (
    PlaceWorkload,
    ReplicaShape,
    parse_workload,
    place_workload_of,
)
from better_compute.domain.placement.workloads import workload_spec

BODY: dict[str, Any] = {"name": "web", "shape": {"deviceClass": "h100", "deviceCount": 2}, "replicas": 3}


def test_place_workload_of_reads_every_field_into_the_command() -> None:
    got = place_workload_of(
        {
            **BODY,
            "tenantId": "acme",
            "strategy": "spread",
            "clusterFloors": {"c2": 1, "c1": 1},
            "maxClusters": 2,
            "cluster": "c1",
            "requiresSingleTopologyDomain": True,
            "topologyDomainKind": "pcie",
            "priorityClass": "prod",
            "allowedRegions": ["eu", "eu"],
            "allowedClusters": ["c1"],
        }
    )
    assert got == PlaceWorkload(
        name="web",
        shape=ReplicaShape(device_class="h100", device_count=2),
        tenant_id="acme",
        replicas=3,
        strategy="spread",
        cluster_floors={"c1": 1, "c2": 1},
        max_clusters=2,
        cluster="c1",
        requires_single_topology_domain=True,
        topology_domain_kind="pcie",
        priority_class="prod",
        allowed_regions=("eu", "eu"),
        allowed_clusters=("c1",),
    )


def test_fields_left_out_take_the_defaults_the_rules_always_gave() -> None:
    got = place_workload_of({"name": "web", "shape": {"capability": {"memoryGiB": {"min": 40}}}})
    assert got == PlaceWorkload(name="web", shape=ReplicaShape(capability={"memoryGiB": {"min": 40}}))
    spec = workload_spec(got, "acme")
    assert (spec.strategy, spec.replicas, spec.priority_class, spec.device_count) == (
        "pack",
        1,
        "standard",
        1,
    )
    assert spec.capability is not None and spec.capability.memory_gib == 40.0


def test_an_empty_strategy_or_priority_class_is_the_default() -> None:
    spec = parse_workload({**BODY, "strategy": "", "priorityClass": ""}, "acme")
    assert (spec.strategy, spec.priority_class) == ("pack", "standard")


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"shape": "h100"}, "shape", "shape must be an object with deviceClass and deviceCount"),
        ({"strategy": 5}, "strategy", "strategy must be pack or spread, not 5"),
        ({"replicas": "3"}, "replicas", "replicas must be an integer from 0 to 10,000, not '3'"),
        ({"replicas": True}, "replicas", "replicas must be an integer from 0 to 10,000, not True"),
        ({"replicas": None}, "replicas", "replicas must be an integer from 0 to 10,000, not None"),
        ({"clusterFloors": ["c1"]}, "clusterFloors", "clusterFloors must be an object of at most 64"),
        ({"clusterFloors": {"c1": "1"}}, "clusterFloors.c1", "clusterFloors.c1 must be an integer"),
        ({"maxClusters": "2"}, "maxClusters", "maxClusters must be an integer from 1 to 1,000"),
        (
            {"requiresSingleTopologyDomain": "yes"},
            "requiresSingleTopologyDomain",
            "requiresSingleTopologyDomain must be true or false",
        ),
        ({"topologyDomainKind": 3}, "topologyDomainKind", "topologyDomainKind must be one of nvlink"),
        ({"name": 5}, "name", "name must be 1-63 lowercase letters"),
        ({"shape": {"deviceClass": 7}}, "shape.deviceClass", "shape.deviceClass must be 1-63"),
        (
            {"shape": {"deviceClass": "h100", "deviceCount": "2"}},
            "shape.deviceCount",
            "shape.deviceCount must be an integer from 1 to 64, not '2'",
        ),
        ({"shape": {"capability": "big"}}, "shape.capability", "shape.capability must be an object"),
        ({"priorityClass": 3}, "priorityClass", "priorityClass must be 1-63"),
        ({"cluster": 4}, "cluster", "cluster must be an id of 1-"),
        ({"allowedRegions": "eu"}, "allowedRegions", "allowedRegions must be a list of at most 64 names"),
        ({"allowedClusters": ["c1", 2]}, "allowedClusters[1]", "allowedClusters[1] must be an id"),
        ({"tenantId": 9}, "project", "project must be an id"),
    ],
)
def test_a_wrong_type_is_refused_by_the_reader_with_the_rules_message(
    change: dict[str, Any], field: str, says: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        place_workload_of({**BODY, **change})
    assert str(refused.value.message).startswith(says)
    assert refused.value.details["field"] == field


def test_a_shape_with_both_a_class_and_a_capability_is_refused_as_both_whatever_the_capability() -> None:
    for capability in ("big", {"memoryGiB": {"min": 40}}):
        with pytest.raises(InvalidInput, match=r"give shape\.deviceClass or shape\.capability, not both"):
            parse_workload({**BODY, "shape": {"deviceClass": "h100", "capability": capability}}, "acme")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"replicas": -1}, "replicas"),
        ({"strategy": "scatter"}, "strategy"),
        ({"topologyDomainKind": "rack"}, "topologyDomainKind"),
        ({"clusterFloors": {"c1": 4}}, "clusterFloors"),
        ({"name": "Web"}, "name"),
        ({"shape": {"deviceCount": 2}}, "shape.deviceClass"),
    ],
)
def test_what_a_field_may_be_is_the_rules_to_check_not_the_readers(
    change: dict[str, Any], field: str
) -> None:
    asked = place_workload_of({**BODY, **change})  # the right type: read as it is
    with pytest.raises(InvalidInput) as refused:
        workload_spec(asked, "acme")
    assert refused.value.details["field"] == field


def test_two_faults_are_refused_in_the_order_the_rules_check_them() -> None:
    """Replicas come before the name: an API request wrong in both is refused for its replicas."""
    asked = PlaceWorkload(name="Not A Slug", shape=ReplicaShape(device_class="h100"), replicas=-1)
    with pytest.raises(InvalidInput) as refused:
        workload_spec(asked, "acme")
    assert refused.value.details["field"] == "replicas"


def test_a_shapes_container_is_checked_as_shape_container_and_round_trips_through_the_stored_document() -> (
    None
):
    from better_compute.storage.placement.workloads import _spec, spec_document

    container = {"image": "model:1", "args": ["--port", "8080"], "ports": [8080], "env": {"A": "1"}}
    spec = parse_workload({**BODY, "shape": {**BODY["shape"], "container": container}}, "acme")
    assert spec.container is not None
    assert spec.container.image == "model:1"
    assert spec.container.ports == (8080,)
    assert _spec(spec.name, spec.tenant_id, spec_document(spec)) == spec
    assert parse_workload(BODY, "acme").container is None
    assert "container" not in spec_document(parse_workload(BODY, "acme"))
    for bad, field in [
        ("model:1", "shape.container"),
        ({"image": "Model:1"}, "shape.container.image"),
        ({"image": "m:1", "env": {"BC_NODE": "x"}}, "shape.container.env"),
        ({"image": "m:1", "command": "sh -c x"}, "shape.container.command"),
    ]:
        with pytest.raises(InvalidInput) as refused:
            parse_workload({**BODY, "shape": {**BODY["shape"], "container": bad}}, "acme")
        assert refused.value.details["field"] == field, (bad, refused.value.details)
