"""Node identities: `nodes.joinToken` (admin), `nodes.join` (with a join token, no bearer token),
`nodes.report` (signed by the node) and `nodes.spec` (signed by the node, or read by the admin).

These routes take no router-wide bearer token: a node proves who it is with its signature
(api/signed.py, docs/node-auth.md), and a joining node with its join token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from better_compute.api.auth import PrincipalDep, get_principal
from better_compute.api.convert import joined_public, report_of, spec_public
from better_compute.api.deps import NowDep, ServicesDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.api.signed import is_signed, signed_request
from better_compute.domain.credentials import require_admin
from better_compute.domain.node_reports import Report, check_same_node
from better_compute.domain.node_spec import check_wait
from better_compute.service import joining, node_reports, node_spec
from better_compute.wire.nodes import (
    JoinTokenCreate,
    JoinTokenIssued,
    NodeJoin,
    NodeJoined,
    NodeReportSend,
    NodeSpecPublic,
    ReportAccepted,
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
    return joined_public(joining.join(store, node, body.token, body.public_key, now))


def _validated(node: str, body: NodeReportSend) -> Callable[[bytes], Report]:
    """The reader of a report's signed bytes: `body`, which FastAPI validated from those very bytes
    (the request's body, read once and kept), taken only once the signature is checked."""

    def read(_raw: bytes) -> Report:
        check_same_node(node, body.node)
        return report_of(body)

    return read


@router.post("/nodes/{node}/reports", response_model=ReportAccepted)
async def send_report(
    node: str, body: NodeReportSend, request: Request, services: ServicesDep
) -> ReportAccepted:
    """A signed report about `node`. Inventory reports that arrive while others are written are
    written together (service.report_batches), each answered as if it were alone."""
    signed = await signed_request(request)
    sent = node_reports.Sent(signed, _validated(node, body), services.clock(), body.report.kind)
    accepted = await run_in_threadpool(services.reports.accept, services.store, sent)
    return ReportAccepted(
        node=accepted.node, kind=accepted.kind, sequence=accepted.sequence, duplicate=accepted.duplicate
    )


_AFTER = "A generation the caller has: the answer waits (up to `wait`) for another one."
_WAIT = "Seconds to wait for a generation other than `after` (0 to 60; default 0)."


@router.get("/nodes/{node}/spec", response_model=NodeSpecPublic)
async def get_spec(
    node: str,
    request: Request,
    services: ServicesDep,
    after: Annotated[int | None, Query(ge=0, description=_AFTER)] = None,
    wait: Annotated[float | None, Query(ge=0, le=60, description=_WAIT)] = None,
) -> NodeSpecPublic:
    waited = check_wait(wait)
    if is_signed(request):
        signed = await signed_request(request)
        check_same_node(signed.node, node)
        await run_in_threadpool(node_reports.verify, services.store, signed, services.clock())
    else:
        principal = await get_principal(request)
        require_admin(principal, "nodes.spec")
    served = await node_spec.read_after(
        services.store, node, after, waited, services.clock, stopping=services.stopping
    )
    return spec_public(served)
