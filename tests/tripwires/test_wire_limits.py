"""The wire states the server's limits in its schema; these keep the two copies equal."""

from __future__ import annotations

from better_compute.domain.endpoints import endpoints as domain_endpoints
from better_compute.domain.placement import capability
from better_compute.domain.placement import workloads as domain_workloads
from better_compute.wire import endpoints as wire_endpoints
from better_compute.wire import workloads as wire_workloads


def test_the_wire_states_the_limits_the_server_enforces() -> None:
    assert wire_workloads.MAX_REPLICAS == domain_workloads.MAX_REPLICAS
    assert wire_workloads.MAX_DEVICE_COUNT == domain_workloads.MAX_DEVICE_COUNT
    assert wire_workloads.MAX_MEMORY_GIB == capability.MAX_MEMORY_GIB
    assert wire_workloads.MAX_COMPUTE_SLICES == capability.MAX_COMPUTE_SLICES


def test_the_wire_states_the_endpoint_limits_the_server_enforces() -> None:
    for limit in (
        "MAX_NAME",
        "MAX_VARIANTS",
        "MAX_INSTANCES",
        "MAX_PARTITION_TYPES",
        "MAX_COPIES",
        "MAX_CPU_CORES",
        "MAX_MEMORY_MIB",
    ):
        assert getattr(wire_endpoints, limit) == getattr(domain_endpoints, limit), limit
