"""Records as wire models: the one place a use case's answer becomes an HTTP answer, field by field.

Every mapping is written out, so a renamed column or record field breaks here (and in mypy), never
silently on the wire; a record field the wire does not show (a credential's token hash) is simply
not mapped.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar, cast

from better_compute.domain.endpoints.endpoints import endpoint_json
from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.inventory import GpuReport, MigInstance
from better_compute.domain.fleet.node_reports import (
    BindingReported,
    GenerationObserved,
    InventoryReported,
    Report,
    ScrubDone,
)
from better_compute.domain.fleet.records import Cluster, Gpu, Node
from better_compute.domain.gate.layout_preview import LayoutPreview, NodePreview
from better_compute.domain.kernel.events import StreamedEvent, type_of
from better_compute.domain.kernel.selectors import document
from better_compute.domain.ledger.ledger import Availability
from better_compute.domain.metering.accounting import StateHours
from better_compute.domain.metering.billing import Bill, Price
from better_compute.domain.metering.metering import Usage, shown
from better_compute.domain.metering.rollups import ClassCount, ModelCount, WholeBooked
from better_compute.domain.ops.doctor import Finding
from better_compute.domain.placement.capability import WHOLE, Resolution
from better_compute.domain.placement.class_quotas import ClassQuota
from better_compute.domain.placement.costs import money
from better_compute.domain.placement.device_classes import DeviceClass
from better_compute.domain.placement.priority_classes import PriorityClass
from better_compute.domain.placement.records import Operation
from better_compute.domain.placement.verdicts import Placement, Verdict
from better_compute.domain.tenancy.credentials import Principal
from better_compute.domain.tenancy.iam import Policy
from better_compute.domain.tenancy.records import Credential, Quota, Tenant
from better_compute.service.endpoints.components import ComponentView
from better_compute.service.endpoints.endpoints import EndpointView
from better_compute.service.fleet.inventory import NodeView
from better_compute.service.fleet.pools import PoolView
from better_compute.service.gate.node_spec import ServedSpec
from better_compute.service.kernel.paging import Listing
from better_compute.service.ledger.capacity import Accounting, PoolFree
from better_compute.service.ledger.reservations import ReservationView
from better_compute.service.placement.placement import main_reason
from better_compute.service.placement.workloads import DeploymentView, WorkloadView
from better_compute.service.tenancy.credentials import Issued
from better_compute.wire.billing import (
    BillLinePublic,
    BillPublic,
    PricePublic,
    ShowbackLinePublic,
    UsageRowPublic,
)
from better_compute.wire.capacity import (
    AccountingBucket,
    CapacityAccounting,
    CapacityByPool,
    CapacityFree,
    CapacitySummary,
    CapacityTimeline,
    FreeKindPublic,
    ModelCountPublic,
    PoolClassCountPublic,
    StateHoursPublic,
    TimelineBucket,
)
from better_compute.wire.common import Page
from better_compute.wire.device_classes import DeviceClassPublic
from better_compute.wire.doctor import DoctorFinding, DoctorReport
from better_compute.wire.endpoints import (
    ComponentPublic,
    CopyPublic,
    EndpointPublic,
    InstancePublic,
    VariantPublic,
)
from better_compute.wire.events import EventPublic
from better_compute.wire.inventory import (
    AtomPublic,
    ClusterPublic,
    GpuPublic,
    MigInstancePublic,
    MigModePublic,
    NodePublic,
)
from better_compute.wire.nodes import (
    AllocationBoundReport,
    AllocationReleasedReport,
    AssignmentPublic,
    GpuReported,
    GpuSpecPublic,
    InventoryReport,
    NodeJoined,
    NodeReportSend,
    NodeSpecPublic,
    ObservedGenerationReport,
    ScrubDoneReport,
    SharingPublic,
)
from better_compute.wire.policies import PolicyLimits, PolicyPublic
from better_compute.wire.pools import (
    AppearingInstancePublic,
    LayoutCapacityPublic,
    LayoutChangeHoldPublic,
    LayoutHolderPublic,
    NodeLayoutPreviewPublic,
    PoolLayoutPreview,
    PoolPolicy,
    PoolPublic,
)
from better_compute.wire.priority_classes import PriorityClassPublic
from better_compute.wire.quotas import QuotaPublic
from better_compute.wire.reservations import ReservationAtom, ReservationCreate, ReservationPublic
from better_compute.wire.tenants import CredentialCreated, CredentialPublic, TenantPublic, WhoAmI
from better_compute.wire.workloads import (
    CapabilityPublic,
    DeploymentPublic,
    OperationPublic,
    PlacementPreview,
    PreemptionPublic,
    RefusedOfferPublic,
    ResolutionPublic,
    ShapePublic,
    VerdictPublic,
    WorkloadPublic,
)

R = TypeVar("R")
M = TypeVar("M")


def paged(listing: Listing[R], convert: Callable[[R], M]) -> Page[M]:
    return Page[Any](items=[convert(r) for r in listing.items], next_cursor=listing.next_cursor)


def tenant_public(t: Tenant) -> TenantPublic:
    return TenantPublic(id=t.id, name=t.name, created_at=t.created_at, deleted_at=t.deleted_at)


def credential_public(c: Credential) -> CredentialPublic:
    return CredentialPublic(
        id=c.id, tenant_id=c.tenant_id, name=c.name, created_at=c.created_at, revoked_at=c.revoked_at
    )


def credential_created(issued: Issued) -> CredentialCreated:
    c = issued.credential
    return CredentialCreated(
        id=c.id,
        tenant_id=c.tenant_id,
        name=c.name or None,
        created_at=c.created_at,
        revoked_at=c.revoked_at,
        token=issued.token,
    )


def pool_public(v: PoolView) -> PoolPublic:
    p = v.pool
    return PoolPublic(
        id=p.id,
        name=p.name,
        cluster_id=p.cluster_id,
        mode=p.mode,
        policy=PoolPolicy(
            mig_layout=p.settings.mig_layout,
            replicas=p.settings.replicas,
            max_duration=p.settings.max_duration,
            scrub=p.settings.scrub,
        ),
        owner_tenant_id=p.owner_tenant_id,
        nodes=list(v.nodes),
        meter=p.meter,
        generation=p.generation,
        created_at=p.created_at,
    )


def _node_layout_preview(n: NodePreview) -> NodeLayoutPreviewPublic:
    return NodeLayoutPreviewPublic(
        node=n.node,
        carries_pool_layout=n.carries_pool_layout,
        layout=n.layout,
        change_state=n.change_state,
        grantable_at=n.grantable_at,
        held_open_ended=n.held_open_ended,
        held_by=[
            LayoutHolderPublic(allocation_id=h.allocation_id, tenant_id=h.tenant_id, ends_at=h.ends_at)
            for h in n.held_by
        ],
        change_holds=[
            LayoutChangeHoldPublic(
                allocation_id=h.allocation_id, gpu_id=h.gpu_id, starts_at=h.starts_at, ends_at=h.ends_at
            )
            for h in n.change_holds
        ],
        disappear=list(n.disappear),
        appear=[
            AppearingInstancePublic(
                gpu_id=i.gpu_id,
                mig_profile=i.mig_profile,
                placement_start=i.placement_start,
                placement_size=i.placement_size,
            )
            for i in n.appear
        ],
        capacity=LayoutCapacityPublic(before=dict(n.before), after=dict(n.after)),
    )


def layout_preview(p: LayoutPreview) -> PoolLayoutPreview:
    return PoolLayoutPreview(
        pool_id=p.pool_id,
        from_=p.from_layout,
        to=p.to_layout,
        at=p.at,
        nodes=[_node_layout_preview(n) for n in p.nodes],
        capacity=LayoutCapacityPublic(before=dict(p.before), after=dict(p.after)),
    )


def quota_public(q: Quota | ClassQuota, used: int | None = None) -> QuotaPublic:
    if isinstance(q, ClassQuota):
        return QuotaPublic.model_validate(
            {
                "tenantId": q.tenant_id,
                "scope": q.scope,
                "deviceClass": q.device_class,
                "clusterId": q.cluster_id,
                "guaranteedDevices": q.guaranteed_devices,
                "floorDevices": q.floor_devices,
                "overQuotaWeight": q.over_quota_weight,
                "used": used,
            }
        )
    return QuotaPublic.model_validate(
        {"tenantId": q.tenant_id, "poolId": q.pool_id, "class": q.cls, "limit": q.limit, "used": used}
    )


def policy_public(p: Policy) -> PolicyPublic:
    assert p.created_at is not None, "a stored policy has its creation time"
    c = p.constraints
    return PolicyPublic(
        id=p.id,
        name=p.name,
        tenant_id=p.tenant_id,
        pool_id=p.pool_id,
        subject_type=p.subject_type,
        subject_id=p.subject_id,
        limits=PolicyLimits(gpu_count=p.gpu_count, gpu_slices=p.gpu_slices),
        allowed_regions=list(c.allowed_regions),
        allowed_residencies=list(c.allowed_residencies),
        allowed_device_classes=list(c.allowed_device_classes),
        allowed_clusters=list(c.allowed_clusters),
        denied_clusters=list(c.denied_clusters),
        cost_ceiling=c.cost_ceiling,
        generation=p.generation,
        created_at=p.created_at,
    )


def cluster_public(c: Cluster) -> ClusterPublic:
    return ClusterPublic(
        id=c.id,
        name=c.id,
        region=c.region,
        residency=list(c.residency),
        phase=c.phase,
        created_at=c.created_at,
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
        observed_generation=n.observed_generation,
        last_report_at=n.last_report_at,
        last_contact_at=n.last_contact_at,
    )


def gpu_public(g: Gpu) -> GpuPublic:
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


def capacity_free(answer: PoolFree) -> CapacityFree:
    assert answer.window.end is not None
    return CapacityFree(
        pool_id=answer.pool_id,
        from_=answer.window.start,
        to=answer.window.end,
        count=answer.count,
        kinds=[
            FreeKindPublic(
                cls=k.cls,
                gpu_model=k.gpu_model,
                mig_profile=k.mig_profile,
                atoms=k.atoms,
                free=k.free,
                earliest_start=k.earliest_start,
            )
            for k in answer.kinds
        ],
    )


def state_hours(hours: StateHours) -> StateHoursPublic:
    """Hours by state, each rounded for display only (`domain.metering.metering.shown`)."""
    return StateHoursPublic(
        capacity=shown(hours.capacity),
        booked=shown(hours.booked),
        free=shown(hours.free),
        changing=shown(hours.changing),
        unhealthy=shown(hours.unhealthy),
        cordoned=shown(hours.cordoned),
    )


def capacity_accounting(answer: Accounting) -> CapacityAccounting:
    return CapacityAccounting(
        pool_id=answer.pool_id,
        from_=answer.grid.start,
        to=answer.grid.end,
        bucket=answer.grid.bucket,
        buckets=[
            AccountingBucket(from_=span.start, to=span.end, hours=state_hours(hours))
            for span, hours in answer.buckets
        ],
        total=state_hours(answer.total),
    )


def capacity_summary(at: datetime, pool_id: str | None, models: list[ModelCount]) -> CapacitySummary:
    return CapacitySummary(
        at=at,
        pool_id=pool_id,
        models=[
            ModelCountPublic(
                model=m.model, total=m.total, bookable=m.bookable, booked=m.booked, unhealthy=m.unhealthy
            )
            for m in models
        ],
    )


def doctor_report(checked_at: datetime, findings: list[Finding]) -> DoctorReport:
    return DoctorReport(
        findings=[
            DoctorFinding(code=f.code, subject=f.subject, detail=f.detail, action=f.action) for f in findings
        ],
        checked_at=checked_at,
    )


def capacity_by_pool(at: datetime, rows: list[ClassCount]) -> CapacityByPool:
    return CapacityByPool(
        at=at,
        rows=[
            PoolClassCountPublic(
                pool_id=r.pool_id, cls=r.cls, total=r.total, bookable=r.bookable, booked=r.booked
            )
            for r in rows
        ],
    )


def capacity_timeline(
    pool_id: str | None, start: datetime, end: datetime, bucket: str, buckets: list[WholeBooked]
) -> CapacityTimeline:
    return CapacityTimeline(
        pool_id=pool_id,
        from_=start,
        to=end,
        bucket=bucket,
        buckets=[
            TimelineBucket(from_=b.span.start, to=b.span.end, booked=b.peak, hours=shown(b.hours))
            for b in buckets
        ],
    )


def _atom_fields(atom: Atom) -> dict[str, Any]:
    """An atom a reservation holds, by its wire names."""
    return {
        "id": atom.id,
        "class": atom.cls,
        "gpuId": atom.gpu_id,
        "node": atom.node,
        "attributes": dict(atom.attributes),
    }


def _reservation_fields(view: ReservationView, devices: Any, atoms: list[Any]) -> dict[str, Any]:
    """A reservation by its wire names, with its devices and atoms as the caller has them."""
    r = view.reservation
    return {
        "id": r.id,
        "tenantId": r.tenant_id,
        "poolId": r.pool_id,
        "status": view.status.value,
        "start": r.starts_at,
        "end": r.ends_at,
        "devices": devices,
        "atoms": atoms,
        "gpuCount": r.gpu_count,
        "gpuSlices": r.gpu_slices,
        "idempotencyKey": r.idempotency_key,
        "createdAt": r.created_at,
        "binding": view.binding,
        "bindingDetail": view.binding_detail,
        "preemptible": r.preemptible,
    }


def reservation_public(view: ReservationView) -> ReservationPublic:
    atoms = [_atom_fields(a) for a in view.atoms]
    return ReservationPublic.model_validate(
        _reservation_fields(view, [dict(d) for d in view.reservation.devices], atoms)
    )


def created_public(view: ReservationView, body: ReservationCreate) -> ReservationPublic:
    """`reservation_public` of a reservation just made from `body`, without validating it again: every
    part is already of its wire type (the devices are the request's own, validated). A replayed
    reservation goes through `reservation_public`: its devices are the first request's."""
    if view.replayed or any(d.capability is not None for d in body.devices):
        return reservation_public(view)  # the devices as resolved and stored
    # By alias: a field named `cls` would clash with model_construct's own first argument.
    atoms = [ReservationAtom.model_construct(**_atom_fields(a)) for a in view.atoms]
    return ReservationPublic.model_construct(**_reservation_fields(view, body.devices, atoms))


def whoami(p: Principal) -> WhoAmI:
    return WhoAmI(credential_id=p.credential_id, tenant_id=p.tenant_id, is_admin=p.is_admin)


def event_public(e: StreamedEvent) -> EventPublic:
    return EventPublic(
        id=e.id, type=type_of(e.event), subject=e.event.subject, time=e.at, payload=e.event.payload()
    )


def usage_public(u: Usage) -> UsageRowPublic:
    b = u.booking
    assert u.held.end is not None, "held time always ends"
    return UsageRowPublic(
        booking_id=b.booking_id,
        reservation_id=b.reservation_id,
        tenant_id=b.tenant_id,
        pool_id=b.pool_id,
        atom_id=b.atom_id,
        cls=b.cls,
        gpu_model=b.gpu_model,
        meter=b.meter,
        share=str(b.share),
        start=u.held.start,
        end=u.held.end,
        hours=shown(u.hours),
    )


def bill_public(bill: Bill) -> BillPublic:
    assert bill.period.end is not None, "a period has an end"
    return BillPublic(
        tenant_id=bill.tenant_id,
        from_=bill.period.start,
        to=bill.period.end,
        lines=[
            BillLinePublic(
                meter=line.meter,
                hours=shown(line.hours),
                amount=None if line.amount is None else str(line.amount),
                currency=line.currency,
            )
            for line in bill.lines
        ],
        total=None if bill.total is None else str(bill.total),
        showback=[
            ShowbackLinePublic(
                endpoint=line.endpoint,
                component=line.component,
                gpu_hours=shown(line.gpu_hours),
                amount=None if line.amount is None else str(line.amount),
            )
            for line in bill.showback
        ],
    )


def price_public(p: Price) -> PricePublic:
    return PricePublic(meter=p.meter, per_hour=p.per_hour, currency=p.currency, updated_at=p.updated_at)


def device_class_public(d: DeviceClass) -> DeviceClassPublic:
    return DeviceClassPublic.model_validate(
        {
            "id": d.name,
            "name": d.name,
            "class": d.cls,
            "selector": document(d.selector),
            "createdAt": d.created_at,
        }
    )


def priority_class_public(p: PriorityClass) -> PriorityClassPublic:
    return PriorityClassPublic(
        id=p.name, name=p.name, priority=p.priority, preemptible=p.preemptible, created_at=p.created_at
    )


def joined_public(node: Node) -> NodeJoined:
    assert node.public_key is not None and node.joined_at is not None
    return NodeJoined(node=node.id, public_key=node.public_key, joined_at=node.joined_at, next_sequence=1)


def _gpu_reported(g: GpuReported) -> GpuReport:
    return GpuReport(
        uuid=g.uuid,
        product=g.product,
        memory_mib=g.memory_mib,
        index=g.index,
        numa_node=g.numa_node,
        nvlink_peers=tuple(g.nvlink_peers),
        healthy=g.healthy,
        mig_mode_current=g.mig_mode.current,
        mig_mode_pending=g.mig_mode.pending,
        mig_instances=tuple(
            MigInstance(
                profile=i.profile,
                gi_id=i.gi_id,
                ci_id=i.ci_id,
                placement_start=i.placement_start,
                placement_size=i.placement_size,
                uuid=i.uuid,
            )
            for i in g.mig_instances
        ),
    )


def report_of(sent: NodeReportSend) -> Report:
    """A signed report's body as the domain's report about `sent.node`."""
    r = sent.report
    rid = sent.report_id
    match r:
        case InventoryReport():
            return InventoryReported(
                sent.node,
                tuple(_gpu_reported(g) for g in r.gpus),
                r.observed_generation,
                rid,
                tuple(sorted(set(r.reboot_required))),
            )
        case AllocationBoundReport():
            return BindingReported(sent.node, r.allocation_id, r.binding, r.detail, rid)
        case AllocationReleasedReport():
            return BindingReported(sent.node, r.allocation_id, "released", None, rid)
        case ObservedGenerationReport():
            return GenerationObserved(sent.node, r.generation, rid)
        case ScrubDoneReport():
            return ScrubDone(sent.node, tuple(r.atoms), rid)


def spec_public(served: ServedSpec) -> NodeSpecPublic:
    spec = served.spec
    return NodeSpecPublic(
        node=spec.node,
        generation=served.generation,
        gpus=[GpuSpecPublic(uuid=g.uuid, mig_layout=g.mig_layout) for g in spec.gpus],
        sharing=SharingPublic(
            mode=spec.sharing.mode, replicas=spec.sharing.replicas, scrub=spec.sharing.scrub
        ),
        assignments=[
            AssignmentPublic(
                allocation_id=a.allocation_id, atoms=list(a.atoms), env=dict(a.env), tenant_id=a.tenant_id
            )
            for a in spec.assignments
        ],
    )


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
        running_replicas=v.bound,
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
        placed_copies=v.placed,
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
            )
            for c in v.copies
        ],
        created_at=r.created_at,
        updated_at=r.updated_at,
    )
