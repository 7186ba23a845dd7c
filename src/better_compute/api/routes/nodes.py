"""Node identities: `nodes.joinToken` (admin), `nodes.join` (with a join token, no bearer token),
`nodes.report` (signed by the node) and `nodes.spec` (signed by the node, or read by the admin).

These routes take no router-wide bearer token: a node proves who it is with its signature
(api/signed.py, docs/node-auth.md), and a joining node with its join token. Who calls is checked
before anything else the request says: an unsigned or badly signed caller is answered 401 whatever
its body or query hold, and only a known caller hears what is wrong with them. So the report route
hands its body's bytes to `service.fleet.node_reports`, which decodes and validates them once the
signature is checked (`ReportRoute`), and the spec route checks its reader before its query
(`SpecRoute`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool

from better_compute.api.auth import PrincipalDep, get_principal
from better_compute.api.bodies import NO_BODY, json_body
from better_compute.api.deps import NowDep, ServicesDep, StoreDep, services_of
from better_compute.api.query import StrictQueryRoute, check_repeats
from better_compute.api.signed import is_signed, signed_request
from better_compute.domain.fleet.inventory import GpuReport, MigInstance
from better_compute.domain.fleet.node_reports import (
    AgentReported,
    BindingReported,
    GenerationObserved,
    InventoryReported,
    ReplicaReported,
    Report,
    ScrubDone,
    check_same_node,
)
from better_compute.domain.fleet.records import LayoutRefusal, Node
from better_compute.domain.gate.node_spec import check_wait
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.kernel.timewin import require_aware
from better_compute.domain.tenancy.credentials import require_admin
from better_compute.service.fleet import joining, node_reports
from better_compute.service.gate import node_spec
from better_compute.service.gate.node_spec import ServedSpec
from better_compute.service.services import Services
from better_compute.wire.containers import ContainerPublic
from better_compute.wire.nodes import (
    AgentReport,
    AllocationBoundReport,
    AllocationReleasedReport,
    AssignmentPublic,
    GpuReported,
    GpuSpecPublic,
    InventoryReport,
    JoinTokenCreate,
    JoinTokenIssued,
    NodeJoin,
    NodeJoined,
    NodeReportSend,
    NodeSpecPublic,
    ObservedGenerationReport,
    ReplicaStateReport,
    ReportAccepted,
    ScrubDoneReport,
    SharingPublic,
)

router = APIRouter(prefix="/v1", tags=["nodes"], route_class=StrictQueryRoute)


@router.post("/nodes/{node}/join-tokens", response_model=JoinTokenIssued, status_code=201)
def create_join_token(
    node: str, body: JoinTokenCreate, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> JoinTokenIssued:
    issued = joining.issue(store, principal, node, now, body.ttl_seconds)
    return JoinTokenIssued(node=issued.node_id, token=issued.token, expires_at=issued.expires_at)


@router.post("/nodes/{node}/join", response_model=NodeJoined)
def join_node(node: str, body: NodeJoin, store: StoreDep, now: NowDep) -> NodeJoined:
    if body.node != node:
        # Refused before the token is looked at: a join of the wrong node spends nothing.
        raise InvalidInput(
            f"node: the body names node {body.node} but the path names node {node}; a node joins as"
            " itself, under one name",
            {"field": "node", "path": node, "body": body.node},
        )
    return joined_public(joining.join(store, node, body.token, body.public_key, now))


def _kind_named(payload: Any) -> str:
    """The report kind a decoded body names, before anything is checked (it only picks how the
    report is written: `node_reports.Sent.kind`); an inventory's way when it names none."""
    if isinstance(payload, dict):
        report = payload.get("report")
        if isinstance(report, dict) and isinstance(report.get("kind"), str):
            return str(report["kind"])
    return InventoryReported.KIND


def _woken(services: Services, accepted: node_reports.Accepted) -> None:
    """A container's state taken (committed): a relayout waiting for moved copies to be ready may
    go on (service.endpoints.relayout_resume reads the log to know)."""
    if accepted.kind == ReplicaReported.KIND and not accepted.duplicate:
        services.relayout_wakeup.set()


class ReportRoute(StrictQueryRoute):
    """`POST /v1/nodes/{node}/reports`, whose body is validated only once its signature is checked.

    FastAPI validates a route's body before the route runs, so an unsigned caller would hear which
    fields are wrong (400) rather than that it must sign (401). The route is declared like the others
    (its signature gives OpenAPI the body and the answer), and `get_route_handler` takes the steps
    itself: the signature headers (`unsigned`), then `service.fleet.node_reports.accept`, which verifies
    the signature and only then calls `read` on the body's bytes: decoded as every body is
    (`api.bodies`) and validated with the route's own field (the same errors FastAPI gives)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        body_field = self.body_field
        assert body_field is not None

        async def handle(request: Request) -> Response:
            if request.scope["query_string"]:
                check_repeats(request.query_params, {}, frozenset())
            services = services_of(request)
            signed = await signed_request(request)  # 401 `unsigned` before the body is looked at
            try:
                payload: Any = json_body(request.headers.get("content-type"), signed.body)
                kind = _kind_named(payload)
            except RequestValidationError as error:
                payload, kind = error, InventoryReported.KIND
            node = str(request.path_params["node"])

            def read(_raw: bytes) -> Report:
                if isinstance(payload, RequestValidationError):
                    raise payload
                if payload is NO_BODY:
                    raise RequestValidationError(
                        [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
                    )
                body, problems = body_field.validate(payload, {}, loc=("body",))
                if problems:
                    raise RequestValidationError(problems)
                assert isinstance(body, NodeReportSend)
                check_same_node(node, body.node)
                return report_of(body)

            sent = node_reports.Sent(signed, read, services.clock(), kind)
            accepted = await run_in_threadpool(services.reports.accept, services.store, sent)
            _woken(services, accepted)
            answer = ReportAccepted(
                node=accepted.node,
                kind=accepted.kind,
                sequence=accepted.sequence,
                duplicate=accepted.duplicate,
            )
            return Response(answer.model_dump_json(), media_type="application/json")

        return handle


# Served by ReportRoute's handler: this signature documents the route in OpenAPI (and serves it, its
# body validated first, under a plain APIRoute).
async def send_report(
    node: str, body: NodeReportSend, request: Request, services: ServicesDep
) -> ReportAccepted:
    """A signed report about `node`. Inventory reports that arrive while others are written are
    written together (service.fleet.report_batches), each answered as if it were alone."""
    signed = await signed_request(request)

    def read(_raw: bytes) -> Report:
        check_same_node(node, body.node)
        return report_of(body)

    sent = node_reports.Sent(signed, read, services.clock(), body.report.kind)
    accepted = await run_in_threadpool(services.reports.accept, services.store, sent)
    _woken(services, accepted)
    return ReportAccepted(
        node=accepted.node, kind=accepted.kind, sequence=accepted.sequence, duplicate=accepted.duplicate
    )


router.add_api_route(
    "/nodes/{node}/reports",
    send_report,
    methods=["POST"],
    response_model=ReportAccepted,
    route_class_override=ReportRoute,
)


_READER = "bc.spec_reader"
"""Where `SpecRoute` keeps, in the request's scope, that the spec's reader was let in."""


async def _let_in_reader(request: Request) -> None:
    """Check who reads `nodes.spec`: the node itself, signed (its sequence number taken, so the same
    signed read cannot be sent again), or the admin with a bearer token. Once per request."""
    if request.scope.get(_READER):
        return
    services = services_of(request)
    if is_signed(request):
        signed = await signed_request(request)
        # The signature first: a caller that cannot sign as the node it names hears 401 whatever
        # path it asks for; a node reading another node's spec is refused once it has signed.
        await run_in_threadpool(node_reports.accept_read, services.store, signed, services.clock())
        check_same_node(signed.node, str(request.path_params["node"]))
    else:
        require_admin(await get_principal(request), "nodes.spec")
    request.scope[_READER] = True


class SpecRoute(StrictQueryRoute):
    """`GET /v1/nodes/{node}/spec`, whose reader is let in before its query is validated."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            await _let_in_reader(request)
            return await handler(request)

        return handle


_AFTER = "A generation the caller has: the answer waits (up to `wait`) for another one."
_WAIT = "Seconds to wait for a generation other than `after` (0 to 60; default 0)."


async def get_spec(
    node: str,
    request: Request,
    services: ServicesDep,
    after: Annotated[int | None, Query(ge=0, description=_AFTER)] = None,
    wait: Annotated[float | None, Query(ge=0, le=60, description=_WAIT)] = None,
) -> NodeSpecPublic:
    await _let_in_reader(request)  # done already under SpecRoute; here too under any other route
    waited = check_wait(wait)
    served = await node_spec.read_after(
        services.store, node, after, waited, services.clock, stopping=services.stopping
    )
    return spec_public(served)


router.add_api_route(
    "/nodes/{node}/spec",
    get_spec,
    methods=["GET"],
    response_model=NodeSpecPublic,
    route_class_override=SpecRoute,
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
        mig_state_unknown=g.mig_state_unknown,
    )


def _layout_refused(r: InventoryReport) -> tuple[LayoutRefusal, ...]:
    """The inventory's refusals, one per GPU (its first entry), each about a GPU the inventory lists."""
    listed = {g.uuid for g in r.gpus}
    strangers = sorted({x.gpu for x in r.layout_refused} - listed)
    if strangers:
        raise InvalidInput(
            f"layoutRefused names GPUs the inventory does not list: {strangers[:8]}",
            {"field": "layoutRefused"},
        )
    kept = {x.gpu: x for x in reversed(r.layout_refused)}
    return tuple(
        LayoutRefusal(x.gpu, x.action, x.reason, require_aware(x.since, "layoutRefused.since"))
        for _, x in sorted(kept.items())
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
                _layout_refused(r),
            )
        case AllocationBoundReport():
            return BindingReported(sent.node, r.allocation_id, r.binding, r.detail, rid)
        case AllocationReleasedReport():
            return BindingReported(sent.node, r.allocation_id, "released", None, rid)
        case ObservedGenerationReport():
            return GenerationObserved(sent.node, r.generation, rid)
        case ScrubDoneReport():
            return ScrubDone(sent.node, tuple(r.atoms), rid)
        case AgentReport():
            return AgentReported(sent.node, r.url, r.token, rid)
        case ReplicaStateReport():
            return ReplicaReported(
                sent.node,
                r.allocation_id,
                r.state,
                r.exit_code,
                r.problem,
                r.detail,
                r.restarts,
                r.address,
                rid,
            )


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
                allocation_id=a.allocation_id,
                atoms=list(a.atoms),
                env=dict(a.env),
                tenant_id=a.tenant_id,
                container=None
                if a.container is None
                else ContainerPublic.model_validate(a.container.document()),
                job_container=None
                if a.job_container is None
                else ContainerPublic.model_validate(a.job_container.document()),
            )
            for a in spec.assignments
        ],
    )
