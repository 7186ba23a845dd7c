"""Ingesting node reports: GPUs and atoms follow what nodes say, idempotently.

A report is diffed against what is stored; only changed rows are written, so re-ingesting the same
report writes nothing and emits no event. Nothing is ever deleted: a GPU that vanishes, or an atom whose
instance is gone, becomes unbookable and not present, and bookings keep pointing at it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from better_compute.domain import catalog
from better_compute.domain.atoms import Atom, derive_node_atoms
from better_compute.domain.errors import NotFound
from better_compute.domain.inventory import GpuReport, NodeReport
from better_compute.domain.pools import PoolSharing
from better_compute.service.ports import Row, StorePort, Tx

_GPU_FIELDS = (
    "node_id",
    "gpu_index",
    "product",
    "model",
    "memory_mib",
    "numa_node",
    "nvlink_peers",
    "healthy",
    "present",
    "mig_mode_current",
    "mig_mode_pending",
    "mig_instances",
)
_ATOM_FIELDS = (
    "gpu_id",
    "node_id",
    "pool_id",
    "class",
    "key",
    "bookable",
    "partition_pending",
    "numa_node",
    "nvlink_domain",
    "attributes",
    "present",
)


@dataclass
class IngestResult:
    gpus_written: int = 0
    atoms_written: int = 0
    changed_nodes: list[str] = field(default_factory=list)


def model_id_of(product: str) -> str | None:
    model = catalog.model_for_product(product)
    return model.id if model else None


def _gpu_row(gpu: GpuReport, node: str, now: datetime) -> Row:
    return {
        "id": gpu.uuid,
        "node_id": node,
        "gpu_index": gpu.index,
        "product": gpu.product,
        "model": model_id_of(gpu.product),
        "memory_mib": gpu.memory_mib,
        "numa_node": gpu.numa_node,
        "nvlink_peers": list(gpu.nvlink_peers),
        "healthy": gpu.healthy,
        "present": True,
        "mig_mode_current": gpu.mig_mode_current,
        "mig_mode_pending": gpu.mig_mode_pending,
        "mig_instances": [
            {
                "profile": i.profile,
                "giId": i.gi_id,
                "ciId": i.ci_id,
                "placementStart": i.placement_start,
                "placementSize": i.placement_size,
                "uuid": i.uuid,
            }
            for i in gpu.mig_instances
        ],
        "updated_at": now,
    }


def atom_row(atom: Atom) -> Row:
    """An atom as the store keeps it."""
    return {
        "id": atom.id,
        "gpu_id": atom.gpu_id,
        "node_id": atom.node,
        "pool_id": atom.pool_id,
        "class": atom.cls,
        "key": atom.key,
        "bookable": atom.bookable,
        "partition_pending": atom.partition_pending,
        "numa_node": atom.numa_node,
        "nvlink_domain": atom.nvlink_domain,
        "attributes": dict(atom.attributes),
        "present": True,
    }


def _changed(old: Row | None, new: Row, fields: Sequence[str]) -> bool:
    return old is None or any(old.get(f) != new[f] for f in fields)


def pool_sharing(row: Row | None) -> PoolSharing | None:
    if row is None:
        return None
    policy: dict[str, Any] = row.get("policy") or {}
    return PoolSharing(pool_id=row["id"], mode=row["mode"], replicas=int(policy.get("replicas", 1)))


def _constant(sharing: PoolSharing | None) -> Callable[[str], PoolSharing | None]:
    def pool_of(_gpu_id: str) -> PoolSharing | None:
        return sharing

    return pool_of


def ingest_in(tx: Tx, reports: Sequence[NodeReport], now: datetime) -> IngestResult:
    """Ingest within an open transaction (used by the fleet loader and by `ingest`)."""
    node_ids = [r.node for r in reports]
    # Before reading which pool each node is in: a pool change that moves these nodes commits first,
    # or waits for this report (it derives again from what this writes).
    tx.inventory.lock_nodes(node_ids)
    known = tx.inventory.nodes_by_id(node_ids)
    missing = [n for n in node_ids if n not in known]
    if missing:
        raise NotFound(f"node {missing[0]} is not registered", {"nodes": missing})
    pools_by_node = tx.inventory.pools_of_nodes(node_ids)
    old_gpus = {g["id"]: g for g in tx.inventory.gpus_of_nodes(node_ids)}
    old_atoms = {a["id"]: a for a in tx.inventory.atoms_of_nodes(node_ids)}

    gpu_rows: list[Row] = []
    atom_rows: list[Row] = []
    seen_gpus: set[str] = set()
    seen_atoms: set[str] = set()
    result = IngestResult()
    changed_nodes: set[str] = set()
    for report in reports:
        sharing = pool_sharing(pools_by_node.get(report.node))
        derived = derive_node_atoms(report, _constant(sharing), model_id_of)
        for gpu in report.gpus:
            seen_gpus.add(gpu.uuid)
            row = _gpu_row(gpu, report.node, now)
            if _changed(old_gpus.get(gpu.uuid), row, _GPU_FIELDS):
                gpu_rows.append(row)
                changed_nodes.add(report.node)
            for atom in derived[gpu.uuid]:
                seen_atoms.add(atom.id)
                arow = atom_row(atom)
                if _changed(old_atoms.get(atom.id), arow, _ATOM_FIELDS):
                    atom_rows.append(arow)
                    changed_nodes.add(report.node)
    for gpu_id, old in old_gpus.items():
        if gpu_id not in seen_gpus and old["present"]:
            gone = dict(old)
            gone.update(present=False, updated_at=now)
            gpu_rows.append(gone)
            changed_nodes.add(old["node_id"])
    for atom_id, old in old_atoms.items():
        if atom_id not in seen_atoms and (old["present"] or old["bookable"]):
            gone = dict(old)
            gone.update(present=False, bookable=False)
            atom_rows.append(gone)
            changed_nodes.add(old["node_id"])

    # Rows are written in id order: bookings share-lock atoms in that order too, so the two never
    # wait on each other in a cycle (storage.ledger.LOCKED_ATOMS_PG).
    tx.inventory.upsert("gpus", sorted(gpu_rows, key=lambda r: str(r["id"])), ["id"])
    tx.inventory.upsert("atoms", sorted(atom_rows, key=lambda r: str(r["id"])), ["id"])
    for report in reports:
        if known[report.node]["observed_generation"] != report.observed_generation:
            tx.inventory.mark_observed(report.node, report.observed_generation, now)
    gpu_counts = Counter(g["node_id"] for g in gpu_rows)
    atom_counts = Counter(a["node_id"] for a in atom_rows)
    for node in sorted(changed_nodes):
        tx.events.append(
            "node.inventory.changed", node, {"gpus": gpu_counts[node], "atoms": atom_counts[node]}, now
        )
    result.gpus_written = len(gpu_rows)
    result.atoms_written = len(atom_rows)
    result.changed_nodes = sorted(changed_nodes)
    return result


def ingest(store: StorePort, reports: Sequence[NodeReport], now: datetime) -> IngestResult:
    """Ingest one or many node reports in one transaction."""
    with store.begin() as tx:
        return ingest_in(tx, reports, now)


def list_rows(
    store: StorePort,
    table: str,
    *,
    filters: dict[str, Any] | None = None,
    limit: int | None = None,
    after: str | None = None,
) -> list[Row]:
    """A page of rows ordered by id, after the cursor `after`."""
    with store.read() as tx:
        return tx.inventory.list(table, filters=filters, limit=limit, after=after)


def list_nodes(
    store: StorePort,
    *,
    cluster: str | None = None,
    limit: int | None = None,
    after: str | None = None,
    pools: Collection[str] | None = None,
) -> list[Row]:
    """Nodes with the pool each is in; `pools`, when given, are the pools the caller may see, and
    a node in any other pool shows none (its name would reveal that the pool exists)."""
    with store.read() as tx:
        found = tx.inventory.list(
            "nodes", filters={"cluster_id": cluster} if cluster else None, limit=limit, after=after
        )
        of_node = tx.inventory.pools_of_nodes([n["id"] for n in found])
    for node in found:
        pool = of_node.get(node["id"])
        node["pool_id"] = pool["id"] if pool and (pools is None or pool["id"] in pools) else None
    return found


def list_gpus(
    store: StorePort, *, node: str | None = None, limit: int | None = None, after: str | None = None
) -> list[Row]:
    return list_rows(store, "gpus", filters={"node_id": node} if node else None, limit=limit, after=after)


def list_atoms(
    store: StorePort,
    *,
    pool: str | None = None,
    cls: str | None = None,
    attributes: dict[str, str] | None = None,
    bookable: bool | None = None,
    limit: int | None = None,
    after: str | None = None,
    pools: Collection[str] | None = None,
) -> list[Row]:
    """Atoms filtered by pool, class, bookability and attribute equality (values compared as text).

    `pools`, when given, keeps only atoms of those pools (what a tenant may see).
    """
    if pools is not None and (not pools or (pool is not None and pool not in pools)):
        return []
    filters: dict[str, Any] = {"present": True}
    if pool:
        filters["pool_id"] = pool
    if cls:
        filters["class"] = cls
    if bookable is not None:
        filters["bookable"] = bookable
    wanted = attributes or {}
    out: list[Row] = []
    cursor = after
    page = max(limit or 0, 500)
    while True:
        batch = list_rows(store, "atoms", filters=filters, limit=page, after=cursor)
        for row in batch:
            attrs = row["attributes"]
            if pools is not None and row["pool_id"] not in pools:
                continue
            if all(k in attrs and _text(attrs[k]) == v for k, v in wanted.items()):
                out.append(row)
                if limit is not None and len(out) >= limit:
                    return out
        if len(batch) < page:
            return out
        cursor = batch[-1]["id"]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
