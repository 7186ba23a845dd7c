"""Inference endpoints on MIG partitions (docs/endpoints.md; seed 003): what an endpoint and a component ask
for, the checks on them, where a component's copies go, and how a layout changes live.

An endpoint's variant names a mig pool, how many of its nodes (instances) it takes, and one
partition layout (`acceleratorPartitionLayouts`, the seed's field names): every accelerator of every
instance is split the same way, so the one entry is not positional. The layout is checked against
the pool's GPU model as a real placement (`domain.catalog.layouts.validate`): every type must be a profile
of that GPU and the instances must fit on one; a failure is a refusal naming the type and the
reason, never a fallback to whole GPUs.

A component deploys one model on one partition type with a number of copies; each copy takes one
free partition of that type, and copies beyond the free partitions wait (`pending`, with the
shortfall). A type the endpoint did not declare is refused. Host CPU and memory stay host
resources, checked against each node's.

Changing the layout is where this goes past SageMaker, which makes it immutable: the instances are
re-cut one at a time through the layout gate, the copies on an instance moving first to free
partitions of their type elsewhere and coming back after, and no component ever drops below its
`minCopies`. `plan_relayout` decides that up front, or refuses naming the component and why.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from better_compute.domain.catalog import GpuModel, get_model, is_profile_name, normalize_profile_name
from better_compute.domain.catalog.layouts import (
    InstancePlacement,
    format_layout,
    layout_from_partition_types,
    validate,
)
from better_compute.domain.kernel.containers import (
    MAX_CPU,
    MIN_CPU,
    MIN_MEMORY_MIB,
    ContainerSpec,
    Probe,
    parse_container,
)
from better_compute.domain.kernel.errors import InvalidInput, InvalidState, LayoutRefused, UnknownProfile
from better_compute.domain.tenancy.tenancy import check_slug

if TYPE_CHECKING:
    from better_compute.domain.endpoints.commands import CreateComponent, CreateEndpoint, RelayoutEndpoint

NAME = re.compile(r"[A-Za-z0-9](-*[A-Za-z0-9])*")
"""Endpoint, variant and component names, as SageMaker spells them (`AllTraffic`, `summarizer`)."""
MAX_NAME = 63

MAX_VARIANTS = 10
"""Variants one endpoint may declare (SageMaker's limit on production variants)."""
MAX_INSTANCES = 64
"""Instances (nodes) one variant may take."""
MAX_PARTITION_TYPES = 7
"""Entries in one layout: one accelerator never holds more than seven MIG instances."""
MAX_COPIES = 1_000
"""Copies one component may ask for."""
MAX_CPU_CORES = 1_024
MAX_MEMORY_MIB = 16 * 1024 * 1024
"""Host memory one copy may ask for: 16 TiB, more than any node has."""
MAX_PRICE = Decimal(1000000)
"""The highest price per instance hour taken."""

DEFAULT_INVOKE_PATH = "/invocations"
"""SageMaker's container contract: inference is `POST /invocations` on the server's port."""
DEFAULT_SERVER_PORT = 8080
"""SageMaker's container contract: the model server listens on 8080."""
PING_PATH = "/ping"
"""SageMaker's container contract: `GET /ping` answers 200 once the model is loaded."""
MAX_INVOKE_PATH = 1024
_INVOKE_PATH = re.compile(r"^/[!-~]*$")


STATUSES = ("Creating", "InService", "Updating", "Failed", "Deleting")
"""An endpoint's status, as SageMaker names them."""

ENDPOINT_FIELDS = frozenset({"name", "tenantId", "variants"})
VARIANT_FIELDS = frozenset(
    {"name", "poolId", "instanceCount", "acceleratorPartitionLayouts", "pricePerInstanceHour"}
)
COMPONENT_FIELDS = frozenset(
    {
        "name",
        "endpointName",
        "variantName",
        "model",
        "partitionType",
        "devicesRequired",
        "cpuCores",
        "memoryMiB",
        "copies",
        "minCopies",
        "container",
        "invokePath",
    }
)


def check_endpoint_name(value: object, field: str = "name") -> str:
    """An endpoint, variant or component name: 1-63 letters, digits or inner hyphens."""
    if not isinstance(value, str) or len(value) > MAX_NAME or not NAME.fullmatch(value):
        shown = repr(value)[:70]
        raise InvalidInput(
            f"{field} must be 1 to {MAX_NAME} letters, digits or hyphens, starting and ending with a"
            f" letter or digit (such as AllTraffic), not {shown}",
            {"field": field},
        )
    return value


def check_fields(raw: object, allowed: frozenset[str], what: str, field: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{field} must be an object describing {what}", {"field": field})
    unknown = sorted(str(k) for k in raw if k not in allowed)
    if unknown:
        raise InvalidInput(
            f"{field} has unknown field {unknown[0]!r}; {what} takes {', '.join(sorted(allowed))}",
            {"field": f"{field}.{unknown[0]}"},
        )
    return raw


def check_count(raw: object, field: str, low: int, high: int, default: int | None = None) -> int:
    if raw is None and default is not None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= high:
        raise InvalidInput(
            f"{field} must be an integer from {low} to {high}, not {raw!r}"[:200], {"field": field}
        )
    return raw


def check_partition_type(raw: object, field: str) -> str:
    """`mig-<profile>` as the seed writes it (`mig-4g.20gb`); kept in that form, lowercased."""
    if not isinstance(raw, str) or not raw.strip().lower().startswith("mig-") or not is_profile_name(raw):
        raise InvalidInput(
            f"{field} must be a partition type such as mig-3g.40gb (mig- and a MIG profile), not {raw!r}"[
                :200
            ],
            {"field": field},
        )
    return f"mig-{normalize_profile_name(raw)}"


@dataclass(frozen=True, slots=True)
class Variant:
    """One production variant: `instance_count` nodes of the mig pool `pool_id`, each GPU split
    into `partition_types` (one entry per MIG instance)."""

    name: str
    pool_id: str
    instance_count: int
    partition_types: tuple[str, ...]
    price_per_instance_hour: Decimal | None = None


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    name: str
    tenant_id: str
    variants: tuple[Variant, ...]

    def variant(self, name: str) -> Variant | None:
        return next((v for v in self.variants if v.name == name), None)


def check_number(raw: object, field: str, high: Decimal, example: str, *, positive: bool = False) -> Decimal:
    """A decimal number from 0 (or above 0, `positive`) to `high`; `example` shows one in a refusal."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise InvalidInput(f"{field} must be a number, such as {example}", {"field": field})
    try:
        value = Decimal(str(raw))
    except InvalidOperation:
        raise InvalidInput(f"{field} must be a number, not {raw!r}"[:200], {"field": field}) from None
    low = "more than 0" if positive else "from 0"
    if not value.is_finite() or value < 0 or (positive and value == 0) or value > high:
        raise InvalidInput(f"{field} must be {low} and at most {high}, not {raw!r}"[:200], {"field": field})
    return value


def check_price(raw: object, field: str) -> Decimal | None:
    """A price per instance hour, in currency units (such as 25.25); None when not given."""
    return None if raw is None else check_number(raw, field, MAX_PRICE, "25.25")


def check_layout_entries(raw: object, field: str) -> Sequence[Mapping[str, Any]]:
    """`acceleratorPartitionLayouts`: exactly one entry, `{acceleratorPartitionTypes}`."""
    if not isinstance(raw, list) or len(raw) != 1:
        raise InvalidInput(
            f"{field} takes exactly one entry: it splits every accelerator of every instance the same"
            " way (the list is not positional)",
            {"field": field},
        )
    return [
        check_fields(raw[0], frozenset({"acceleratorPartitionTypes"}), "a partition layout", f"{field}[0]")
    ]


def partition_types_refused(where: str) -> InvalidInput:
    return InvalidInput(
        f"{where} must list 1 to {MAX_PARTITION_TYPES} partition types, one per MIG instance of a GPU",
        {"field": where},
    )


def check_partition_types(types: Sequence[object], field: str) -> tuple[str, ...]:
    """The one layout's `acceleratorPartitionTypes` (`field` names the layouts): 1 to
    MAX_PARTITION_TYPES partition types, one per MIG instance of a GPU."""
    where = f"{field}[0].acceleratorPartitionTypes"
    if not 1 <= len(types) <= MAX_PARTITION_TYPES:
        raise partition_types_refused(where)
    return tuple(check_partition_type(t, f"{where}[{i}]") for i, t in enumerate(types))


def variants_refused() -> InvalidInput:
    return InvalidInput(f"variants must list 1 to {MAX_VARIANTS} variants", {"field": "variants"})


def check_variant_count(variants: Sequence[object]) -> None:
    if not 1 <= len(variants) <= MAX_VARIANTS:
        raise variants_refused()


def endpoint_spec(asked: CreateEndpoint) -> EndpointSpec:
    """An `endpoints.create` request's checked fields, each refusal naming its field, in the order
    they were always checked in. The types are the command's (`domain.endpoints.commands`); what is
    checked here is what they may be."""
    name = check_endpoint_name(asked.name)
    tenant_id = check_slug(asked.tenant_id, "tenantId")
    check_variant_count(asked.variants)
    variants: list[Variant] = []
    for i, v in enumerate(asked.variants):
        where = f"variants[{i}]"
        variant = Variant(
            name=check_endpoint_name(v.name, f"{where}.name"),
            pool_id=check_slug(v.pool_id, f"{where}.poolId"),
            instance_count=check_count(v.instance_count, f"{where}.instanceCount", 1, MAX_INSTANCES),
            partition_types=check_partition_types(v.partition_types, f"{where}.acceleratorPartitionLayouts"),
            price_per_instance_hour=check_price(v.price_per_instance_hour, f"{where}.pricePerInstanceHour"),
        )
        if any(seen.name == variant.name for seen in variants):
            raise InvalidInput(f"variant {variant.name} is named twice", {"field": f"{where}.name"})
        variants.append(variant)
    return EndpointSpec(name, tenant_id, tuple(variants))


def check_variant_layout(variant: Variant, model: GpuModel | str) -> InstancePlacement:
    """Where one accelerator's partitions go on `model`, or a refusal naming the type and why: a
    type the GPU does not offer (profile names differ across GPUs: `mig-4g.20gb` is an A100 40GB's,
    an H100's is `mig-4g.40gb`), or types that do not fit on one GPU together."""
    gpu = get_model(model)
    where = f"variant {variant.name}"
    offered = ", ".join(f"mig-{p.name}" for p in gpu.profiles) or "none: it has no MIG"
    for t in variant.partition_types:
        if not gpu.mig_capable or gpu.find_profile(t) is None:
            raise UnknownProfile(
                f"{where}: partition type {t} is not offered by {gpu.id} (it offers {offered});"
                " there is no fallback to a whole GPU",
                {"variant": variant.name, "partitionType": t, "model": gpu.id, "reason": "unknown_profile"},
            )
    try:
        return validate(layout_from_partition_types(variant.partition_types), gpu)
    except LayoutRefused as refused:
        culprit = f"mig-{refused.details.get('profile', '')}"
        why = str(refused.message).rpartition(": ")[2]
        raise LayoutRefused(
            f"{where}: partition types {', '.join(variant.partition_types)} do not fit on one {gpu.id}:"
            f" {culprit}: {why}; there is no fallback to a whole GPU",
            {
                "variant": variant.name,
                "partitionType": culprit,
                "model": gpu.id,
                "reason": refused.details.get("reason"),
            },
        ) from refused


def variant_layout(variant: Variant) -> str:
    """The MIG layout, in the catalog's spelling, that splits each of the variant's accelerators
    (`mig-4g.20gb, mig-2g.10gb, mig-1g.5gb` is `mixed:4g.20gb+2g.10gb+1g.5gb`): what its instances'
    specs tell their GPUs."""
    return format_layout(layout_from_partition_types(variant.partition_types))


ALLOCATION_PREFIX = "endpoint:"


def endpoint_allocation_id(name: str, node: str) -> str:
    """The allocation under which an endpoint holds every atom of one instance once it is cut
    (`endpoint:<name>:<node>`): no tenant's booking, so no request lands on them and no quota counts
    them; one per node, so that one instance is re-cut while the others stay held."""
    return f"{ALLOCATION_PREFIX}{name}:{node}"


COPY_PREFIX = "copy:"


def copy_allocation_id(component: str, index: int) -> str:
    """The name under which a component's copy is handed to its node and run there
    (`copy:<component>:<index>`, a valid CDI device name): the same wherever the copy moves, so
    what its node reports of its container (`domain.fleet.replica_states`) is read by this name and
    the node the copy is on now."""
    return f"{COPY_PREFIX}{component}:{index}"


def copy_of(allocation_id: str) -> tuple[str, int] | None:
    """The component and copy index a copy's name stands for, or None for any other allocation."""
    if not allocation_id.startswith(COPY_PREFIX):
        return None
    component, sep, index = allocation_id[len(COPY_PREFIX) :].rpartition(":")
    return (component, int(index)) if sep and component and index.isdigit() else None


def endpoint_json(spec: EndpointSpec) -> dict[str, Any]:
    """The endpoint as `domain.endpoints.commands.parse_endpoint` takes it back (what is stored,
    and what is shown)."""
    return {
        "name": spec.name,
        "tenantId": spec.tenant_id,
        "variants": [
            {
                "name": v.name,
                "poolId": v.pool_id,
                "instanceCount": v.instance_count,
                "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": list(v.partition_types)}],
                **(
                    {"pricePerInstanceHour": str(v.price_per_instance_hour)}
                    if v.price_per_instance_hour is not None
                    else {}
                ),
            }
            for v in spec.variants
        ],
    }


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node of a variant's pool as provisioning sees it."""

    node: str
    gpus: int
    joined: bool
    """A daemon runs it: only a node with one is ever re-cut (the gate waits for its report)."""
    carries_pool_layout: bool
    cordoned: bool = False
    serving: str | None = None
    """The endpoint it already serves."""
    changing: bool = False
    """A layout change is under way on it."""
    booked: bool = False
    """A tenant's booking holds it now or later."""


@dataclass(frozen=True, slots=True)
class Picked:
    """The instances a variant takes, or why it cannot have them all (`reason`; nothing taken)."""

    nodes: tuple[str, ...]
    reason: str | None = None


def pick_instances(variant: Variant, candidates: Sequence[Candidate]) -> Picked:
    """`instance_count` idle nodes of the variant's pool, in name order: joined (a daemon will cut
    them), taking their layout from the control plane, with GPUs, not cordoned, serving no
    endpoint, under no layout change and booked by no tenant from now on. A shortfall takes none
    and says what held each other node back."""
    idle = [
        c.node
        for c in candidates
        if c.gpus
        and c.joined
        and c.carries_pool_layout
        and not (c.cordoned or c.serving or c.changing or c.booked)
    ]
    if len(idle) >= variant.instance_count:
        return Picked(tuple(sorted(idle)[: variant.instance_count]))
    why = Counter(
        "serve another endpoint"
        if c.serving
        else "are booked by tenants"
        if c.booked
        else "are changing layout"
        if c.changing
        else "are cordoned"
        if c.cordoned
        else "run no daemon (never joined)"
        if not c.joined
        else "keep their own layout (carriesPoolLayout false)"
        if not c.carries_pool_layout
        else "have no GPUs"
        for c in candidates
        if c.node not in idle
    )
    held = "; ".join(f"{n} {what}" for what, n in sorted(why.items()))
    return Picked(
        (),
        f"variant {variant.name} asks for {variant.instance_count} instances and pool {variant.pool_id}"
        f" has {len(idle)} idle nodes" + (f" ({held})" if held else ""),
    )


def endpoint_status(stored: str, changing: bool) -> str:
    """What an endpoint shows: a new one is `Creating` while any of its instances is being cut and
    `InService` once none is; `Updating` (a live relayout under way), `Failed` and `Deleting` are
    shown as stored."""
    if stored == "Creating":
        return "Creating" if changing else "InService"
    return stored


def relayout(spec: EndpointSpec, asked: RelayoutEndpoint) -> EndpointSpec:
    """An `endpoints.update` request applied to the endpoint: each named variant takes the new
    layout. Only layouts change live; a variant the endpoint lacks is refused."""
    check_variant_count(asked.variants)
    layouts: dict[str, tuple[str, ...]] = {}
    for i, v in enumerate(asked.variants):
        where = f"variants[{i}]"
        name = check_endpoint_name(v.name, f"{where}.name")
        if spec.variant(name) is None:
            raise InvalidInput(
                f"endpoint {spec.name} has no variant {name}"
                f" (it has {', '.join(x.name for x in spec.variants)})",
                {"field": f"{where}.name"},
            )
        layouts[name] = check_partition_types(v.partition_types, f"{where}.acceleratorPartitionLayouts")
    return replace(
        spec,
        variants=tuple(
            replace(v, partition_types=layouts[v.name]) if v.name in layouts else v for v in spec.variants
        ),
    )


def partitions_per_instance(variant: Variant, gpus_per_instance: int) -> dict[str, int]:
    """How many partitions of each type one instance holds: every GPU split the same way (the seed's
    A100 example: 8 GPUs of `4g+2g+1g` give 24, eight of each)."""
    per_gpu = Counter(variant.partition_types)
    return {t: n * gpus_per_instance for t, n in sorted(per_gpu.items())}


@dataclass(frozen=True, slots=True)
class ComponentSpec:
    """One model on one partition type: `copies` copies, each on a free partition of that type,
    never fewer than `min_copies` during a live relayout."""

    name: str
    endpoint_name: str
    variant_name: str
    model: str
    partition_type: str
    cpu_cores: Decimal
    memory_mib: int
    copies: int
    min_copies: int
    container: ContainerSpec | None = None
    """The model server each copy runs (`with_server_defaults` applied), None: none is started."""
    invoke_path: str = DEFAULT_INVOKE_PATH
    """Where an invocation is sent on the container's first port."""


def check_invoke_path(raw: object) -> str:
    """`invokePath`: from the root, printable ASCII without spaces, at most MAX_INVOKE_PATH."""
    if raw is None:
        return DEFAULT_INVOKE_PATH
    if not isinstance(raw, str) or len(raw) > MAX_INVOKE_PATH or not _INVOKE_PATH.match(raw):
        raise InvalidInput(
            f"invokePath must start with / and hold printable characters without spaces (at most"
            f" {MAX_INVOKE_PATH})",
            {"field": "invokePath"},
        )
    return raw


def with_server_defaults(container: ContainerSpec, cpu_cores: Decimal, memory_mib: int) -> ContainerSpec:
    """A copy's container with SageMaker's contract filled in where the request left it out: port
    8080 when it names none, readiness `GET /ping` on the first port, and the component's
    `cpuCores` and `memoryMiB` as its resources (raised to the container's least, 0.01 core and
    16 MiB). Applying it twice changes nothing (a stored component reads back the same)."""
    ports = container.ports or (DEFAULT_SERVER_PORT,)
    readiness = container.readiness or Probe(http_path=PING_PATH, http_port=ports[0])
    cpu = container.cpu if container.cpu is not None else round(max(float(cpu_cores), MIN_CPU), 3)
    memory = container.memory_mib if container.memory_mib is not None else max(memory_mib, MIN_MEMORY_MIB)
    return replace(container, ports=ports, readiness=readiness, cpu=min(cpu, MAX_CPU), memory_mib=memory)


def default_min_copies(copies: int) -> int:
    """`copies - 1`, at least 1 (a component of no copies has nothing to keep)."""
    return 0 if copies == 0 else max(1, copies - 1)


def check_devices_required(raw: object) -> int:
    """`devicesRequired` is 1 with a partition type (one partition, not one accelerator)."""
    if raw != 1 or isinstance(raw, bool):
        raise InvalidInput(
            f"devicesRequired must be 1 with a partition type (one partition, not {raw!r}); a model"
            " that needs more than one accelerator needs whole GPUs, which a partition never spans"[:300],
            {"field": "devicesRequired"},
        )
    return 1


def check_model(raw: object) -> str:
    """A model's name, 1 to 256 characters once stripped."""
    if not isinstance(raw, str) or not 1 <= len(raw.strip()) <= 256:
        raise InvalidInput("model must be the model's name, 1 to 256 characters", {"field": "model"})
    return raw.strip()


def check_cpu_cores(raw: object) -> Decimal:
    return check_number(raw, "cpuCores", Decimal(MAX_CPU_CORES), "1.5", positive=True)


def check_memory_mib(raw: object) -> int:
    return check_count(raw, "memoryMiB", 1, MAX_MEMORY_MIB)


def component_spec(asked: CreateComponent) -> ComponentSpec:
    """A `components.create` request's checked fields, in the order they were always checked in."""
    check_devices_required(asked.devices_required)
    model = check_model(asked.model)
    cores = check_cpu_cores(asked.cpu_cores)
    copies = check_count(asked.copies, "copies", 0, MAX_COPIES, default=1)
    min_copies = check_count(asked.min_copies, "minCopies", 0, copies, default=default_min_copies(copies))
    memory = check_memory_mib(asked.memory_mib)
    container = (
        None
        if asked.container is None
        else with_server_defaults(parse_container(asked.container, "container"), cores, memory)
    )
    return ComponentSpec(
        name=check_endpoint_name(asked.name),
        endpoint_name=check_endpoint_name(asked.endpoint_name, "endpointName"),
        variant_name=check_endpoint_name(asked.variant_name, "variantName"),
        model=model,
        partition_type=check_partition_type(asked.partition_type, "partitionType"),
        cpu_cores=cores,
        memory_mib=memory,
        copies=copies,
        min_copies=min_copies,
        container=container,
        invoke_path=check_invoke_path(asked.invoke_path),
    )


def component_json(component: ComponentSpec) -> dict[str, Any]:
    """The component as `domain.endpoints.commands.parse_component` takes it back (what is stored,
    and what is shown)."""
    return {
        "name": component.name,
        "endpointName": component.endpoint_name,
        "variantName": component.variant_name,
        "model": component.model,
        "partitionType": component.partition_type,
        "devicesRequired": 1,
        "cpuCores": str(component.cpu_cores),
        "memoryMiB": component.memory_mib,
        "copies": component.copies,
        "minCopies": component.min_copies,
        **({"container": component.container.document()} if component.container is not None else {}),
        "invokePath": component.invoke_path,
    }


def scaled(component: ComponentSpec, copies: object, min_copies: object = None) -> ComponentSpec:
    """The component at a new copy count (`components.scale`); `minCopies` follows the count
    (`copies - 1`, at least 1) unless given, and is never above it."""
    count = check_count(copies, "copies", 0, MAX_COPIES)
    floor = check_count(min_copies, "minCopies", 0, count, default=default_min_copies(count))
    return replace(component, copies=count, min_copies=floor)


def check_component_type(component: ComponentSpec, endpoint: EndpointSpec) -> Variant:
    """The variant a component runs on; refuses a variant the endpoint lacks and a partition type
    the variant did not declare (no fallback to a whole GPU)."""
    variant = endpoint.variant(component.variant_name)
    if variant is None:
        raise InvalidInput(
            f"endpoint {endpoint.name} has no variant {component.variant_name}"
            f" (it has {', '.join(v.name for v in endpoint.variants)})",
            {"field": "variantName"},
        )
    if component.partition_type not in variant.partition_types:
        declared = ", ".join(sorted(set(variant.partition_types)))
        raise InvalidInput(
            f"component {component.name} asks for {component.partition_type}, which variant {variant.name}"
            f" of endpoint {endpoint.name} does not declare (it declares {declared}); there is no"
            " fallback to a whole GPU",
            {
                "field": "partitionType",
                "partitionType": component.partition_type,
                "declared": sorted(set(variant.partition_types)),
            },
        )
    return variant


def check_type_unchanged(component: ComponentSpec, asked: object) -> None:
    """A component's partition type is fixed for its life: moving a model to another type is a
    new component."""
    if asked is not None and check_partition_type(asked, "partitionType") != component.partition_type:
        raise InvalidState(
            f"component {component.name}'s partition type is {component.partition_type} for its life;"
            " create a new component for another type",
            {"field": "partitionType", "partitionType": component.partition_type},
        )


@dataclass(frozen=True, slots=True)
class Partition:
    """One MIG instance of an endpoint: the atom that books it, its node and GPU, and its type."""

    atom_id: str
    node: str
    gpu_id: str
    partition_type: str


@dataclass(frozen=True, slots=True)
class HostRoom:
    """What a node's host has left for copies: CPU cores and memory (MiB)."""

    cpu_cores: Decimal
    memory_mib: int


@dataclass(frozen=True, slots=True)
class CopyPlan:
    """Where new copies go (`placed`, one partition each) and how many wait (`pending`, with why)."""

    placed: tuple[Partition, ...]
    pending: int
    reason: str | None = None


def place_copies(
    component: ComponentSpec,
    wanted: int,
    partitions: Sequence[Partition],
    taken: set[str],
    rooms: Mapping[str, HostRoom],
    copies_on: Mapping[str, int] | None = None,
) -> CopyPlan:
    """Place `wanted` more copies of `component` on free partitions of its type (not in `taken`),
    each on a node whose host still has the copy's CPU cores and memory. Copies spread over nodes
    (the node with the fewest of this component's copies first, `copies_on`), so losing one
    instance takes as few of them as possible; the rest are `pending` with the shortfall's reason."""
    on = Counter(copies_on or {})
    cores = {n: r.cpu_cores for n, r in rooms.items()}
    memory = {n: r.memory_mib for n, r in rooms.items()}
    free = sorted(
        (p for p in partitions if p.partition_type == component.partition_type and p.atom_id not in taken),
        key=lambda p: (p.node, p.gpu_id, p.atom_id),
    )
    placed: list[Partition] = []
    short_host = False
    for _ in range(wanted):
        fitting = [
            p
            for p in free
            if p.node in cores
            and cores[p.node] >= component.cpu_cores
            and memory[p.node] >= component.memory_mib
        ]
        if not fitting:
            short_host = bool(free)
            break
        chosen = min(fitting, key=lambda p: (on[p.node], p.node, p.gpu_id, p.atom_id))
        placed.append(chosen)
        free.remove(chosen)
        on[chosen.node] += 1
        cores[chosen.node] -= component.cpu_cores
        memory[chosen.node] -= component.memory_mib
    pending = wanted - len(placed)
    reason = None
    if pending:
        reason = (
            f"{pending} copies wait: the nodes with a free {component.partition_type} partition lack the"
            f" host room ({component.cpu_cores} CPU cores and {component.memory_mib} MiB a copy)"
            if short_host
            else f"{pending} copies wait: no free {component.partition_type} partition"
        )
    return CopyPlan(tuple(placed), pending, reason)


@dataclass(frozen=True, slots=True)
class RelayoutStep:
    """One instance re-cut: the copies that move off it first (component, to node; None: it waits,
    its component staying at or above `minCopies`), then those that come back to it."""

    node: str
    moves: tuple[tuple[str, str | None], ...]
    returns: tuple[str, ...]


def plan_relayout(
    nodes: Sequence[str],
    gpus: Mapping[str, int],
    old_types: Sequence[str],
    new_types: Sequence[str],
    components: Sequence[ComponentSpec],
    copies: Mapping[str, Sequence[str]],
) -> tuple[RelayoutStep, ...]:
    """The rolling re-cut of an endpoint's instances (`nodes`, in order; `gpus` per node) from
    `old_types` to `new_types` per GPU, with each component's placed copies by node (`copies`):
    every step keeps every component at or above its `minCopies`, and every copy has a partition
    again at the end. Refuses (INVALID_STATE), naming the component and why, when that is
    impossible; host room is checked when the copies are placed, not here."""
    old_per_gpu, new_per_gpu = Counter(old_types), Counter(new_types)
    by_name = {c.name: c for c in components}
    where: dict[str, Counter[str]] = {c.name: Counter(copies.get(c.name, ())) for c in components}
    used: dict[str, Counter[str]] = {n: Counter() for n in nodes}
    for c in components:
        for node, n in where[c.name].items():
            used[node][c.partition_type] += n
    cut: set[str] = set()

    def capacity(node: str, t: str) -> int:
        return (new_per_gpu if node in cut else old_per_gpu)[t] * gpus.get(node, 0)

    def free_elsewhere(t: str, but: str) -> str | None:
        room = [n for n in nodes if n != but and capacity(n, t) - used[n][t] > 0]
        return min(room, key=lambda n: (used[n][t], n)) if room else None

    for c in components:  # the end state must hold every placed copy
        placed = sum(where[c.name].values())
        total = sum(new_per_gpu[c.partition_type] * gpus.get(n, 0) for n in nodes)
        need = sum(sum(where[o.name].values()) for o in components if o.partition_type == c.partition_type)
        if placed and need > total:
            raise InvalidState(
                f"component {c.name} runs {placed} copies on {c.partition_type}, and the new layout gives"
                f" the endpoint {total} {c.partition_type} partitions for {need} copies; scale the"
                " components of that type down first, or keep a layout that has room",
                {"component": c.name, "partitionType": c.partition_type, "partitions": total, "copies": need},
            )
    steps: list[RelayoutStep] = []
    for node in nodes:
        moves: list[tuple[str, str | None]] = []
        waiting: list[str] = []
        for t in sorted({by_name[n].partition_type for n in where if where[n][node]}):
            names = sorted(n for n in where if by_name[n].partition_type == t and where[n][node])
            # Each component first moves the copies it needs to stay at its floor, then the rest:
            # scarce room goes where a floor depends on it (as `service.endpoints.components.plan_in` places).
            stay = {n: sum(where[n].values()) - where[n][node] for n in names}
            first = {n: min(where[n][node], max(0, by_name[n].min_copies - stay[n])) for n in names}
            rounds = [(n, first[n], True) for n in names] + [
                (n, where[n][node] - first[n], False) for n in names
            ]
            for name, count, floor in rounds:
                c = by_name[name]
                for _ in range(count):
                    target = free_elsewhere(t, node)
                    where[name][node] -= 1
                    used[node][t] -= 1
                    if target is not None:
                        where[name][target] += 1
                        used[target][t] += 1
                    elif floor:
                        live = sum(where[name].values()) - where[name][node]
                        raise InvalidState(
                            f"component {name} would run {live} copies while instance {node} is re-cut,"
                            f" below its minCopies {c.min_copies}: no other instance has a free"
                            f" {t} partition; lower minCopies or add an instance",
                            {"component": name, "node": node, "minCopies": c.min_copies, "copies": live},
                        )
                    else:
                        waiting.append(name)
                    moves.append((name, target))
        cut.add(node)
        returns: list[str] = []
        for name in waiting:
            t = by_name[name].partition_type
            target = node if capacity(node, t) - used[node][t] > 0 else free_elsewhere(t, "")
            if target is None:  # the end-state check above makes this unreachable; kept as a guard
                raise InvalidState(
                    f"component {name} has no {t} partition after the relayout", {"component": name}
                )
            where[name][target] += 1
            used[target][t] += 1
            returns.append(name)
        steps.append(RelayoutStep(node, tuple(moves), tuple(returns)))
    return tuple(steps)


__all__ = [
    "ALLOCATION_PREFIX",
    "COMPONENT_FIELDS",
    "ENDPOINT_FIELDS",
    "MAX_COPIES",
    "MAX_INSTANCES",
    "MAX_PARTITION_TYPES",
    "MAX_VARIANTS",
    "STATUSES",
    "VARIANT_FIELDS",
    "Candidate",
    "ComponentSpec",
    "CopyPlan",
    "EndpointSpec",
    "HostRoom",
    "Partition",
    "Picked",
    "RelayoutStep",
    "Variant",
    "check_component_type",
    "check_count",
    "check_cpu_cores",
    "check_devices_required",
    "check_endpoint_name",
    "check_fields",
    "check_layout_entries",
    "check_memory_mib",
    "check_model",
    "check_number",
    "check_partition_type",
    "check_partition_types",
    "check_price",
    "check_type_unchanged",
    "check_variant_count",
    "check_variant_layout",
    "component_json",
    "component_spec",
    "default_min_copies",
    "endpoint_allocation_id",
    "endpoint_json",
    "endpoint_spec",
    "endpoint_status",
    "partition_types_refused",
    "partitions_per_instance",
    "pick_instances",
    "place_copies",
    "plan_relayout",
    "relayout",
    "scaled",
    "variant_layout",
    "variants_refused",
]
