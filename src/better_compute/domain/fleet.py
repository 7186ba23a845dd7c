"""The fleet file: clusters, nodes with their GPUs, pools and tenants, as validated values.

The file only describes hardware to simulate and how to group it; atoms still come from node reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from better_compute.domain import catalog, layouts
from better_compute.domain.errors import InvalidInput
from better_compute.domain.pools import PoolSettings, SharingMode, check_mode, check_settings
from better_compute.domain.quota import parse_quota_limits
from better_compute.domain.tenancy import check_name, check_ref


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cluster: str
    gpu_model: str
    gpu_count: int
    mig_layout: str | None = None
    numa_nodes: int = 1
    nvlink: bool = False


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    region: str
    residency: tuple[str, ...] = ()


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


def _req(raw: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in raw or raw[key] in (None, ""):
        raise InvalidInput(f"{where}: missing {key!r}", {"field": f"{where}.{key}"})
    return raw[key]


def _id(raw: Mapping[str, Any], key: str, where: str) -> str:
    """A required id, held to the same rule as ids named through the API (`check_ref`)."""
    return check_ref(str(_req(raw, key, where)), f"{where}.{key}")


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
    if not isinstance(raw, Mapping):
        raise InvalidInput("a fleet file is a mapping with clusters, pools and tenants")
    tenants = tuple(
        TenantSpec(
            id=_id(t, "id", f"tenants[{i}]"),
            name=check_name(str(t.get("name", t["id"])), f"tenants[{i}].name"),
        )
        for i, t in enumerate(_list(raw.get("tenants"), "tenants"))
    )
    clusters: list[ClusterSpec] = []
    nodes: list[NodeSpec] = []
    for i, c in enumerate(_list(raw.get("clusters"), "clusters")):
        where = f"clusters[{i}]"
        name = _id(c, "name", where)
        clusters.append(
            ClusterSpec(
                name=name,
                region=check_name(str(_req(c, "region", where)), f"{where}.region"),
                residency=tuple(c.get("residency", [])),
            )
        )
        for j, n in enumerate(_list(c.get("nodes"), f"{where}.nodes")):
            nwhere = f"{where}.nodes[{j}]"
            gpus = _req(n, "gpus", nwhere)
            model = catalog.get_model(str(_req(gpus, "model", f"{nwhere}.gpus")))
            count = int(gpus.get("count", 8))
            layout = gpus.get("migLayout")
            if layout is not None:
                layouts.validate(str(layout), model)
            replicas = int(n.get("replicas", 1))
            for k in range(replicas):
                base = _id(n, "name", nwhere)
                nodes.append(
                    NodeSpec(
                        name=base if replicas == 1 else f"{base}-{k + 1}",
                        cluster=name,
                        gpu_model=model.id,
                        gpu_count=count,
                        mig_layout=str(layout) if layout is not None else None,
                        numa_nodes=int(n.get("numaNodes", 2 if count >= 4 else 1)),
                        nvlink=bool(n.get("nvlink", count > 1)),
                    )
                )
    node_names = [n.name for n in nodes]
    if len(set(node_names)) != len(node_names):
        raise InvalidInput("node names must be unique across the fleet")
    pools: list[PoolSpec] = []
    seen_nodes: set[str] = set()
    by_name = {n.name: n for n in nodes}
    for i, p in enumerate(_list(raw.get("pools"), "pools")):
        where = f"pools[{i}]"
        mode = check_mode(str(_req(p, "mode", where)))
        members = tuple(str(n) for n in _list(p.get("nodes"), f"{where}.nodes"))
        cluster = _id(p, "cluster", where)
        for n in members:
            spec = by_name.get(n)
            if spec is None:
                raise InvalidInput(f"{where}: unknown node {n!r}", {"field": f"{where}.nodes"})
            if spec.cluster != cluster:
                raise InvalidInput(f"{where}: node {n!r} is not in cluster {cluster!r}")
            if n in seen_nodes:
                raise InvalidInput(f"{where}: node {n!r} already belongs to another pool")
            seen_nodes.add(n)
        settings = check_settings(mode, p.get("policy") or {}, where)
        if mode == "mig":
            for node_layout, node_model in {
                (by_name[n].mig_layout or settings.layout, by_name[n].gpu_model) for n in members
            }:
                layouts.validate(node_layout, node_model)
        first_model = by_name[members[0]].gpu_model if members else None
        pools.append(
            PoolSpec(
                name=_id(p, "name", where),
                cluster=cluster,
                mode=mode,
                owner=_id(p, "owner", where),
                nodes=members,
                settings=settings,
                owner_quota={
                    str(k): v
                    for k, v in parse_quota_limits(p.get("ownerQuota") or {}, f"{where}.ownerQuota").items()
                },
                meter=str(p.get("meter") or default_meter(mode, first_model)),
            )
        )
    return FleetSpec(tenants=tenants, clusters=tuple(clusters), nodes=tuple(nodes), pools=tuple(pools))
