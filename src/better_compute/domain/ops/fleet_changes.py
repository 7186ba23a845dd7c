"""Changes laid over a replayed fleet (docs/replay.md#fleet-changes): nodes added or removed,
pools changed or added, clusters added, in the fleet file's own vocabulary.

"What if we had had two more nodes, or this pool cut into 1g.10gb instances?" should not need the
whole fleet written out as a file. A replay takes today's fleet (or a fleet file's) and these
changes, and replays over the result. Each entry is read by the fleet file's own functions
(`cluster_spec`, `node_specs`, `pool_spec`), so an added node, a changed layout or a new pool meets
the checks a fleet file's would; what only a change can get wrong (removing a node the fleet does
not have, adding one it has) is refused here, naming the entry (`fleetChanges.removeNodes[2]`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from better_compute.domain import catalog
from better_compute.domain.kernel.errors import DomainError, InvalidInput
from better_compute.domain.ops.fleet import (
    NODE_KEYS,
    ClusterSpec,
    FleetSpec,
    NodeSpec,
    PoolSpec,
    cluster_spec,
    node_specs,
    pool_spec,
    read_mapping,
)
from better_compute.domain.ops.replay import MAX_CHANGES, MAX_FLEET_NODES

FIELD = "fleetChanges"
CHANGE_KEYS = ("clusters", "addNodes", "removeNodes", "pools")
ADDED_NODE_KEYS = NODE_KEYS | {"cluster", "pool"}
"""An added node is a fleet file's node entry, the cluster it goes in, and optionally the pool it
joins."""


@dataclass(frozen=True)
class FleetChanges:
    """The changes as sent, each entry checked for its shape; what depends on the fleet they are
    laid over (a cluster, pool or node it names) is checked by `apply_fleet_changes`."""

    clusters: tuple[Mapping[str, Any], ...] = ()
    add_nodes: tuple[Mapping[str, Any], ...] = ()
    remove_nodes: tuple[str, ...] = ()
    pools: tuple[Mapping[str, Any], ...] = ()

    def __len__(self) -> int:
        return len(self.clusters) + len(self.add_nodes) + len(self.remove_nodes) + len(self.pools)


@contextmanager
def _refused_at(where: str) -> Iterator[None]:
    """Any refusal of the fleet file's rules, raised while reading the entry at `where`, becomes
    INVALID_INPUT naming it (an unknown GPU model is NOT_FOUND in a fleet file, but here it is a
    field of the request that is wrong)."""
    try:
        yield
    except DomainError as exc:
        message = exc.message if exc.message.startswith(where) else f"{where}: {exc.message}"
        raise InvalidInput(message, {**exc.details, "field": exc.details.get("field", where)}) from None


def _refuse(where: str, message: str) -> InvalidInput:
    return InvalidInput(f"{where}: {message}", {"field": where})


def _declared(entry: Mapping[str, Any]) -> int:
    """How many nodes an entry says it makes, before they are made: a `replicas` of 10**9 must be
    refused by count, not by building a billion nodes first."""
    replicas = entry.get("replicas", 1)
    return replicas if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas > 1 else 1


def parse_fleet_changes(raw: object) -> FleetChanges:
    """`fleetChanges` as sent: `{clusters, addNodes, removeNodes, pools}`, each a list, at most
    MAX_CHANGES entries in all, adding at most MAX_FLEET_NODES nodes (`replicas` counted). None:
    no changes."""
    if raw is None:
        return FleetChanges()
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{FIELD} must be an object", {"field": FIELD})
    unknown = sorted(str(k) for k in raw if k not in CHANGE_KEYS)
    if unknown:
        raise InvalidInput(
            f"{FIELD}: unknown key {unknown[0]!r} (it may hold {', '.join(CHANGE_KEYS)})",
            {"field": f"{FIELD}.{unknown[0]}"},
        )
    lists: dict[str, list[Any]] = {}
    for key in CHANGE_KEYS:
        items = raw.get(key)
        if items is None:
            items = []
        if not isinstance(items, list):
            raise InvalidInput(f"{FIELD}.{key} must be a list", {"field": f"{FIELD}.{key}"})
        lists[key] = items
    size = sum(len(items) for items in lists.values())
    if size > MAX_CHANGES:
        raise InvalidInput(
            f"{FIELD} holds {size} entries; a fleet's changes are at most {MAX_CHANGES}",
            {"field": FIELD, "limit": MAX_CHANGES, "given": size},
        )
    clusters = tuple(
        read_mapping(c, "cluster", f"{FIELD}.clusters[{i}]") for i, c in enumerate(lists["clusters"])
    )
    added = []
    for i, n in enumerate(lists["addNodes"]):
        where = f"{FIELD}.addNodes[{i}]"
        if not isinstance(n, Mapping):
            raise InvalidInput(f"{where} must be a mapping", {"field": where})
        extra = sorted(str(k) for k in n if k not in ADDED_NODE_KEYS)
        if extra:
            raise InvalidInput(
                f"{where}: unknown key {extra[0]!r}"
                f" (an added node takes {', '.join(sorted(ADDED_NODE_KEYS))})",
                {"field": f"{where}.{extra[0]}"},
            )
        added.append(n)
    removed = []
    for i, name in enumerate(lists["removeNodes"]):
        if not isinstance(name, str) or not name:
            raise _refuse(f"{FIELD}.removeNodes[{i}]", "a node's name (a non-empty string)")
        removed.append(name)
    pools = tuple(read_mapping(p, "pool", f"{FIELD}.pools[{i}]") for i, p in enumerate(lists["pools"]))
    adding = sum(_declared(n) for n in added) + sum(
        _declared(n) for c in clusters for n in (c.get("nodes") or []) if isinstance(n, Mapping)
    )
    if adding > MAX_FLEET_NODES:
        raise InvalidInput(
            f"{FIELD} adds {adding} nodes; a replayed fleet has at most {MAX_FLEET_NODES}",
            {"field": FIELD, "limit": MAX_FLEET_NODES, "given": adding},
        )
    return FleetChanges(clusters, tuple(added), tuple(removed), pools)


def _pool_entry(pool: PoolSpec, members: list[str]) -> dict[str, Any]:
    """A pool as a fleet file's entry would give it, for a change to be laid over."""
    entry: dict[str, Any] = {
        "name": pool.name,
        "cluster": pool.cluster,
        "mode": pool.mode,
        "owner": pool.owner,
        "policy": pool.settings.as_mapping(),
        "nodes": list(members),
        "ownerQuota": dict(pool.owner_quota),
    }
    if pool.meter is not None:
        entry["meter"] = pool.meter
    return entry


def _changed_entry(current: PoolSpec | None, change: Mapping[str, Any], members: list[str]) -> dict[str, Any]:
    """A pool change laid over the pool it names: the keys it gives replace the pool's; its
    `policy` is laid over the pool's settings unless it changes the pool's mode (a timeslice
    pool's `replicas` means nothing to a mig pool). A new pool is its entry as given."""
    if current is None:
        return dict(change)
    entry = {**_pool_entry(current, members), **change}
    mode_kept = change.get("mode", current.mode) == current.mode
    policy = change.get("policy")
    if mode_kept and isinstance(policy, Mapping):
        entry["policy"] = {**current.settings.as_mapping(), **policy}
    elif not mode_kept and policy is None:
        entry["policy"] = {}
    return entry


class _Nodes:
    """The replayed fleet's nodes as the changes are laid over them, in order, names unique."""

    def __init__(self, nodes: tuple[NodeSpec, ...]) -> None:
        self.by_name: dict[str, NodeSpec] = {n.name: n for n in nodes}

    def add(self, made: list[NodeSpec], where: str) -> None:
        for node in made:
            if node.name in self.by_name:
                raise InvalidInput(
                    f"{where}: node {node.name} is already in the replayed fleet (node names are unique)",
                    {"field": where, "node": node.name},
                )
            self.by_name[node.name] = node


def apply_fleet_changes(spec: FleetSpec, changes: FleetChanges) -> FleetSpec:
    """`spec` with `changes` laid over it, in this order: nodes removed (and from their pools),
    clusters added, nodes added (each in a cluster the fleet has or adds, joining a pool if it
    names one), pools changed or added. A changed pool's nodes that carry its layout start from the
    pool's new layout. Every pool a change touches is read again by the fleet file's `pool_spec`:
    its members must be in its cluster and in no other pool, and a MIG layout must place on their
    GPUs."""
    if not changes:
        return spec
    generic: dict[str, catalog.GpuModel] = {g.id: g for g in spec.generic_models}
    nodes = _Nodes(spec.nodes)
    removed: set[str] = set()
    for i, name in enumerate(changes.remove_nodes):
        where = f"{FIELD}.removeNodes[{i}]"
        if name in removed:
            raise _refuse(where, f"node {name} is named twice")
        if name not in nodes.by_name:
            raise _refuse(where, f"node {name} is not in the replayed fleet")
        removed.add(name)
        del nodes.by_name[name]

    clusters: dict[str, ClusterSpec] = {c.name: c for c in spec.clusters}
    for i, raw in enumerate(changes.clusters):
        where = f"{FIELD}.clusters[{i}]"
        with _refused_at(where):
            cluster, made = cluster_spec(raw, where, generic)
        if cluster.name in clusters:
            raise _refuse(where, f"cluster {cluster.name} is already in the replayed fleet")
        clusters[cluster.name] = cluster
        nodes.add(made, where)

    joins: list[tuple[str, str, list[NodeSpec]]] = []
    for i, raw in enumerate(changes.add_nodes):
        where = f"{FIELD}.addNodes[{i}]"
        cluster_name = raw.get("cluster")
        if not isinstance(cluster_name, str) or not cluster_name:
            raise InvalidInput(f"{where}: missing 'cluster'", {"field": f"{where}.cluster"})
        if cluster_name not in clusters:
            raise InvalidInput(
                f"{where}: cluster {cluster_name} is not in the replayed fleet", {"field": f"{where}.cluster"}
            )
        with _refused_at(where):
            made = node_specs(
                {k: v for k, v in raw.items() if k not in ("cluster", "pool")}, cluster_name, where, generic
            )
        nodes.add(made, where)
        pool = raw.get("pool")
        if pool is not None:
            if not isinstance(pool, str) or not pool:
                raise InvalidInput(f"{where}: pool must be a pool's name", {"field": f"{where}.pool"})
            joins.append((pool, where, made))

    current: dict[str, PoolSpec] = {p.name: p for p in spec.pools}
    members = {p.name: [m for m in p.nodes if m not in removed] for p in spec.pools}
    entries: dict[str, dict[str, Any]] = {}
    where_of: dict[str, str] = {}
    for i, change in enumerate(changes.pools):
        where = f"{FIELD}.pools[{i}]"
        named = change.get("name")
        if not isinstance(named, str) or not named:
            raise InvalidInput(f"{where}: missing 'name'", {"field": f"{where}.name"})
        if named in entries:
            raise _refuse(where, f"pool {named} is changed twice (in {where_of[named]})")
        entries[named] = _changed_entry(current.get(named), change, members.get(named, []))
        where_of[named] = where
    for pool, where, made in joins:
        if pool not in entries:
            if pool not in current:
                raise InvalidInput(
                    f"{where}: pool {pool} is not in the replayed fleet nor added by {FIELD}.pools",
                    {"field": f"{where}.pool"},
                )
            entries[pool] = _pool_entry(current[pool], members[pool])
            where_of[pool] = where
        listed = entries[pool].get("nodes")
        if listed is None:
            listed = []
        if not isinstance(listed, list):
            at = where_of[pool]
            raise InvalidInput(f"{at}.nodes must be a list", {"field": f"{at}.nodes"})
        entries[pool]["nodes"] = [*listed, *(n.name for n in made)]

    for name in entries:
        if name in current and where_of[name].startswith(f"{FIELD}.pools"):
            # a changed pool's carrying members start from its layout, not the one they had
            for m in members[name]:
                node = nodes.by_name.get(m)
                if node is not None and node.carries_pool_layout and node.mig_layout is not None:
                    nodes.by_name[m] = replace(node, mig_layout=None)
    tenants = {t.id for t in spec.tenants}
    seen = {m for name, listed in members.items() if name not in entries for m in listed}
    pools: dict[str, PoolSpec] = {}
    for name in [*current, *(n for n in entries if n not in current)]:
        if name not in entries:
            pools[name] = replace(current[name], nodes=tuple(members[name]))
            continue
        where, entry = where_of[name], entries[name]
        with _refused_at(where):
            made_pool = pool_spec(read_mapping(entry, "pool", where), where, nodes.by_name, seen, generic)
        if made_pool.cluster not in clusters:
            raise InvalidInput(
                f"{where}: cluster {made_pool.cluster} is not in the replayed fleet",
                {"field": f"{where}.cluster"},
            )
        if made_pool.owner not in tenants:
            raise InvalidInput(
                f"{where}: owner {made_pool.owner} is not a tenant of the replayed fleet",
                {"field": f"{where}.owner"},
            )
        pools[name] = made_pool
    return replace(
        spec,
        clusters=tuple(clusters.values()),
        nodes=tuple(nodes.by_name.values()),
        pools=tuple(pools.values()),
    )


__all__ = ["ADDED_NODE_KEYS", "CHANGE_KEYS", "FleetChanges", "apply_fleet_changes", "parse_fleet_changes"]
