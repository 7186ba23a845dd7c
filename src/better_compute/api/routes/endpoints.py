"""Inference endpoints and their components: `endpoints.create|list|get|update|delete` and
`components.create|list|get|scale|delete` (docs/endpoints.md#components)."""

from __future__ import annotations

from typing import Annotated, Any, cast

from fastapi import APIRouter, Query, Response

from better_compute.api.answers import json_answer, paged
from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.containers import container_document
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.endpoints.commands import (
    CreateComponent,
    CreateEndpoint,
    NewLayout,
    NewVariant,
    RelayoutEndpoint,
)
from better_compute.domain.endpoints.endpoints import endpoint_json
from better_compute.domain.tenancy.tenancy import tenant_scope
from better_compute.service.endpoints import components, endpoints
from better_compute.service.endpoints.components import ComponentView
from better_compute.service.endpoints.endpoints import EndpointDeletion, EndpointView
from better_compute.wire.common import Page
from better_compute.wire.containers import ContainerPublic
from better_compute.wire.endpoints import (
    ComponentCreate,
    ComponentListQuery,
    ComponentPublic,
    ComponentScale,
    CopyPublic,
    EndpointCreate,
    EndpointDeletionPublic,
    EndpointListQuery,
    EndpointPublic,
    EndpointUpdate,
    InstancePublic,
    NodeReturnPublic,
    PartitionLayout,
    VariantPublic,
)

router = APIRouter(prefix="/v1", tags=["endpoints"], dependencies=AUTHENTICATED, route_class=StrictQueryRoute)


@router.post("/endpoints", response_model=EndpointPublic, status_code=201)
def create_endpoint(body: EndpointCreate, principal: PrincipalDep, store: StoreDep, now: NowDep) -> Response:
    tenant = tenant_scope(principal, body.tenant_id)
    asked = endpoint_command(body, body.tenant_id if tenant is None else tenant)
    return json_answer(endpoint_public(endpoints.create(store, principal, asked, now)), 201)


@router.get("/endpoints", response_model=Page[EndpointPublic])
def list_endpoints(
    q: Annotated[EndpointListQuery, Query()], principal: PrincipalDep, store: StoreDep, now: NowDep
) -> Page[EndpointPublic]:
    found = endpoints.list_endpoints(
        store, principal, now, tenant_id=q.tenant_id, limit=q.limit, after=q.cursor
    )
    return paged(found, endpoint_public)


@router.get("/endpoints/{name}", response_model=EndpointPublic)
def get_endpoint(name: str, principal: PrincipalDep, store: StoreDep, now: NowDep) -> EndpointPublic:
    return endpoint_public(endpoints.get(store, principal, name, now))


@router.patch("/endpoints/{name}", response_model=EndpointPublic)
def update_endpoint(
    name: str, body: EndpointUpdate, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> EndpointPublic:
    asked = RelayoutEndpoint(
        name, tuple(NewLayout(v.name, _types(v.accelerator_partition_layouts)) for v in body.variants)
    )
    return endpoint_public(endpoints.update(store, principal, asked, now))


@router.delete("/endpoints/{name}", response_model=EndpointPublic)
def delete_endpoint(
    name: str,
    principal: PrincipalDep,
    store: StoreDep,
    now: NowDep,
    dry_run: Annotated[
        bool,
        Query(alias="dryRun", description="Answer what the delete would do, and change nothing."),
    ] = False,
) -> EndpointPublic:
    return deletion_public(endpoints.delete(store, principal, name, now, dry_run=dry_run))


def deletion_public(d: EndpointDeletion) -> EndpointPublic:
    nodes = [
        NodeReturnPublic(node=n.node, pool_id=n.pool_id, layout_from=n.layout_from, layout_to=n.layout_to)
        for n in d.nodes
    ]
    deletion = EndpointDeletionPublic(components=list(d.components), nodes=nodes)
    return endpoint_public(d.view).model_copy(update={"dry_run": d.dry_run, "deletion": deletion})


@router.post("/components", response_model=ComponentPublic, status_code=201)
def create_component(
    body: ComponentCreate, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> Response:
    view = components.create(store, principal, component_command(body), now)
    return json_answer(component_public(view), 201)


@router.get("/components", response_model=Page[ComponentPublic])
def list_components(
    q: Annotated[ComponentListQuery, Query()], principal: PrincipalDep, store: StoreDep, now: NowDep
) -> Page[ComponentPublic]:
    found = components.list_components(
        store, principal, now, endpoint_name=q.endpoint_name, limit=q.limit, after=q.cursor
    )
    return paged(found, component_public)


@router.get("/components/{name}", response_model=ComponentPublic)
def get_component(name: str, principal: PrincipalDep, store: StoreDep, now: NowDep) -> ComponentPublic:
    return component_public(components.get(store, principal, name, now))


@router.post("/components/{name}/scale", response_model=ComponentPublic)
def scale_component(
    name: str, body: ComponentScale, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> ComponentPublic:
    view = components.scale(
        store,
        principal,
        name,
        body.copies,
        now,
        min_copies=body.min_copies,
        partition_type=body.partition_type,
    )
    return component_public(view)


@router.delete("/components/{name}", response_model=ComponentPublic)
def delete_component(name: str, principal: PrincipalDep, store: StoreDep, now: NowDep) -> ComponentPublic:
    return component_public(components.delete(store, principal, name, now))


def _types(layouts: list[PartitionLayout]) -> tuple[str, ...]:
    """The partition types of a variant's one layout (the wire takes exactly one entry)."""
    (layout,) = layouts
    return tuple(layout.accelerator_partition_types)


def endpoint_command(body: EndpointCreate, tenant_id: str | None) -> CreateEndpoint:
    """The request as the endpoints' command, for `tenant_id` (the one named, or the token's)."""
    return CreateEndpoint(
        name=body.name,
        tenant_id=tenant_id,
        variants=tuple(
            NewVariant(
                name=v.name,
                pool_id=v.pool_id,
                instance_count=v.instance_count,
                partition_types=_types(v.accelerator_partition_layouts),
                price_per_instance_hour=v.price_per_instance_hour,
            )
            for v in body.variants
        ),
    )


def component_command(body: ComponentCreate) -> CreateComponent:
    """The request as the endpoints' command; a field left out takes the command's default."""
    return CreateComponent(
        name=body.name,
        endpoint_name=body.endpoint_name,
        variant_name=body.variant_name,
        model=body.model,
        partition_type=body.partition_type,
        devices_required=body.devices_required,
        cpu_cores=1 if body.cpu_cores is None else body.cpu_cores,
        memory_mib=1024 if body.memory_mib is None else body.memory_mib,
        copies=body.copies,
        min_copies=body.min_copies,
        container=None if body.container is None else container_document(body.container),
        invoke_path=body.invoke_path,
    )


def endpoint_public(v: EndpointView) -> EndpointPublic:
    r = v.record
    return EndpointPublic(
        name=r.name,
        tenant_id=r.tenant_id,
        status=v.status,
        reason=r.reason,
        variants=[VariantPublic.model_validate(x) for x in endpoint_json(v.spec)["variants"]],
        instances=[
            InstancePublic(
                node=i.node,
                variant=i.variant,
                layout=i.layout,
                state=i.state,
                gpus=i.gpus,
                partitions=i.partitions,
            )
            for i in v.instances
        ],
        created_at=r.created_at,
        updated_at=r.updated_at,
    )


def component_public(v: ComponentView) -> ComponentPublic:
    r, s = v.record, v.spec
    return ComponentPublic(
        name=r.name,
        endpoint_name=r.endpoint,
        variant_name=s.variant_name,
        tenant_id=v.tenant_id,
        model=s.model,
        partition_type=s.partition_type,
        devices_required=1,
        cpu_cores=str(s.cpu_cores),
        memory_mib=s.memory_mib,
        copy_count=s.copies,
        min_copies=s.min_copies,
        container=None if s.container is None else ContainerPublic.model_validate(s.container.document()),
        invoke_path=s.invoke_path,
        placed_copies=v.placed,
        ready_copies=v.ready,
        pending_copies=len(v.copies) - v.placed,
        reason=v.reason,
        copies=[
            CopyPublic(
                index=c.copy,
                state=c.state,
                node=c.node,
                gpu_id=c.gpu_id,
                partition=c.partition,
                atom_id=c.atom_id,
                mig_uuid=c.mig_uuid,
                runtime_state=cast("Any", c.runtime_state),
            )
            for c in v.copies
        ],
        created_at=r.created_at,
        updated_at=r.updated_at,
    )
