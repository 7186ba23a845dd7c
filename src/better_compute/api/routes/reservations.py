"""Reservations: create (201, or 200 for a replayed idempotency key), get, list, cancel, release, extend."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import TypeAdapter

from better_compute.api.answers import paged
from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.bodies import NO_BODY, json_body
from better_compute.api.deps import NowDep, ServicesDep, StoreDep, services_of
from better_compute.api.errors import code_of
from better_compute.api.metrics import Metrics, metrics_of
from better_compute.api.query import StrictQueryRoute, check_repeats
from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.ledger.commands import Reserve
from better_compute.domain.tenancy.credentials import Caller, bearer_token
from better_compute.service.kernel.telemetry import Telemetry
from better_compute.service.ledger import reservations
from better_compute.service.ledger.reservations import ReservationView
from better_compute.service.services import Services
from better_compute.service.tenancy import credentials
from better_compute.wire.common import Page
from better_compute.wire.reservations import (
    ReservationAtom,
    ReservationCreate,
    ReservationExtend,
    ReservationListQuery,
    ReservationPublic,
)

router = APIRouter(
    prefix="/v1", tags=["reservations"], dependencies=AUTHENTICATED, route_class=StrictQueryRoute
)


class AdmissionRoute(APIRoute):
    """`POST /v1/reservations`, handled without FastAPI's per-request dependency solving.

    It is the API's busiest route, and resolving its dependencies cost more than admission's own
    decision. The route is declared like the others (its signature gives OpenAPI the body, the
    security scheme and the answers), and `get_route_handler` does the same steps directly:
    authenticate, read the JSON body (`api.bodies`, as `StrictQueryRoute` reads every other route's),
    validate it with the route's own field (same errors), admit. It takes no query parameter; one
    given twice is refused as on every route.

    Reading a body is where hand-written code goes wrong (two 500s so far), so `make test` fuzzes it
    against FastAPI's own handling of the same endpoint: any body and content type must get the
    answer FastAPI gives, and never a 5xx (tests/reliability/test_reservation_body_fuzz.py).
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        body_field = self.body_field
        assert body_field is not None

        async def handle(request: Request) -> Response:
            metrics = metrics_of(request)
            started = time.perf_counter()
            try:
                answer = await admit(request, metrics)
            except Exception as exc:
                metrics.answered(started, refused=code_of(exc))
                raise
            metrics.answered(started, created=answer.status_code == 201)
            return answer

        async def admit(request: Request, metrics: Metrics) -> Response:
            if request.scope["query_string"]:
                check_repeats(request.query_params, {}, frozenset())
            services = services_of(request)
            token = bearer_token(request.headers.get("authorization"))
            # The token's owner may be remembered from an earlier request; admission then confirms
            # in its own transaction that the credential is not revoked (no look-up of its own).
            with credentials.acting_as(services.store, services.tokens, token) as caller:
                # Only now the body: a caller without a valid token is refused before sending it.
                payload = json_body(request.headers.get("content-type"), await request.body())
                if payload is NO_BODY:
                    raise RequestValidationError(
                        [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
                    )
                body, problems = body_field.validate(payload, {}, loc=("body",))
                if problems:
                    raise RequestValidationError(problems)
                if services.admission is None:
                    return _admit(body, caller, services, metrics)
                loop = asyncio.get_running_loop()
                return await loop.run_in_executor(services.admission, _admit, body, caller, services, metrics)

        return handle


def _admit(body: ReservationCreate, caller: Caller, services: Services, telemetry: Telemetry) -> Response:
    view = reservations.create(
        services.store,
        services.index,
        caller,
        reserve_of(body),
        services.clock(),
        services.ids.reservation,
        telemetry=telemetry,
        gradients=services.gradients,
    )
    # The hot path answers with the model's JSON directly rather than having it validated again.
    return Response(
        content=created_public(view, body).model_dump_json(),
        status_code=200 if view.replayed else 201,
        media_type="application/json",
    )


# Served by AdmissionRoute's handler: this signature documents the route in OpenAPI (and serves it
# the same way under a plain APIRoute). No docstring: it would become the operation's description.
async def create_reservation(
    body: ReservationCreate, principal: PrincipalDep, services: ServicesDep, request: Request
) -> Response:
    return _admit(body, principal, services, metrics_of(request))


router.add_api_route(
    "/reservations",
    create_reservation,
    methods=["POST"],
    response_model=ReservationPublic,
    status_code=201,
    responses={
        200: {
            "model": ReservationPublic,
            "description": (
                "The first reservation made with this idempotencyKey, as it stands now (it may be "
                "released, cancelled or ended), with `replayed: true`: no new booking was made."
            ),
        }
    },
    route_class_override=AdmissionRoute,
)


@router.get("/reservations/{id}", response_model=ReservationPublic)
def get_reservation(id: str, principal: PrincipalDep, store: StoreDep, now: NowDep) -> ReservationPublic:
    return reservation_public(reservations.get(store, principal, id, now))


@router.get("/reservations", response_model=Page[ReservationPublic])
def list_reservations(
    q: Annotated[ReservationListQuery, Query()], principal: PrincipalDep, store: StoreDep, now: NowDep
) -> Page[ReservationPublic]:
    found = reservations.list_reservations(
        store,
        principal,
        now,
        tenant_id=q.tenant_id,
        pool_id=q.pool_id,
        status=q.status,
        limit=q.limit or 100,
        cursor=q.cursor,
    )
    return paged(found, reservation_public)


@router.post("/reservations/{id}/cancel", response_model=ReservationPublic)
def cancel_reservation(id: str, principal: PrincipalDep, store: StoreDep, now: NowDep) -> ReservationPublic:
    return reservation_public(reservations.cancel(store, principal, id, now))


@router.post("/reservations/{id}/release", response_model=ReservationPublic)
def release_reservation(id: str, principal: PrincipalDep, store: StoreDep, now: NowDep) -> ReservationPublic:
    return reservation_public(reservations.release(store, principal, id, now))


@router.post("/reservations/{id}/extend", response_model=ReservationPublic)
def extend_reservation(
    id: str,
    body: ReservationExtend,
    principal: PrincipalDep,
    services: ServicesDep,
    now: NowDep,
    request: Request,
) -> ReservationPublic:
    view = reservations.extend(
        services.store, services.index, principal, id, body.duration, now, telemetry=metrics_of(request)
    )
    return reservation_public(view)


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
        "slurmJobs": [
            {"jobId": j.job_id, "node": j.node, "state": j.state, "reason": j.reason} for j in view.slurm_jobs
        ],
        "preemptible": r.preemptible,
        "replayed": view.replayed,
    }


INSTANT: TypeAdapter[datetime] = TypeAdapter(datetime)


def reserve_of(body: ReservationCreate) -> Reserve:
    """The request as the ledger's command. The device lines stay JSON, as the wire has them: the
    reservation stores and echoes them as sent, and its idempotency fingerprint is of the request in
    JSON, `start` as the wire writes an instant."""
    return Reserve(
        pool_id=body.pool_id,
        devices=tuple(d.model_dump(mode="json", by_alias=True, exclude_none=True) for d in body.devices),
        duration=body.duration,
        start=None if body.start is None else INSTANT.dump_python(body.start, mode="json"),
        tenant_id=body.tenant_id,
        idempotency_key=body.idempotency_key,
        preemptible=body.preemptible,
    )


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
