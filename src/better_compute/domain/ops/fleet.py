"""The fleet file: clusters, nodes with their GPUs, pools, tenants and device classes, as validated values.

The file only describes hardware to simulate and how to group it; atoms still come from node reports.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from better_compute.domain import catalog
from better_compute.domain.catalog import layouts
from better_compute.domain.fleet.cluster_kinds import LOCAL, SlurmSettings, check_cluster_kind
from better_compute.domain.fleet.pools import PoolSettings, SharingMode, check_mode, check_settings
from better_compute.domain.kernel.errors import DomainError, InvalidInput
from better_compute.domain.placement.device_classes import DeviceClassSpec, parse_spec
from better_compute.domain.tenancy.quota import parse_quota_limits
from better_compute.domain.tenancy.tenancy import check_name, check_ref


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cluster: str
    gpu_model: str
    gpu_count: int
    mig_layout: str | None = None
    numa_nodes: int = 1
    nvlink: bool = False
    carries_pool_layout: bool = True
    """Whether the node's host config takes its MIG layout from its pool (docs/concepts.md, the gate); False:
    it keeps the layout it has (`gpus.migLayout`), and nothing repartitions it."""
    host_cpu_cores: int | None = None
    host_memory_mib: int | None = None
    """The host's CPU cores and memory (`host: {cpuCores, memoryGiB}`), which an endpoint's component
    copies ask for beside their partition (docs/endpoints.md#limits); None: not declared, not checked."""
    joined: bool = True
    """Whether the node runs a daemon (has joined): not a fleet file's key (`serve --fleet` joins
    every node it simulates); a replay of today's fleet takes it from each node's record, since an
    endpoint takes only joined nodes."""


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    region: str
    residency: tuple[str, ...] = ()
    kind: str = LOCAL
    slurm: SlurmSettings | None = None


@dataclass(frozen=True)
class PoolSpec:
    name: str
    cluster: str
    mode: SharingMode
    owner: str
    nodes: tuple[str, ...]
    settings: PoolSettings = field(default_factory=PoolSettings)
    owner_quota: Mapping[str, int] = field(default_factory=dict)
    meter: str | None = None


@dataclass(frozen=True)
class TenantSpec:
    id: str
    name: str


@dataclass(frozen=True)
class FleetSpec:
    tenants: tuple[TenantSpec, ...]
    clusters: tuple[ClusterSpec, ...]
    nodes: tuple[NodeSpec, ...]
    pools: tuple[PoolSpec, ...]
    device_classes: tuple[DeviceClassSpec, ...] = ()
    generic_models: tuple[catalog.GpuModel, ...] = ()
    """GPU models the catalog does not know, declared by the file (`gpuModels`) for its nodes to name."""

    def gpu_model_of(self, model_id: str) -> catalog.GpuModel:
        """The catalog model, or the declared generic one, a node names."""
        for generic in self.generic_models:
            if generic.id == model_id:
                return generic
        return catalog.get_model(model_id)

    @cached_property
    def _pool_by_node(self) -> dict[str, PoolSpec]:
        return {n: p for p in self.pools for n in p.nodes}

    def pool_of_node(self, node: str) -> PoolSpec | None:
        return self._pool_by_node.get(node)

    def layout_of_node(self, node: NodeSpec) -> str:
        """A node's own layout wins; else its mig pool's; else MIG stays disabled."""
        if node.mig_layout:
            return node.mig_layout
        pool = self.pool_of_node(node.name)
        if pool is not None and pool.mode == "mig":
            return pool.settings.layout
        return "all-disabled"


_KEYS: dict[str, frozenset[str]] = {
    "fleet": frozenset({"tenants", "clusters", "pools", "deviceClasses", "gpuModels"}),
    "gpuModel": frozenset({"name", "memoryGiB"}),
    "deviceClass": frozenset({"name", "class", "selector"}),
    "tenant": frozenset({"id", "name"}),
    "cluster": frozenset({"name", "region", "residency", "nodes", "kind", "slurm"}),
    "slurm": frozenset({"controller", "partitions", "account", "access", "accounts"}),
    "node": frozenset({"name", "replicas", "gpus", "numaNodes", "nvlink", "carriesPoolLayout", "host"}),
    "gpus": frozenset({"model", "count", "migLayout"}),
    "host": frozenset({"cpuCores", "memoryGiB"}),
    "pool": frozenset({"name", "cluster", "mode", "owner", "policy", "nodes", "ownerQuota", "meter"}),
}
"""The keys each part of a fleet file may have: a misspelt key (`ownerquota`, `migLayot`) is refused
rather than ignored, since ignoring it silently drops what the operator meant."""
NODE_KEYS = _KEYS["node"]
"""The keys a node entry may have (a replay's added node takes these, and where it goes)."""


def read_mapping(raw: Any, kind: str, where: str) -> Mapping[str, Any]:
    """`raw` as one part (`kind`) of a fleet file at `where`, its keys checked against `_KEYS`."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{where} must be a mapping", {"field": where})
    unknown = sorted(str(k) for k in raw if k not in _KEYS[kind])
    if unknown:
        raise InvalidInput(
            f"{where or 'the fleet file'}: unknown key {unknown[0]!r} "
            f"(a {kind} takes {', '.join(sorted(_KEYS[kind]))})",
            {"field": f"{where}.{unknown[0]}" if where else unknown[0]},
        )
    return raw


def _name(raw: object, kind: str) -> str | None:
    name = raw.get("name") if isinstance(raw, Mapping) else None
    return f"{kind} {name}" if isinstance(name, str) and name else None


@contextmanager
def _at(name: str | None, where: str) -> Iterator[None]:
    """Errors raised while reading one node or pool name it (`name`, such as `pool h100`) and its
    place in the file (`where`), whichever rule raised them."""
    try:
        yield
    except DomainError as exc:
        if name is None or exc.message.startswith(name):
            raise
        place = "" if exc.message.startswith(where) else f" ({where})"
        raise type(exc)(f"{name}{place}: {exc.message}", exc.details) from exc


def _req(raw: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in raw or raw[key] in (None, ""):
        raise InvalidInput(f"{where}: missing {key!r}", {"field": f"{where}.{key}"})
    return raw[key]


def _id(raw: Mapping[str, Any], key: str, where: str) -> str:
    """A required id, held to the same rule as ids named through the API (`check_ref`)."""
    return check_ref(str(_req(raw, key, where)), f"{where}.{key}")


def _int(raw: Mapping[str, Any], key: str, default: int, where: str, most: int | None = None) -> int:
    """A whole number of at least 1 (and at most `most`): `true` and `"3"` are refused, not read
    as 1 and 3."""
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(
            f"{where}: {key} must be an integer of at least 1, not {value!r}", {"field": f"{where}.{key}"}
        )
    if most is not None and value > most:
        raise InvalidInput(
            f"{where}: {key} must be at most {most:,}, not {value:,}",
            {"field": f"{where}.{key}", "limit": most},
        )
    return value


MAX_FLEET_FILE_NODES = 100_000
"""The most nodes a fleet file describes, `replicas` expanded: ten times the 10,000 nodes
`bench/ingest.py` loads. Counted as the file is read, so a `replicas` of a billion is refused
before a node is made."""
MAX_NODE_GPUS = 32
"""The most GPUs a fleet file's node has: what the driver numbers on one machine
(`/dev/nvidia0` to `/dev/nvidia31`)."""
MAX_NUMA_NODES = 64
"""The most NUMA nodes a fleet file's node has."""


def _check_room(made: int, where: str) -> None:
    if made > MAX_FLEET_FILE_NODES:
        raise InvalidInput(
            f"{where}: a fleet file describes at most {MAX_FLEET_FILE_NODES:,} nodes (replicas counted)",
            {"field": where, "limit": MAX_FLEET_FILE_NODES},
        )


def _bool(raw: Mapping[str, Any], key: str, default: bool, where: str) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise InvalidInput(
            f"{where}: {key} must be true or false, not {value!r}", {"field": f"{where}.{key}"}
        )
    return value


def _list(raw: Any, where: str) -> Sequence[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidInput(f"{where} must be a list", {"field": where})
    return raw


def default_meter(mode: str, model_id: str | None) -> str:
    family = (model_id or "gpu").split("-")[0].lower()
    return f"gpu.{family}.hours"


def parse_fleet(raw: Mapping[str, Any]) -> FleetSpec:
    """The fleet file as validated values; every refusal names the node or pool at fault."""
    if not isinstance(raw, Mapping):
        raise InvalidInput("a fleet file is a mapping with clusters, pools and tenants")
    read_mapping(raw, "fleet", "")
    generic = _generic_models(raw.get("gpuModels"))
    tenants: list[TenantSpec] = []
    for i, t in enumerate(_list(raw.get("tenants"), "tenants")):
        where = f"tenants[{i}]"
        tenant = read_mapping(t, "tenant", where)
        tid = _id(tenant, "id", where)
        tenants.append(TenantSpec(id=tid, name=check_name(str(tenant.get("name", tid)), f"{where}.name")))
    clusters: list[ClusterSpec] = []
    nodes: list[NodeSpec] = []
    for i, c in enumerate(_list(raw.get("clusters"), "clusters")):
        cluster, its_nodes = cluster_spec(c, f"clusters[{i}]", generic, MAX_FLEET_FILE_NODES - len(nodes))
        clusters.append(cluster)
        nodes.extend(its_nodes)
    seen_names: set[str] = set()
    for spec in nodes:
        if spec.name in seen_names:
            raise InvalidInput(
                f"node names must be unique across the fleet: {spec.name} is named twice",
                {"field": "clusters", "node": spec.name},
            )
        seen_names.add(spec.name)
    pools: list[PoolSpec] = []
    seen_nodes: set[str] = set()
    by_name = {n.name: n for n in nodes}
    for i, p in enumerate(_list(raw.get("pools"), "pools")):
        where = f"pools[{i}]"
        with _at(_name(p, "pool"), where):
            pools.append(pool_spec(read_mapping(p, "pool", where), where, by_name, seen_nodes, generic))
    return FleetSpec(
        tenants=tuple(tenants),
        clusters=tuple(clusters),
        nodes=tuple(nodes),
        pools=tuple(pools),
        device_classes=_device_classes(raw.get("deviceClasses")),
        generic_models=tuple(generic.values()),
    )


def cluster_spec(
    raw: object, where: str, generic: Mapping[str, catalog.GpuModel], room: int = MAX_FLEET_FILE_NODES
) -> tuple[ClusterSpec, list[NodeSpec]]:
    """One entry of a fleet file's `clusters` (at `where`) and the nodes it lists, `replicas`
    expanded, at most `room` of them; a replay's fleet changes add a cluster through it too
    (`fleet_changes`)."""
    cluster_raw = read_mapping(raw, "cluster", where)
    name = _id(cluster_raw, "name", where)
    slurm_raw = cluster_raw.get("slurm")
    slurm_spec = None if slurm_raw is None else read_mapping(slurm_raw, "slurm", f"{where}.slurm")
    kind, slurm = check_cluster_kind(cluster_raw.get("kind", LOCAL), slurm_spec, where)
    cluster = ClusterSpec(
        name=name,
        region=check_name(str(_req(cluster_raw, "region", where)), f"{where}.region"),
        residency=tuple(str(r) for r in _list(cluster_raw.get("residency"), f"{where}.residency")),
        kind=kind,
        slurm=slurm,
    )
    nodes: list[NodeSpec] = []
    for j, n in enumerate(_list(cluster_raw.get("nodes"), f"{where}.nodes")):
        nwhere = f"{where}.nodes[{j}]"
        with _at(_name(n, "node"), nwhere):
            nodes.extend(node_specs(read_mapping(n, "node", nwhere), name, nwhere, generic))
        _check_room(len(nodes) + MAX_FLEET_FILE_NODES - room, nwhere)
    return cluster, nodes


MAX_GENERIC_MODELS = 64
"""Generic models one fleet file may declare (Alibaba's openb trace names 8)."""
MAX_GENERIC_MEMORY_GIB = 4096


def _generic_models(raw: Any) -> dict[str, catalog.GpuModel]:
    """`gpuModels`: GPU models the catalog does not know, each `{name, memoryGiB}`, which the file's
    nodes may then name (`gpus.model`): a trace's `T4` or undisclosed `G2`. A generic model is a
    whole GPU with no MIG: its atoms are whole GPUs, or a time-slice or MPS pool's slots; a MIG
    layout or a `mig` pool on it is refused. A name the catalog knows is refused (the catalog's facts
    win), so an ordinary fleet file's unknown model is still refused unless it is declared here."""
    items = _list(raw, "gpuModels")
    if len(items) > MAX_GENERIC_MODELS:
        raise InvalidInput(
            f"gpuModels declares at most {MAX_GENERIC_MODELS} models, not {len(items)}",
            {"field": "gpuModels", "limit": MAX_GENERIC_MODELS},
        )
    found: dict[str, catalog.GpuModel] = {}
    for i, g in enumerate(items):
        where = f"gpuModels[{i}]"
        item = read_mapping(g, "gpuModel", where)
        name = check_name(str(_req(item, "name", where)), f"{where}.name")
        if catalog.find_model(name) is not None:
            raise InvalidInput(
                f"{where}: {name} is a catalog model (catalog.get_model); name it in a node without"
                f" declaring it",
                {"field": f"{where}.name"},
            )
        if name.lower() in {k.lower() for k in found}:
            raise InvalidInput(f"{where}: GPU model {name} is declared twice", {"field": f"{where}.name"})
        memory = _int(item, "memoryGiB", 16, where)
        if memory > MAX_GENERIC_MEMORY_GIB:
            raise InvalidInput(
                f"{where}: memoryGiB is at most {MAX_GENERIC_MEMORY_GIB}", {"field": f"{where}.memoryGiB"}
            )
        found[name] = catalog.GpuModel(
            id=name,
            name=name,
            memory_gib=float(memory),
            usable_gib=float(memory),
            mig_capable=False,
            products=(name,),
        )
    return found


def _device_classes(raw: Any) -> tuple[DeviceClassSpec, ...]:
    """`deviceClasses`: each `{name, class, selector}` as `deviceClasses.create` takes it; a name
    given twice is refused, since the second could only contradict or repeat the first."""
    found: dict[str, DeviceClassSpec] = {}
    for i, d in enumerate(_list(raw, "deviceClasses")):
        where = f"deviceClasses[{i}]"
        with _at(_name(d, "device class"), where):
            item = read_mapping(d, "deviceClass", where)
            spec = parse_spec(item.get("name"), item.get("class"), item.get("selector"), where)
        if spec.name in found:
            raise InvalidInput(
                f"{where}: device class {spec.name} is named twice", {"field": f"{where}.name"}
            )
        found[spec.name] = spec
    return tuple(found.values())


def node_specs(
    node: Mapping[str, Any], cluster: str, where: str, generic: Mapping[str, catalog.GpuModel]
) -> list[NodeSpec]:
    base = _id(node, "name", where)
    gpus = read_mapping(_req(node, "gpus", where), "gpus", f"{where}.gpus")
    named = str(_req(gpus, "model", f"{where}.gpus"))
    model = generic[named] if named in generic else catalog.get_model(named)
    count = _int(gpus, "count", 8, f"{where}.gpus", MAX_NODE_GPUS)
    layout = gpus.get("migLayout")
    if layout is not None:
        layouts.validate(str(layout), model)
    replicas = _int(node, "replicas", 1, where, MAX_FLEET_FILE_NODES)
    numa_nodes = _int(node, "numaNodes", 2 if count >= 4 else 1, where, MAX_NUMA_NODES)
    nvlink = _bool(node, "nvlink", count > 1, where)
    carries = _bool(node, "carriesPoolLayout", True, where)
    cores, memory = _host(node.get("host"), f"{where}.host")
    return [
        NodeSpec(
            name=base if replicas == 1 else f"{base}-{k + 1}",
            cluster=cluster,
            gpu_model=model.id,
            gpu_count=count,
            mig_layout=str(layout) if layout is not None else None,
            numa_nodes=numa_nodes,
            nvlink=nvlink,
            carries_pool_layout=carries,
            host_cpu_cores=cores,
            host_memory_mib=memory,
        )
        for k in range(replicas)
    ]


MAX_HOST_CPU_CORES = 4096
MAX_HOST_MEMORY_GIB = 65536


def _host(raw: Any, where: str) -> tuple[int | None, int | None]:
    """A node's `host: {cpuCores, memoryGiB}` (each optional): cores up to 4,096, memory up to
    64 TiB; the memory is kept in MiB."""
    if raw is None:
        return None, None
    host = read_mapping(raw, "host", where)
    cores = _int(host, "cpuCores", 1, where) if "cpuCores" in host else None
    memory = _int(host, "memoryGiB", 1, where) if "memoryGiB" in host else None
    if cores is not None and cores > MAX_HOST_CPU_CORES:
        raise InvalidInput(
            f"{where}: cpuCores is at most {MAX_HOST_CPU_CORES}", {"field": f"{where}.cpuCores"}
        )
    if memory is not None and memory > MAX_HOST_MEMORY_GIB:
        raise InvalidInput(
            f"{where}: memoryGiB is at most {MAX_HOST_MEMORY_GIB}", {"field": f"{where}.memoryGiB"}
        )
    return cores, None if memory is None else memory * 1024


def pool_spec(
    pool: Mapping[str, Any],
    where: str,
    by_name: Mapping[str, NodeSpec],
    seen_nodes: set[str],
    generic: Mapping[str, catalog.GpuModel],
) -> PoolSpec:
    mode = check_mode(str(_req(pool, "mode", where)))
    members = tuple(str(n) for n in _list(pool.get("nodes"), f"{where}.nodes"))
    cluster = _id(pool, "cluster", where)
    for n in members:
        spec = by_name.get(n)
        if spec is None:
            raise InvalidInput(f"{where}: unknown node {n!r}", {"field": f"{where}.nodes"})
        if spec.cluster != cluster:
            raise InvalidInput(f"{where}: node {n!r} is not in cluster {cluster!r}")
        if n in seen_nodes:
            raise InvalidInput(f"{where}: node {n!r} already belongs to another pool")
        seen_nodes.add(n)
    policy = pool.get("policy") or {}
    if not isinstance(policy, Mapping):
        raise InvalidInput(f"{where}: policy must be a mapping", {"field": f"{where}.policy"})
    settings = check_settings(mode, policy, where, without_nodes=not members)
    if mode == "mig":
        checked: set[tuple[str, str]] = set()
        for n in members:
            key = (by_name[n].mig_layout or settings.layout, by_name[n].gpu_model)
            if key not in checked:
                with _at(f"node {n} ({key[1]})", ""):
                    layouts.validate(key[0], generic.get(key[1]) or key[1])
                checked.add(key)
    first_model = by_name[members[0]].gpu_model if members else None
    return PoolSpec(
        name=_id(pool, "name", where),
        cluster=cluster,
        mode=mode,
        owner=_id(pool, "owner", where),
        nodes=members,
        settings=settings,
        owner_quota={
            str(k): v
            for k, v in parse_quota_limits(pool.get("ownerQuota") or {}, f"{where}.ownerQuota").items()
        },
        meter=str(pool.get("meter") or default_meter(mode, first_model)),
    )
