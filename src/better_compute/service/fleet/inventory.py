"""Ingesting node reports: GPUs and atoms follow what nodes say, idempotently.

A report is diffed against what is stored; only changed rows are written, so re-ingesting the same
report writes nothing and emits no event. Nothing is ever deleted: a GPU that vanishes, or an atom whose
instance is gone, becomes unbookable and not present, and bookings keep pointing at it. A GPU whose
MIG state its node could not read whole (`migStateUnknown`) is no word on its instances: it keeps its
last known MIG state and atoms, present or not, all unbookable, until a report reads it whole.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from better_compute.domain import catalog
from better_compute.domain.fleet.atoms import Atom, derive_node_atoms
from better_compute.domain.fleet.events import NodeInventoryChanged
from better_compute.domain.fleet.inventory import GpuReport, NodeReport
from better_compute.domain.fleet.pools import SLOT_MODES, PoolSharing
from better_compute.domain.fleet.records import Cluster, Gpu, LayoutRefusal, Node
from better_compute.domain.gate.mig_gate import node_layout, told_replicas
from better_compute.domain.kernel.errors import NotFound
from better_compute.service.fleet import gpu_owners
from better_compute.service.fleet.gpu_states import record_nodes
from better_compute.service.fleet.ports import FleetTx
from better_compute.service.kernel.paging import DEFAULT_LIMIT, Listing, fetch, listing
from better_compute.service.kernel.ports import StorePort


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node with the pool it is in, as its caller may see it (None: in none, or one hidden)."""

    node: Node
    pool_id: str | None

    @property
    def id(self) -> str:
        return self.node.id


@dataclass
class IngestResult:
    gpus_written: int = 0
    atoms_written: int = 0
    changed_nodes: list[str] = field(default_factory=list)


def model_id_of(product: str) -> str | None:
    model = catalog.model_for_product(product)
    return model.id if model else None


ModelOf = Callable[[str], str | None]
"""The model id of a GPU's product name: the catalog's (`model_id_of`), or, for a replay's fleet that
declares generic models, theirs too (`entrypoints.fleet.load_fleet`)."""


def _gpu(gpu: GpuReport, node: str, now: datetime, model_of: ModelOf = model_id_of) -> Gpu:
    return Gpu.reported(gpu, node, model_of(gpu.product), now)


def _constant(sharing: PoolSharing | None) -> Callable[[str], PoolSharing | None]:
    def pool_of(_gpu_id: str) -> PoolSharing | None:
        return sharing

    return pool_of


def _as_last_known(report: NodeReport, old_gpus: Mapping[str, Gpu]) -> NodeReport:
    """`report` with each GPU whose MIG state its node could not read whole (`mig_state_unknown`)
    at its last known MIG mode and instances, and unhealthy: what such a report lists of the GPU's
    instances says neither that one is there nor that one is gone (its node may have read the GPU
    as MIG off because NVML refused its MIG mode), so its atoms are derived as they last were, and
    none of them is booked until the GPU reads whole again."""
    if not any(g.mig_state_unknown for g in report.gpus):
        return report
    gpus = []
    for gpu in report.gpus:
        last = old_gpus.get(gpu.uuid)
        if not gpu.mig_state_unknown:
            gpus.append(gpu)
        elif last is None:  # never read whole: no atom is derived for it (`_kept_as_they_are`)
            gpus.append(replace(gpu, healthy=False))
        else:
            gpus.append(
                replace(
                    gpu,
                    healthy=False,
                    mig_mode_current=last.mig_mode_current,
                    mig_mode_pending=last.mig_mode_pending,
                    mig_instances=last.mig_instances,
                )
            )
    return replace(report, gpus=tuple(gpus))


def _kept_as_they_are(derived: Sequence[Atom], old: Sequence[Atom]) -> list[Atom]:
    """The atoms of a GPU whose MIG state is unknown, as rows: each atom it had keeps whether it is
    present (one gone stays gone, one there stays there: no atom is lost, none found, on half a
    reading), unbookable; its derived row where there is one (a pool change since is taken)."""
    by_id = {a.id: a for a in derived}
    return [replace(by_id.get(a.id, a), present=a.present, bookable=False) for a in old]


def ingest_in(
    tx: FleetTx, reports: Sequence[NodeReport], now: datetime, model_of: ModelOf = model_id_of
) -> IngestResult:
    """Ingest within an open transaction (used by the fleet loader and by `ingest`)."""
    node_ids = [r.node for r in reports]
    # Before reading which pool each node is in: a pool change that moves these nodes commits first,
    # or waits for this report (it derives again from what this writes).
    tx.nodes.lock(node_ids)
    known = tx.nodes.by_ids(node_ids)
    missing = [n for n in node_ids if n not in known]
    if missing:
        raise NotFound(f"node {missing[0]} is not registered", {"nodes": missing})
    pools_by_node = tx.pools.of_nodes(node_ids)
    old_gpus = {g.id: g for g in tx.gpus.of_nodes(node_ids)}
    old_atoms = {a.id: a for a in tx.atoms.of_nodes(node_ids)}
    reports = [_as_last_known(r, old_gpus) for r in reports]

    gpu_rows: list[Gpu] = []
    atom_rows: list[Atom] = []
    seen_gpus: set[str] = set()
    seen_atoms: set[str] = set()
    result = IngestResult()
    changed_nodes: set[str] = set()
    gates = tx.mig_layouts.of_nodes(node_ids)  # a layout or slot count under change: the gate's
    for report in reports:
        pool = pools_by_node.get(report.node)
        gate = gates.get(report.node)
        sharing = pool.sharing if pool else None
        if sharing is not None and gate is not None and sharing.mode in SLOT_MODES:
            sharing = replace(sharing, replicas=told_replicas(pool, gate))
        node = known[report.node]
        # A GPU not at the layout its node is told takes no work until it is (domain.fleet.atoms).
        layout = node_layout(pool, gate, carries_pool_layout=node.carries_pool_layout, own=node.mig_layout)
        derived = derive_node_atoms(report, _constant(sharing), model_of, layout)
        for gpu in report.gpus:
            seen_gpus.add(gpu.uuid)
            row = _gpu(gpu, report.node, now, model_of)
            if not row.same_as(old_gpus.get(gpu.uuid)):
                gpu_rows.append(row)
                changed_nodes.add(report.node)
            atoms = derived[gpu.uuid]
            if gpu.mig_state_unknown:
                atoms = _kept_as_they_are(atoms, [a for a in old_atoms.values() if a.gpu_id == gpu.uuid])
            for atom in atoms:
                seen_atoms.add(atom.id)
                if old_atoms.get(atom.id) != atom:
                    atom_rows.append(atom)
                    changed_nodes.add(report.node)
    for gpu_id, old in old_gpus.items():
        if gpu_id not in seen_gpus and old.present:
            gpu_rows.append(replace(old, present=False, updated_at=now))
            changed_nodes.add(old.node_id)
    for atom_id, old_atom in old_atoms.items():
        if atom_id not in seen_atoms and (old_atom.present or old_atom.bookable):
            atom_rows.append(replace(old_atom, present=False, bookable=False))
            changed_nodes.add(old_atom.node)

    # Rows are written in id order: bookings share-lock atoms in that order too, so the two never
    # wait on each other in a cycle (storage.ledger.ledger.LOCKED_ATOMS_PG).
    tx.gpus.put(sorted(gpu_rows, key=lambda g: g.id))
    tx.atoms.put(sorted(atom_rows, key=lambda a: a.id))
    fresh = [a for a in atom_rows if a.present and not (a.id in old_atoms and old_atoms[a.id].present)]
    gone = [a for a in atom_rows if not a.present and a.id in old_atoms and old_atoms[a.id].present]
    # The contexts above hear what changed (service/hooks.py): copies of an endpoint's components on
    # lost atoms wait again; a node under a layout change, or serving an endpoint, holds its new ones.
    if gone:
        tx.hooks.atoms_lost(gone, now)
    if fresh:
        tx.hooks.atoms_found(fresh, now)
    for report in reports:
        if known[report.node].observed_generation != report.observed_generation:
            tx.nodes.mark_observed(report.node, report.observed_generation, now)
    # In this transaction, as the change it records: accounting a past range reads this history.
    gpus_now = {**old_gpus, **{g.id: g for g in gpu_rows}}.values()
    atoms_now = {**old_atoms, **{a.id: a for a in atom_rows}}.values()
    written = (
        [g for g in gpus_now if g.node_id in changed_nodes],
        [a for a in atoms_now if a.node in changed_nodes],
    )
    record_nodes(tx, sorted(changed_nodes), now, written)
    gpu_counts = Counter(g.node_id for g in gpu_rows)
    atom_counts = Counter(a.node for a in atom_rows)
    tx.events.append_all(
        [NodeInventoryChanged(node, gpu_counts[node], atom_counts[node]) for node in sorted(changed_nodes)],
        now,
    )
    result.gpus_written = len(gpu_rows)
    result.atoms_written = len(atom_rows)
    result.changed_nodes = sorted(changed_nodes)
    return result


def ingest(
    store: StorePort[FleetTx], reports: Sequence[NodeReport], now: datetime, model_of: ModelOf = model_id_of
) -> IngestResult:
    """Ingest one or many node reports in one transaction (a fleet file's load). Refused whole
    (GpuOwnedElsewhere, naming the nodes) when one names a GPU another node holds, or that another
    of them names first (service.fleet.gpu_owners)."""
    with store.begin() as tx:
        gpu_owners.check_in(tx, reports, now)
        return ingest_in(tx, reports, now, model_of)


def list_clusters(
    store: StorePort[FleetTx], *, limit: int | None = None, after: str | None = None
) -> Listing[Cluster]:
    with store.read() as tx:
        return listing(tx.clusters.page(fetch(limit), after), limit)


def list_nodes(
    store: StorePort[FleetTx],
    *,
    cluster: str | None = None,
    limit: int | None = None,
    after: str | None = None,
    pools: Collection[str] | None = None,
) -> Listing[NodeView]:
    """Nodes with the pool each is in; `pools`, when given, are the pools the caller may see, and
    a node in any other pool shows none (its name would reveal that the pool exists)."""
    with store.read() as tx:
        found = tx.nodes.page(cluster, fetch(limit), after)
        of_node = tx.pools.of_nodes([n.id for n in found])
    views = []
    for node in found:
        pool = of_node.get(node.id)
        shown = pool.id if pool and (pools is None or pool.id in pools) else None
        views.append(NodeView(node, shown))
    return listing(views, limit)


def list_gpus(
    store: StorePort[FleetTx], *, node: str | None = None, limit: int | None = None, after: str | None = None
) -> Listing[Gpu]:
    with store.read() as tx:
        return listing(tx.gpus.page(node, fetch(limit), after), limit)


def layout_refusals(store: StorePort[FleetTx], node_ids: Collection[str]) -> dict[str, LayoutRefusal]:
    """What the nodes' last inventories said they could not change, by GPU uuid (shown with the GPUs)."""
    if not node_ids:
        return {}
    with store.read() as tx:
        found = tx.nodes.by_ids(sorted(set(node_ids)))
    return {r.gpu: r for node in found.values() for r in node.layout_refused}


def list_atoms(
    store: StorePort[FleetTx],
    *,
    pool: str | None = None,
    cls: str | None = None,
    attributes: dict[str, str] | None = None,
    bookable: bool | None = None,
    limit: int | None = None,
    after: str | None = None,
    pools: Collection[str] | None = None,
) -> Listing[Atom]:
    """Atoms filtered by pool, class, bookability and attribute equality (values compared as text).

    `pools`, when given, keeps only atoms of those pools (what a tenant may see).
    """
    if pools is not None and (not pools or (pool is not None and pool not in pools)):
        return Listing()
    wanted = attributes or {}
    size = limit or DEFAULT_LIMIT
    out: list[Atom] = []
    cursor = after
    batch_size = max(size + 1, 500)
    with store.read() as tx:
        while True:
            batch = tx.atoms.page(pool_id=pool, cls=cls, bookable=bookable, limit=batch_size, after=cursor)
            for atom in batch:
                if pools is not None and atom.pool_id not in pools:
                    continue
                if all(k in atom.attributes and _text(atom.attributes[k]) == v for k, v in wanted.items()):
                    out.append(atom)
                    if len(out) > size:
                        return listing(out, size)
            if len(batch) < batch_size:
                return listing(out, size)
            cursor = batch[-1].id


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
