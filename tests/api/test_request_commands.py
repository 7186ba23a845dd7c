"""The routes build the same command from a validated wire model as the readers do from its JSON:
an API request and a JSON caller are checked, stored and refused alike."""

from __future__ import annotations

from typing import Any

from better_compute.api.routes.endpoints import component_command, endpoint_command
from better_compute.api.routes.workloads import place_workload
from better_compute.domain.endpoints.commands import create_component_of, create_endpoint_of
from better_compute.domain.placement.commands import place_workload_of
from better_compute.wire.endpoints import ComponentCreate, EndpointCreate
from better_compute.wire.workloads import WorkloadCreate

WORKLOAD: dict[str, Any] = {
    "name": "web",
    "tenantId": "acme",
    "shape": {"capability": {"memoryGiB": {"min": 40}, "nvlinkPeer": False}, "deviceCount": 2},
    "replicas": 3,
    "strategy": "spread",
    "clusterFloors": {"c1": 1},
    "maxClusters": 2,
    "cluster": "c1",
    "requiresSingleTopologyDomain": True,
    "topologyDomainKind": "pcie",
    "priorityClass": "prod",
    "allowedRegions": ["eu"],
    "allowedClusters": ["c1"],
}


def test_a_workload_request_is_the_same_command_from_the_wire_and_from_json() -> None:
    body = WorkloadCreate.model_validate(WORKLOAD)
    assert body.shape is not None
    assert place_workload(body, body.shape, body.name) == place_workload_of(WORKLOAD)


def test_an_endpoint_request_is_the_same_command_from_the_wire_and_from_json() -> None:
    raw = {
        "name": "summarizer",
        "tenantId": "acme",
        "variants": [
            {
                "name": "AllTraffic",
                "poolId": "a100-mig",
                "instanceCount": 2,
                "acceleratorPartitionLayouts": [
                    {"acceleratorPartitionTypes": ["mig-3g.20gb", "mig-3g.20gb"]}
                ],
                "pricePerInstanceHour": "25.25",
            }
        ],
    }
    body = EndpointCreate.model_validate(raw)
    assert endpoint_command(body, body.tenant_id) == create_endpoint_of(raw)


def test_a_component_request_is_the_same_command_from_the_wire_and_from_json() -> None:
    raw = {
        "name": "small",
        "endpointName": "summarizer",
        "variantName": "AllTraffic",
        "model": "llama",
        "partitionType": "mig-1g.5gb",
        "copies": 3,
        "minCopies": 2,
        "cpuCores": "1.5",
        "memoryMiB": 2048,
    }
    assert component_command(ComponentCreate.model_validate(raw)) == create_component_of(raw)
    least = {k: raw[k] for k in ("name", "endpointName", "variantName", "model", "partitionType")}
    assert component_command(ComponentCreate.model_validate(least)) == create_component_of(least)
