"""Workloads across clusters: `workloads.create|list|get|scale|delete`, `deployments.list`,
`placement.preview`, and `operations.create|get` (`workload.drain`, `replica.release`)."""

from __future__ import annotations

from typing import Annotated, Any, cast

from fastapi import APIRouter, Query, Response

from better_compute.api.answers import json_answer, paged
from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.containers import container_document
from better_compute.api.deps import NowDep, ServicesDep
from better_compute.api.path_ids import path_id
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.placement.capability import WHOLE, Resolution
from better_compute.domain.placement.commands import PlaceWorkload, ReplicaShape
from better_compute.domain.placement.costs import money
from better_compute.domain.placement.records import Operation
from better_compute.domain.placement.verdicts import Placement, Verdict
from better_compute.domain.placement.workloads import operation_target, workload_spec
from better_compute.domain.tenancy.credentials import Principal, require_admin
from better_compute.domain.tenancy.tenancy import check_ref, tenant_scope
from better_compute.service.placement import placement, workloads
from better_compute.service.placement.placement import main_reason
from better_compute.service.placement.workloads import DeploymentView, WorkloadView
from better_compute.service.services import Services
from better_compute.service.tx import Tx
from better_compute.wire.common import Page
from better_compute.wire.containers import ContainerPublic
from better_compute.wire.workloads import (
    CapabilityPublic,
    DeploymentListQuery,
    DeploymentPublic,
    OperationCreate,
    OperationPublic,
    PlacementPreview,
    PlacementPreviewRequest,
    PreemptionPublic,
    RefusedOfferPublic,
    ReplicaProblemPublic,
    ResolutionPublic,
    Shape,
    ShapePublic,
    VerdictPublic,
    WorkloadCreate,
    WorkloadListQuery,
    WorkloadPublic,
    WorkloadScale,
)

router = APIRouter(prefix="/v1", tags=["workloads"], dependencies=AUTHENTICATED, route_class=StrictQueryRoute)


def _wiring(services: Services) -> workloads.Wiring[Tx]:
    return workloads.Wiring(services.store, services.index, services.stock, services.ids)


def place_workload(body: WorkloadCreate | PlacementPreviewRequest, shape: Shape, name: str) -> PlaceWorkload:
    """The request as placement's command. The capability stays JSON, as the wire has it:
    `domain.placement.capability.parse_capability` checks it (a command holds what was asked)."""
    capability = shape.capability
    return PlaceWorkload(
        name=name,
        shape=ReplicaShape(
            device_class=shape.device_class,
            device_count=shape.device_count,
            capability=None
            if capability is None
            else capability.model_dump(by_alias=True, exclude_none=True),
            container=None if shape.container is None else container_document(shape.container),
        ),
        tenant_id=body.tenant_id,
        replicas=body.replicas,
        strategy=body.strategy,
        cluster_floors={} if body.cluster_floors is None else body.cluster_floors,
        max_clusters=body.max_clusters,
        cluster=body.cluster,
        requires_single_topology_domain=body.requires_single_topology_domain,
        topology_domain_kind=body.topology_domain_kind,
        priority_class=body.priority_class,
        allowed_regions=tuple(body.allowed_regions or ()),
        allowed_clusters=tuple(body.allowed_clusters or ()),
    )


@router.post("/workloads", response_model=WorkloadPublic, status_code=201)
def create_workload(
    body: WorkloadCreate, principal: PrincipalDep, services: ServicesDep, now: NowDep
) -> Response:
    view = workloads.create(_wiring(services), principal, place_workload(body, body.shape, body.name), now)
    if view.waiting:  # a race lost on the last attempt leaves replicas for the retrier
        services.placement_wakeup.set()
    return json_answer(workload_public(view), 201)


@router.get("/workloads", response_model=Page[WorkloadPublic])
def list_workloads(
    q: Annotated[WorkloadListQuery, Query()], principal: PrincipalDep, services: ServicesDep, now: NowDep
) -> Page[WorkloadPublic]:
    found = workloads.list_workloads(
        services.store, principal, now, tenant_id=q.tenant_id, limit=q.limit, after=q.cursor
    )
    return paged(found, workload_public)


@router.get("/workloads/{id}", response_model=WorkloadPublic)
def get_workload(id: str, principal: PrincipalDep, services: ServicesDep, now: NowDep) -> WorkloadPublic:
    return workload_public(workloads.get(services.store, principal, id, now))


@router.post("/workloads/{id}/scale", response_model=WorkloadPublic)
def scale_workload(
    id: str, body: WorkloadScale, principal: PrincipalDep, services: ServicesDep, now: NowDep
) -> Response:
    id = path_id(id, body.id)
    view = workloads.scale(_wiring(services), principal, id, body.replicas, now, body.generation)
    services.placement_wakeup.set()
    return json_answer(workload_public(view))


@router.delete("/workloads/{id}", response_model=WorkloadPublic)
def delete_workload(id: str, principal: PrincipalDep, services: ServicesDep, now: NowDep) -> Response:
    view = workloads.delete(_wiring(services), principal, id, now)
    services.placement_wakeup.set()
    return json_answer(workload_public(view))


@router.get("/deployments", response_model=Page[DeploymentPublic])
def list_deployments(
    q: Annotated[DeploymentListQuery, Query()], principal: PrincipalDep, services: ServicesDep, now: NowDep
) -> Page[DeploymentPublic]:
    found = workloads.list_deployments(
        services.store, principal, now, workload_id=q.workload_id, limit=q.limit, after=q.cursor
    )
    return paged(found, deployment_public)


def _preview_tenant(principal: Principal, named: str | None) -> str:
    tenant_id = tenant_scope(principal, None if named is None else check_ref(named, "project"))
    if tenant_id is None:
        raise InvalidInput("project (tenantId) is required with an admin credential", {"field": "project"})
    return tenant_id


@router.post("/placement/preview", response_model=PlacementPreview)
def preview_placement(
    body: PlacementPreviewRequest, principal: PrincipalDep, services: ServicesDep, now: NowDep
) -> Response:
    if body.workload_id is not None:
        view = workloads.get(services.store, principal, body.workload_id, now)
        current = {d.deployment.cluster_id: d.booked for d in view.deployments}
        got = placement.preview(
            services.store,
            services.index,
            services.stock,
            principal,
            view.workload.spec,
            now,
            workload_id=view.id,
            current=current,
        )
        return json_answer(preview_public(got.placement, got.resolution))
    if body.shape is None:
        raise InvalidInput("give workloadId, or project, shape and replicas", {"field": "shape"})
    spec = workload_spec(
        place_workload(body, body.shape, "preview"), _preview_tenant(principal, body.tenant_id)
    )
    got = workloads.preview(_wiring(services), principal, spec, now)
    return json_answer(preview_public(got.placement, got.resolution))


@router.post("/operations", response_model=OperationPublic, status_code=201)
def create_operation(
    body: OperationCreate, principal: PrincipalDep, services: ServicesDep, now: NowDep, response: Response
) -> OperationPublic:
    """A drain's dry run answers 200 (nothing was created) with status `planned`."""
    if body.type == workloads.RELEASE_REPLICA:
        require_admin(principal, "operations.create (replica.release)")
    target = operation_target(
        body.type, body.workload_id, body.payload, dry_run=body.dry_run, force=body.force
    )
    if body.type == workloads.RELEASE_REPLICA:
        op = workloads.release_replica(_wiring(services), principal, target, now)
    else:
        assert body.workload_id is not None  # operation_target refused a drain without one
        op, _ = workloads.drain(
            _wiring(services),
            principal,
            body.workload_id,
            target,
            now,
            dry_run=body.dry_run,
            force=body.force,
        )
    if body.dry_run:
        response.status_code = 200
        return operation_public(op)
    services.placement_wakeup.set()
    return operation_public(op)


@router.get("/operations/{id}", response_model=OperationPublic)
def get_operation(id: str, principal: PrincipalDep, services: ServicesDep) -> OperationPublic:
    return operation_public(workloads.get_operation(services.store, principal, id))


def verdict_public(v: Verdict) -> VerdictPublic:
    return VerdictPublic(
        cluster_id=v.cluster_id,
        admitted=v.admitted,
        reason=v.reason,
        message=v.message,
        free_devices=v.free_devices,
        quota_left=v.quota_left,
        largest_domain=v.largest_domain,
        room=v.room,
        share=v.share,
        shortfall=v.shortfall,
        cost_per_hour=v.cost_per_hour,
    )


def deployment_public(v: DeploymentView) -> DeploymentPublic:
    d = v.deployment
    return DeploymentPublic(
        id=d.id,
        workload_id=d.workload_id,
        tenant_id=d.tenant_id,
        cluster_id=d.cluster_id,
        desired_replicas=d.desired_replicas,
        placed_replicas=v.booked,
        running_replicas=v.running,
        ready_replicas=v.ready,
        problems=[
            ReplicaProblemPublic(
                allocation_id=p.allocation_id,
                node=p.node_id,
                problem=p.problem,
                detail=p.detail,
                restarts=p.restarts,
                exit_code=p.exit_code,
            )
            for p in v.problems
            if p.problem is not None
        ],
        terminating_replicas=v.terminating,
        phase=v.phase,
        reason=d.reason,
        message=d.message,
        shortfall=d.shortfall,
        preempted_by=d.preempted_by,
        created_at=d.created_at,
        updated_at=d.updated_at,
    )


def preemptions_public(p: Placement) -> list[PreemptionPublic]:
    return [
        PreemptionPublic(
            cluster_id=cluster_id,
            workload_id=v.candidate.workload_id,
            allocation_id=v.candidate.allocation_id,
            priority_class=v.candidate.priority_class,
            why=cast("Any", v.why),
            kind="reservation" if v.candidate.reservation else "replica",
        )
        for cluster_id, eviction in sorted(p.evictions.items())
        for v in eviction.victims
    ]


def workload_public(v: WorkloadView) -> WorkloadPublic:
    w, s = v.workload, v.workload.spec
    return WorkloadPublic(
        id=w.id,
        name=s.name,
        tenant_id=w.tenant_id,
        shape=ShapePublic(
            device_class=s.device_class,
            device_count=s.device_count,
            capability=None
            if s.capability is None
            else CapabilityPublic.model_validate(s.capability.document()),
            container=None if s.container is None else ContainerPublic.model_validate(s.container.document()),
        ),
        replicas=s.replicas,
        strategy=s.strategy,
        cluster_floors=dict(s.cluster_floors),
        max_clusters=s.max_clusters,
        priority_class=s.priority_class,
        cluster=s.pinned_cluster,
        requires_single_topology_domain=s.single_domain,
        topology_domain_kind=s.domain_kind,
        allowed_regions=list(s.allowed_regions),
        allowed_clusters=list(s.allowed_clusters),
        drained_clusters=list(s.drained_clusters),
        policy_id=w.policy_id,
        placed_replicas=v.booked,
        ready_replicas=sum(d.ready for d in v.deployments),
        unplaced_replicas=w.unplaced,
        terminating_replicas=v.terminating,
        reason=w.reason,
        generation=w.generation,
        created_at=w.created_at,
        deployments=[deployment_public(d) for d in v.deployments],
        verdicts=None if v.placement is None else [verdict_public(x) for x in v.placement.verdicts],
        preemptions=None if v.placement is None else preemptions_public(v.placement),
        resolution=None if v.resolution is None else resolution_public(v.resolution),
    )


def resolution_public(r: Resolution) -> ResolutionPublic:
    chosen = r.chosen
    return ResolutionPublic(
        device_class=None if chosen is None else chosen.kind.class_name,
        kind=None if chosen is None else chosen.kind.name,
        memory_gib=None if chosen is None else chosen.memory_gib,
        compute_slices=None if chosen is None or chosen.compute_slices >= WHOLE else chosen.compute_slices,
        price_per_hour=None
        if chosen is None or chosen.price_per_hour is None
        else money(chosen.price_per_hour),
        currency=None if chosen is None else chosen.currency,
        free_devices=None if chosen is None else chosen.free,
        refused=[
            RefusedOfferPublic(
                device_class=x.offer.kind.class_name,
                kind=x.offer.kind.name,
                price_per_hour=None if x.offer.price_per_hour is None else money(x.offer.price_per_hour),
                reason=x.reason,
            )
            for x in r.refused
        ],
    )


def preview_public(p: Placement, resolution: Resolution | None = None) -> PlacementPreview:
    return PlacementPreview(
        clusters=list(p.shares),
        shares=dict(p.shares),
        verdicts=[verdict_public(v) for v in p.verdicts],
        unplaced_replicas=p.unplaced,
        reason=main_reason(p),
        preemptions=preemptions_public(p),
        resolution=None if resolution is None else resolution_public(resolution),
    )


def operation_public(o: Operation) -> OperationPublic:
    return OperationPublic(
        id=o.id,
        type=o.type,
        status=o.status,
        workload_id=o.workload_id,
        payload=dict(o.payload),
        result=dict(o.result),
        created_at=o.created_at,
        finished_at=o.finished_at,
    )
