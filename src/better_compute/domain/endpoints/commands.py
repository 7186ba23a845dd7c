"""Endpoint and component requests as typed commands: what a caller asked for, read once at the edge.

The API builds a command from its validated wire model; a caller that holds a request as JSON (the
console, tests, the stored specs, which are the requests' JSON) reads it with `create_endpoint_of`,
`relayout_endpoint_of` or `create_component_of`. The rules in `domain.endpoints.endpoints`
(`endpoint_spec`, `relayout`, `component_spec`) then check what the fields may be, in the order and
with the messages they always had: a command holds what was asked, not yet whether it may be had.

A JSON request wrong in its types is refused by the reader, with the message the rule gives for
that field; the reader checks the fields in the order the rules do, so a request wrong in one field
is refused as it always was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from better_compute.domain.endpoints.endpoints import (
    COMPONENT_FIELDS,
    ENDPOINT_FIELDS,
    MAX_COPIES,
    MAX_INSTANCES,
    VARIANT_FIELDS,
    ComponentSpec,
    EndpointSpec,
    check_count,
    check_cpu_cores,
    check_devices_required,
    check_endpoint_name,
    check_fields,
    check_invoke_path,
    check_layout_entries,
    check_memory_mib,
    check_model,
    check_partition_type,
    check_price,
    component_spec,
    endpoint_spec,
    partition_types_refused,
    relayout,
    variants_refused,
)
from better_compute.domain.kernel.containers import parse_container
from better_compute.domain.tenancy.tenancy import check_ref, check_slug

Price = str | float
"""A price as sent: a decimal number as text (`"25.251286"`) or as a JSON number."""


@dataclass(frozen=True)
class NewVariant:
    """A production variant asked for: `instance_count` nodes of the mig pool `pool_id`, every
    accelerator split into `partition_types` (the one entry of `acceleratorPartitionLayouts`)."""

    name: str
    pool_id: str
    instance_count: int
    partition_types: tuple[str, ...]
    price_per_instance_hour: Price | None = None


@dataclass(frozen=True)
class CreateEndpoint:
    """`endpoints.create`."""

    name: str
    variants: tuple[NewVariant, ...]
    tenant_id: str | None = None
    """The tenant named (or the token's own, which the API fills in); None: refused, as an admin
    must name one."""


@dataclass(frozen=True)
class NewLayout:
    """A variant's new partition layout (the one entry of `acceleratorPartitionLayouts`)."""

    name: str
    partition_types: tuple[str, ...]


@dataclass(frozen=True)
class RelayoutEndpoint:
    """`endpoints.update`: new layouts for some of endpoint `name`'s variants."""

    name: str | None
    """The endpoint (the API's path); None only from JSON that named none (refused by the use case)."""
    variants: tuple[NewLayout, ...]


@dataclass(frozen=True)
class CreateComponent:
    """`components.create`: `copies` of `model` on `partition_type` partitions of a variant."""

    name: str
    endpoint_name: str
    variant_name: str
    model: str
    partition_type: str
    devices_required: int = 1
    cpu_cores: Price = 1
    memory_mib: int = 1024
    copies: int | None = None
    """None: 1."""
    min_copies: int | None = None
    """None: `copies - 1`, at least 1 (`default_min_copies`)."""
    container: Mapping[str, Any] | None = None
    """The model server each copy runs, as JSON, checked by `domain.kernel.containers.parse_container`."""
    invoke_path: str | None = None
    """None: `/invocations`."""


def create_endpoint_of(raw: object) -> CreateEndpoint:
    """An `endpoints.create` request given as JSON (camelCase keys), as a command."""
    body = check_fields(raw, ENDPOINT_FIELDS, "an endpoint", "endpoint")
    name = _name(body.get("name"), "name")
    tenant_id = body.get("tenantId")
    if tenant_id is not None and not isinstance(tenant_id, str):
        check_slug(tenant_id, "tenantId")
    raw_variants = body.get("variants")
    if not isinstance(raw_variants, list):
        raise variants_refused()
    variants: list[NewVariant] = []
    for i, item in enumerate(raw_variants):
        where = f"variants[{i}]"
        v = check_fields(item, VARIANT_FIELDS, "a variant", where)
        variant_name = _name(v.get("name"), f"{where}.name")
        pool_id = v.get("poolId")
        pool_id = pool_id if isinstance(pool_id, str) else check_slug(pool_id, f"{where}.poolId")
        count = _int(v.get("instanceCount"), f"{where}.instanceCount")
        types = _types(v.get("acceleratorPartitionLayouts"), f"{where}.acceleratorPartitionLayouts")
        price = v.get("pricePerInstanceHour")
        if price is not None and (isinstance(price, bool) or not isinstance(price, int | float | str)):
            check_price(price, f"{where}.pricePerInstanceHour")
        variants.append(NewVariant(variant_name, pool_id, count, types, price))
    return CreateEndpoint(name, tuple(variants), tenant_id)


def relayout_endpoint_of(raw: object) -> RelayoutEndpoint:
    """An `endpoints.update` request given as JSON, as a command."""
    body = check_fields(raw, frozenset({"name", "variants"}), "an endpoint update", "endpoint")
    name = body.get("name")
    if name is not None and not isinstance(name, str):
        check_ref(name, "name")
    raw_variants = body.get("variants")
    if not isinstance(raw_variants, list):
        raise variants_refused()
    layouts: list[NewLayout] = []
    for i, item in enumerate(raw_variants):
        where = f"variants[{i}]"
        v = check_fields(
            item, frozenset({"name", "acceleratorPartitionLayouts"}), "a variant's new layout", where
        )
        variant_name = _name(v.get("name"), f"{where}.name")
        types = _types(v.get("acceleratorPartitionLayouts"), f"{where}.acceleratorPartitionLayouts")
        layouts.append(NewLayout(variant_name, types))
    return RelayoutEndpoint(name, tuple(layouts))


def create_component_of(raw: object) -> CreateComponent:
    """A `components.create` request given as JSON, as a command."""
    body = check_fields(raw, COMPONENT_FIELDS, "a component", "component")
    devices = body.get("devicesRequired", 1)
    if not _is_int(devices):
        check_devices_required(devices)
    model = body.get("model")
    model = model if isinstance(model, str) else check_model(model)
    cores = body.get("cpuCores", 1)
    if isinstance(cores, bool) or not isinstance(cores, int | float | str):
        check_cpu_cores(cores)
    copies = body.get("copies")
    if copies is not None and not _is_int(copies):
        check_count(copies, "copies", 0, MAX_COPIES)
    min_copies = body.get("minCopies")
    if min_copies is not None and not _is_int(min_copies):
        check_count(min_copies, "minCopies", 0, 1 if copies is None else int(copies))
    name = _name(body.get("name"), "name")
    endpoint_name = _name(body.get("endpointName"), "endpointName")
    variant_name = _name(body.get("variantName"), "variantName")
    partition_type = body.get("partitionType")
    if not isinstance(partition_type, str):
        partition_type = check_partition_type(partition_type, "partitionType")  # refuses it
    memory = body.get("memoryMiB", 1024)
    if not _is_int(memory):
        check_memory_mib(memory)
    container = body.get("container")
    if container is not None and not isinstance(container, Mapping):
        parse_container(container, "container")  # refuses it
    invoke_path = body.get("invokePath")
    if invoke_path is not None and not isinstance(invoke_path, str):
        check_invoke_path(invoke_path)  # refuses it
    return CreateComponent(
        name=name,
        endpoint_name=endpoint_name,
        variant_name=variant_name,
        model=model,
        partition_type=partition_type,
        devices_required=devices,
        cpu_cores=cores,
        memory_mib=memory,
        copies=copies,
        min_copies=min_copies,
        container=container,
        invoke_path=invoke_path,
    )


def parse_endpoint(raw: object) -> EndpointSpec:
    """An endpoint given as JSON (a request, or what is stored: `endpoint_json`), read and
    checked: `{name, tenantId, variants: [{name, poolId, instanceCount,
    acceleratorPartitionLayouts: [{acceleratorPartitionTypes: [...]}], pricePerInstanceHour?}]}`."""
    return endpoint_spec(create_endpoint_of(raw))


def relayout_spec(spec: EndpointSpec, raw: object) -> EndpointSpec:
    """An `endpoints.update` request given as JSON, `{name, variants: [{name,
    acceleratorPartitionLayouts}]}`, read and applied to the endpoint (`relayout`)."""
    return relayout(spec, relayout_endpoint_of(raw))


def parse_component(raw: object) -> ComponentSpec:
    """A component given as JSON (a request, or what is stored: `component_json`), read and
    checked. `devicesRequired` is 1 with a partition type (one partition, not one accelerator);
    any other value is refused."""
    return component_spec(create_component_of(raw))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _name(raw: object, field: str) -> str:
    """Text, or refused with `check_endpoint_name`'s message."""
    return raw if isinstance(raw, str) else check_endpoint_name(raw, field)


def _int(raw: object, field: str) -> int:
    """An instance count: an integer, or refused with `check_count`'s message."""
    if _is_int(raw):
        assert isinstance(raw, int)
        return raw
    return check_count(raw, field, 1, MAX_INSTANCES)


def _types(raw: object, field: str) -> tuple[str, ...]:
    """The one layout's partition types, as text; refused by the rules' messages when the layouts
    are not exactly one `{acceleratorPartitionTypes: [...]}`."""
    (entry,) = check_layout_entries(raw, field)
    types = entry.get("acceleratorPartitionTypes")
    where = f"{field}[0].acceleratorPartitionTypes"
    if not isinstance(types, list):
        raise partition_types_refused(where)
    for i, t in enumerate(types):
        if not isinstance(t, str):
            check_partition_type(t, f"{where}[{i}]")
    return tuple(types)


__all__ = [
    "CreateComponent",
    "CreateEndpoint",
    "NewLayout",
    "NewVariant",
    "RelayoutEndpoint",
    "create_component_of",
    "create_endpoint_of",
    "parse_component",
    "parse_endpoint",
    "relayout_endpoint_of",
    "relayout_spec",
]
