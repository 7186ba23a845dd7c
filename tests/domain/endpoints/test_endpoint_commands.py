"""`domain.endpoints.commands`: endpoint and component requests as JSON read into the commands, and
the rules checking them."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from better_compute.domain.endpoints.commands import (
    CreateComponent,
    CreateEndpoint,
    NewLayout,
    NewVariant,
    RelayoutEndpoint,
    create_component_of,
    create_endpoint_of,
    parse_component,
    parse_endpoint,
    relayout_endpoint_of,
)
from better_compute.domain.endpoints.endpoints import (
    component_json,
    component_spec,
    endpoint_json,
    endpoint_spec,
)
from better_compute.domain.kernel.errors import InvalidInput

TYPES = ["mig-4g.20gb", "mig-2g.10gb", "mig-1g.5gb"]


def variant(**change: Any) -> dict[str, Any]:
    return {
        "name": "AllTraffic",
        "poolId": "a100-mig",
        "instanceCount": 1,
        "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": TYPES}],
        **change,
    }


def endpoint(**change: Any) -> dict[str, Any]:
    return {"name": "summarizer", "tenantId": "acme", "variants": [variant()], **change}


def component(**change: Any) -> dict[str, Any]:
    return {
        "name": "small",
        "endpointName": "summarizer",
        "variantName": "AllTraffic",
        "model": "llama",
        "partitionType": "mig-1g.5gb",
        **change,
    }


def test_create_endpoint_of_reads_every_field_into_the_command() -> None:
    got = create_endpoint_of(endpoint(variants=[variant(pricePerInstanceHour="25.251286")]))
    assert got == CreateEndpoint(
        name="summarizer",
        tenant_id="acme",
        variants=(NewVariant("AllTraffic", "a100-mig", 1, tuple(TYPES), "25.251286"),),
    )


def test_an_endpoint_stores_the_same_json_whether_asked_as_json_or_as_a_command() -> None:
    raw = endpoint(variants=[variant(pricePerInstanceHour=25.25)])
    asked = CreateEndpoint(
        "summarizer", (NewVariant("AllTraffic", "a100-mig", 1, tuple(TYPES), 25.25),), "acme"
    )
    assert endpoint_json(endpoint_spec(asked)) == endpoint_json(parse_endpoint(raw))
    assert parse_endpoint(endpoint_json(parse_endpoint(raw))) == parse_endpoint(raw)  # read back as stored


@pytest.mark.parametrize(
    ("raw", "field", "says"),
    [
        ("summarizer", "endpoint", "endpoint must be an object describing an endpoint"),
        (endpoint(extra=1), "endpoint.extra", "endpoint has unknown field 'extra'"),
        (endpoint(name=5), "name", "name must be 1 to 63 letters"),
        (endpoint(tenantId=5), "tenantId", "tenantId must be 1-63 lowercase"),
        (endpoint(variants="v"), "variants", "variants must list 1 to 10 variants"),
        (endpoint(variants=(variant(),)), "variants", "variants must list 1 to 10 variants"),
        (endpoint(variants=["v"]), "variants[0]", "variants[0] must be an object describing a variant"),
        (endpoint(variants=[variant(poolId=3)]), "variants[0].poolId", "variants[0].poolId must be 1-63"),
        (
            endpoint(variants=[variant(instanceCount="1")]),
            "variants[0].instanceCount",
            "variants[0].instanceCount must be an integer from 1 to 64, not '1'",
        ),
        (
            endpoint(
                variants=[variant(acceleratorPartitionLayouts=[{"acceleratorPartitionTypes": TYPES}] * 2)]
            ),
            "variants[0].acceleratorPartitionLayouts",
            "variants[0].acceleratorPartitionLayouts takes exactly one entry",
        ),
        (
            endpoint(variants=[variant(acceleratorPartitionLayouts=[{"types": TYPES}])]),
            "variants[0].acceleratorPartitionLayouts[0].types",
            "variants[0].acceleratorPartitionLayouts[0] has unknown field 'types'",
        ),
        (
            endpoint(variants=[variant(acceleratorPartitionLayouts=[{"acceleratorPartitionTypes": "mig"}])]),
            "variants[0].acceleratorPartitionLayouts[0].acceleratorPartitionTypes",
            "variants[0].acceleratorPartitionLayouts[0].acceleratorPartitionTypes must list 1 to 7",
        ),
        (
            endpoint(variants=[variant(acceleratorPartitionLayouts=[{"acceleratorPartitionTypes": [5]}])]),
            "variants[0].acceleratorPartitionLayouts[0].acceleratorPartitionTypes[0]",
            "variants[0].acceleratorPartitionLayouts[0].acceleratorPartitionTypes[0] must be a partition type",
        ),
        (
            endpoint(variants=[variant(pricePerInstanceHour=True)]),
            "variants[0].pricePerInstanceHour",
            "variants[0].pricePerInstanceHour must be a number, such as 25.25",
        ),
    ],
)
def test_an_endpoint_of_the_wrong_types_is_refused_with_the_rules_message(
    raw: Any, field: str, says: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        create_endpoint_of(raw)
    assert str(refused.value.message).startswith(says)
    assert refused.value.details["field"] == field


def test_what_an_endpoints_fields_may_be_is_the_rules_to_check() -> None:
    asked = create_endpoint_of(endpoint(variants=[variant(instanceCount=0), variant()]))
    with pytest.raises(InvalidInput) as refused:
        endpoint_spec(asked)
    assert refused.value.details["field"] == "variants[0].instanceCount"
    with pytest.raises(InvalidInput, match="variant AllTraffic is named twice"):
        endpoint_spec(create_endpoint_of(endpoint(variants=[variant(), variant()])))
    with pytest.raises(InvalidInput, match="tenantId must be"):  # an admin's request naming none
        endpoint_spec(create_endpoint_of(endpoint(tenantId=None)))


def test_relayout_endpoint_of_reads_the_new_layouts() -> None:
    raw = {
        "name": "summarizer",
        "variants": [
            {
                "name": "AllTraffic",
                "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": ["mig-7g.40gb"]}],
            }
        ],
    }
    assert relayout_endpoint_of(raw) == RelayoutEndpoint(
        "summarizer", (NewLayout("AllTraffic", ("mig-7g.40gb",)),)
    )
    with pytest.raises(InvalidInput) as refused:
        relayout_endpoint_of({**raw, "variants": [{"name": "AllTraffic", "poolId": "p"}]})
    assert refused.value.details["field"] == "variants[0].poolId"


def test_create_component_of_reads_the_fields_and_leaves_the_defaults_to_the_rules() -> None:
    got = create_component_of(component())
    assert got == CreateComponent("small", "summarizer", "AllTraffic", "llama", "mig-1g.5gb")
    spec = component_spec(got)
    assert (spec.copies, spec.min_copies, spec.cpu_cores, spec.memory_mib) == (1, 1, Decimal(1), 1024)
    full = component(copies=4, minCopies=2, cpuCores="1.5", memoryMiB=2048, devicesRequired=1)
    assert component_json(component_spec(create_component_of(full))) == component_json(parse_component(full))
    assert parse_component(component_json(parse_component(full))) == parse_component(full)


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"devicesRequired": "1"}, "devicesRequired", "devicesRequired must be 1 with a partition type"),
        ({"model": 5}, "model", "model must be the model's name"),
        ({"cpuCores": None}, "cpuCores", "cpuCores must be a number, such as 1.5"),
        ({"copies": "2"}, "copies", "copies must be an integer from 0 to 1000, not '2'"),
        ({"copies": 3, "minCopies": "1"}, "minCopies", "minCopies must be an integer from 0 to 3, not '1'"),
        ({"name": 5}, "name", "name must be 1 to 63 letters"),
        ({"partitionType": 5}, "partitionType", "partitionType must be a partition type"),
        ({"memoryMiB": None}, "memoryMiB", "memoryMiB must be an integer from 1 to"),
        ({"gpus": 1}, "component.gpus", "component has unknown field 'gpus'"),
    ],
)
def test_a_component_of_the_wrong_types_is_refused_with_the_rules_message(
    change: dict[str, Any], field: str, says: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        create_component_of(component(**change))
    assert str(refused.value.message).startswith(says)
    assert refused.value.details["field"] == field


def test_what_a_components_fields_may_be_is_the_rules_to_check() -> None:
    for change, field in [
        ({"devicesRequired": 2}, "devicesRequired"),
        ({"model": " "}, "model"),
        ({"copies": 2, "minCopies": 3}, "minCopies"),
        ({"partitionType": "mig-9g"}, "partitionType"),
    ]:
        asked = create_component_of(component(**change))
        with pytest.raises(InvalidInput) as refused:
            component_spec(asked)
        assert refused.value.details["field"] == field
