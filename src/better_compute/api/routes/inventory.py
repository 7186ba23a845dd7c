"""The fleet's inventory: clusters, nodes, GPUs and atoms (any token reads them); a cluster's phase
and a node's cordon (admin writes them)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.answers import paged
from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.path_ids import path_id
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.fleet.atoms import Atom, attribute_filters
from better_compute.domain.fleet.records import Cluster, Gpu, LayoutRefusal
from better_compute.domain.kernel.atom_classes import check_atom_class
from better_compute.domain.ledger.ledger import Availability
from better_compute.service.fleet import clusters, gpu_owners, inventory, pools
from better_compute.service.fleet.inventory import NodeView
from better_compute.service.ledger import capacity
from better_compute.wire.common import Page
from better_compute.wire.inventory import (
    AtomListQuery,
    AtomPublic,
    ClusterCreate,
    ClusterListQuery,
    ClusterPublic,
    ClusterUpdate,
    GpuListQuery,
    GpuPublic,
    GpuRelease,
    LayoutRefusalPublic,
    MigInstancePublic,
    MigModePublic,
    NodeListQuery,
    NodePublic,
    NodeUpdate,
    SlurmSettingsPublic,
)

router = APIRouter(prefix="/v1", tags=["inventory"], dependencies=AUTHENTICATED, route_class=StrictQueryRoute)


@router.get("/clusters", response_model=Page[ClusterPublic])
def list_clusters(
    q: Annotated[ClusterListQuery, Query()], principal: PrincipalDep, store: StoreDep
) -> Page[ClusterPublic]:
    return paged(
        inventory.list_clusters(store, limit=q.limit, after=q.cursor),
        lambda c: cluster_public(c, settings=principal.is_admin),
    )


@router.post("/clusters", response_model=ClusterPublic, status_code=201)
def create_cluster(
    body: ClusterCreate, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> ClusterPublic:
    slurm = None if body.slurm is None else body.slurm.model_dump()
    return cluster_public(
        clusters.create(store, principal, body.id, body.region, body.residency, body.kind, slurm, now)
    )


@router.get("/clusters/{id}", response_model=ClusterPublic)
def get_cluster(id: str, principal: PrincipalDep, store: StoreDep) -> ClusterPublic:
    return cluster_public(clusters.get(store, id), settings=principal.is_admin)


@router.patch("/clusters/{id}", response_model=ClusterPublic)
def update_cluster(
    id: str, body: ClusterUpdate, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> ClusterPublic:
    return cluster_public(clusters.update(store, principal, path_id(id, body.id), body.phase, now))


@router.patch("/nodes/{node}", response_model=NodePublic)
def update_node(
    node: str, body: NodeUpdate, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> NodePublic:
    return node_public(clusters.update_node(store, principal, node, body.cordoned, now))


@router.get("/nodes", response_model=Page[NodePublic])
def list_nodes(
    q: Annotated[NodeListQuery, Query()], store: StoreDep, principal: PrincipalDep
) -> Page[NodePublic]:
    found = inventory.list_nodes(
        store,
        cluster=q.cluster,
        limit=q.limit,
        after=q.cursor,
        pools=pools.visible_pool_ids(store, principal),
    )
    return paged(found, node_public)


@router.get("/gpus", response_model=Page[GpuPublic])
def list_gpus(q: Annotated[GpuListQuery, Query()], store: StoreDep) -> Page[GpuPublic]:
    found = inventory.list_gpus(store, node=q.node, limit=q.limit, after=q.cursor)
    refused = inventory.layout_refusals(store, {g.node_id for g in found.items})
    return paged(found, lambda g: gpu_public(g, refused.get(g.id)))


@router.post("/gpus/{gpu}/release", response_model=GpuPublic)
def release_gpu(
    gpu: str, body: GpuRelease, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> GpuPublic:
    """`nodes.releaseGpu`: the GPU as written (not present on its node any more)."""
    return gpu_public(gpu_owners.release(store, principal, gpu, now))


@router.get("/atoms", response_model=Page[AtomPublic])
def list_atoms(
    q: Annotated[AtomListQuery, Query()], store: StoreDep, principal: PrincipalDep, now: NowDep
) -> Page[AtomPublic]:
    found = inventory.list_atoms(
        store,
        pool=q.pool,
        cls=None if q.cls is None else check_atom_class(q.cls, "class"),
        attributes=attribute_filters(q.attr or []),
        bookable=q.bookable,
        limit=q.limit,
        after=q.cursor,
        pools=pools.visible_pool_ids(store, principal),
    )
    free = capacity.availability_of(store, found.items, now)
    pending = capacity.scrub_pending_of(store, principal, found.items, now)
    return paged(found, lambda a: atom_public(a, free.get(a.id), scrub_pending=a.id in pending))


def cluster_public(c: Cluster, *, settings: bool = True) -> ClusterPublic:
    """A cluster as the API shows it; a Slurm cluster's `slurm` settings (its controller, its accounts
    and which tenant each is) only with `settings`, which is for admins: tenants see its `kind`."""
    return ClusterPublic(
        id=c.id,
        name=c.id,
        region=c.region,
        residency=list(c.residency),
        phase=c.phase,
        created_at=c.created_at,
        kind=c.kind,
        slurm=None
        if c.slurm is None or not settings
        else SlurmSettingsPublic(
            controller=c.slurm.controller,
            partitions=list(c.slurm.partitions),
            account=c.slurm.account,
            access=c.slurm.access,
            accounts=dict(c.slurm.accounts),
        ),
    )


def node_public(v: NodeView) -> NodePublic:
    n = v.node
    return NodePublic(
        id=n.id,
        name=n.id,
        cluster_id=n.cluster_id,
        pool_id=v.pool_id,
        cordoned=n.cordoned,
        spec_generation=n.spec_generation,
        carries_pool_layout=n.carries_pool_layout,
        reboot_required=n.reboot_required,
        layout_refused=[refusal_public(r) for r in n.layout_refused],
        observed_generation=n.observed_generation,
        last_report_at=n.last_report_at,
        last_contact_at=n.last_contact_at,
    )


def refusal_public(r: LayoutRefusal) -> LayoutRefusalPublic:
    return LayoutRefusalPublic(gpu=r.gpu, action=r.action, reason=r.reason, since=r.since)


def gpu_public(g: Gpu, refused: LayoutRefusal | None = None) -> GpuPublic:
    return GpuPublic.model_validate(
        {
            "id": g.id,
            "uuid": g.id,
            "node": g.node_id,
            "index": g.index,
            "product": g.product,
            "model": g.model,
            "memoryMiB": g.memory_mib,
            "numaNode": g.numa_node,
            "nvlinkPeers": list(g.nvlink_peers),
            "healthy": g.healthy,
            "present": g.present,
            "migMode": MigModePublic(current=g.mig_mode_current, pending=g.mig_mode_pending),
            "migInstances": [
                MigInstancePublic(
                    profile=i.profile,
                    gi_id=i.gi_id,
                    ci_id=i.ci_id,
                    placement_start=i.placement_start,
                    placement_size=i.placement_size,
                    uuid=i.uuid,
                )
                for i in g.mig_instances
            ],
            "layoutRefused": None if refused is None else refusal_public(refused),
        }
    )


def atom_public(a: Atom, free: Availability | None = None, *, scrub_pending: bool = False) -> AtomPublic:
    """An atom; with its `Availability`, whether it is booked now and when it is next free, and
    whether it waits for a scrub before the caller may have it."""
    return AtomPublic(
        id=a.id,
        cls=a.cls,
        gpu_id=a.gpu_id,
        node=a.node,
        pool_id=a.pool_id,
        bookable=a.bookable,
        partition_pending=a.partition_pending,
        present=a.present,
        attributes=dict(a.attributes),
        booked_now=free.booked_now if free else False,
        next_free_at=free.next_free_at if free else None,
        scrub_pending=scrub_pending,
    )
