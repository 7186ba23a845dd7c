"""Placement's requests as typed commands: what a caller asked a workload to be, read once at the edge.

The API builds `PlaceWorkload` from its validated wire model (`workloads.create`, and
`placement.preview` of a shape); a caller that holds the request as JSON (the console's form, tests,
benchmarks) reads it with `place_workload_of`. `domain.placement.workloads.workload_spec` then checks
what the fields may be (ranges, names, kinds), in the order and with the messages it always gave: a
command holds what was asked, not yet whether it may be had.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from better_compute.domain.kernel.containers import parse_container
from better_compute.domain.placement.capability import parse_capability
from better_compute.domain.placement.workloads import (
    WorkloadSpec,
    check_device_count,
    check_domain_kind,
    check_floor,
    check_floor_map,
    check_max_clusters,
    check_one_class,
    check_refs,
    check_replicas,
    check_shape,
    check_single_domain,
    check_strategy,
    workload_spec,
)
from better_compute.domain.tenancy.tenancy import check_class_name, check_ref, check_slug


@dataclass(frozen=True)
class ReplicaShape:
    """What one replica needs: `device_count` devices of `device_class`, or of the cheapest kind that
    gives `capability`."""

    device_class: str | None = None
    device_count: int = 1
    capability: Mapping[str, Any] | None = None
    """As JSON (`memoryGiB: {min}`, `computeSlices: {min}`, `nvlinkPeer`), checked by
    `domain.placement.capability.parse_capability`."""
    container: Mapping[str, Any] | None = None
    """What each replica runs, as JSON (`image`, `command`, ...), checked by
    `domain.kernel.containers.parse_container` (docs/placement.md#what-runs)."""


@dataclass(frozen=True)
class PlaceWorkload:
    """`workloads.create` (and `placement.preview` of a shape, named `preview`): a workload to place."""

    name: str
    shape: ReplicaShape
    tenant_id: str | None = None
    """The project named; None: the credential's own (an admin must name one)."""
    replicas: int = 1
    strategy: str = "pack"
    cluster_floors: Mapping[str, int] = field(default_factory=dict)
    max_clusters: int | None = None
    cluster: str | None = None
    """The cluster it is pinned to, if any."""
    requires_single_topology_domain: bool = False
    topology_domain_kind: str | None = None
    priority_class: str | None = None
    """None: `standard`."""
    allowed_regions: tuple[str, ...] = ()
    allowed_clusters: tuple[str, ...] = ()


def place_workload_of(raw: Mapping[str, Any]) -> PlaceWorkload:
    """A workload request given as JSON (camelCase keys), as a command.

    A field of the wrong type is refused here with the message `workload_spec` gives for it; what
    the fields may be is checked there, in its order. Keys the wire does not know are not read.
    """
    named = raw.get("tenantId")
    if named is not None and not isinstance(named, str):
        check_ref(named, "project")
    shape = check_shape(raw.get("shape"))
    strategy = raw.get("strategy") or "pack"
    if not isinstance(strategy, str):
        check_strategy(strategy)
    replicas = raw.get("replicas", 1)
    if not _is_int(replicas):
        check_replicas(replicas)
    floors = raw.get("clusterFloors") or {}
    if not isinstance(floors, Mapping):
        check_floor_map(floors)
    for cluster, count in sorted(floors.items()):
        if not isinstance(cluster, str):
            check_ref(cluster, "clusterFloors")
        if not _is_int(count):
            check_floor(count, cluster)
    max_clusters = raw.get("maxClusters")
    if max_clusters is not None and not _is_int(max_clusters):
        check_max_clusters(max_clusters)
    single = raw.get("requiresSingleTopologyDomain", False)
    if not isinstance(single, bool):
        check_single_domain(single)
    kind = raw.get("topologyDomainKind")
    if kind is not None and not isinstance(kind, str):
        check_domain_kind(kind)
    capability = shape.get("capability")
    if capability is not None and not isinstance(capability, Mapping):
        check_one_class(shape.get("deviceClass"), capability)  # refused as both, if both
        parse_capability(capability)
    container = shape.get("container")
    if container is not None and not isinstance(container, Mapping):
        parse_container(container, "shape.container")  # refuses it
    name = raw.get("name")
    name = name if isinstance(name, str) else check_slug(name, "name")  # refuses it
    device_class = shape.get("deviceClass")
    if device_class is not None and not isinstance(device_class, str):
        check_class_name(device_class, "shape.deviceClass")
    count = shape.get("deviceCount", 1)
    if not _is_int(count):
        check_device_count(count)
    priority = raw.get("priorityClass") or None
    if priority is not None and not isinstance(priority, str):
        check_class_name(priority, "priorityClass")
    pinned = raw.get("cluster")
    if pinned is not None and not isinstance(pinned, str):
        check_ref(pinned, "cluster")
    return PlaceWorkload(
        name=name,
        shape=ReplicaShape(
            device_class=device_class, device_count=count, capability=capability, container=container
        ),
        tenant_id=named,
        replicas=replicas,
        strategy=strategy,
        cluster_floors=dict(floors),
        max_clusters=max_clusters,
        cluster=pinned,
        requires_single_topology_domain=single,
        topology_domain_kind=kind,
        priority_class=priority,
        allowed_regions=_names(raw.get("allowedRegions"), "allowedRegions"),
        allowed_clusters=_names(raw.get("allowedClusters"), "allowedClusters"),
    )


def parse_workload(raw: Mapping[str, Any], tenant_id: str) -> WorkloadSpec:
    """A workload request given as JSON, read and checked: `workload_spec(place_workload_of(raw))`."""
    return workload_spec(place_workload_of(raw), tenant_id)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _names(raw: object, field: str) -> tuple[str, ...]:
    """A list of ids as a tuple, as sent (duplicates and all); refused by `check_refs`'s message
    when it is not a list of text."""
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple) or not all(isinstance(v, str) for v in raw):
        check_refs(raw, field)
        raise AssertionError(f"{field} {raw!r} must have been refused")
    return tuple(raw)


__all__ = ["PlaceWorkload", "ReplicaShape", "parse_workload", "place_workload_of"]
