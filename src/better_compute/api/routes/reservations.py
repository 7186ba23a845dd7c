"""Reservations: create (201, or 200 for a replayed idempotency key), get, list, cancel, release."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.convert import created_public, paged, reservation_public
from better_compute.api.deps import AppContext, ContextDep, NowDep, StoreDep, app_context
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.credentials import Principal, bearer_token
from better_compute.service import credentials, reservations
from better_compute.wire.common import Page
from better_compute.wire.reservations import ReservationCreate, ReservationListQuery, ReservationPublic

router = APIRouter(
    prefix="/v1", tags=["reservations"], dependencies=AUTHENTICATED, route_class=StrictQueryRoute
)


async def _json_body(request: Request) -> Any:
    """The body as FastAPI reads it for a JSON body parameter: decoded when it is JSON, the raw bytes
    otherwise (which then fail validation), None when there is none."""
    raw = await request.body()
    if not raw:
        return None
    content_type = request.headers.get("content-type", "")
    media = content_type.split(";", 1)[0].strip().lower()
    if not (media == "application/json" or (media.startswith("application/") and media.endswith("+json"))):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise RequestValidationError(
            [
                {
                    "type": "json_invalid",
                    "loc": ("body", exc.pos),
                    "msg": "JSON decode error",
                    "input": {},
                    "ctx": {"error": exc.msg},
                }
            ]
        ) from exc
    except Exception:
        # Not UTF-8, nested deeper than the parser goes: FastAPI answers other routes' bodies so.
        raise HTTPException(400, "There was an error parsing the body") from None


class AdmissionRoute(APIRoute):
    """`POST /v1/reservations`, handled without FastAPI's per-request dependency solving.

    It is the API's busiest route, and resolving its dependencies cost more than admission's own
    decision. The route is declared like the others (its signature gives OpenAPI the body, the
    security scheme and the answers), and `get_route_handler` does the same steps directly:
    authenticate, read the JSON body, validate it with the route's own field (same errors), admit.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        body_field = self.body_field
        assert body_field is not None

        async def handle(request: Request) -> Response:
            ctx = app_context(request)
            token = bearer_token(request.headers.get("authorization"))
            # The token's owner may be remembered from an earlier request; admission then confirms
            # in its own transaction that the credential is not revoked (no look-up of its own).
            with credentials.acting_as(ctx.store, ctx.tokens, token) as principal:
                # Only now the body: a caller without a valid token is refused before sending it.
                payload = await _json_body(request)
                if payload is None:
                    raise RequestValidationError(
                        [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
                    )
                body, problems = body_field.validate(payload, {}, loc=("body",))
                if problems:
                    raise RequestValidationError(problems)
                if ctx.admission is None:
                    return _admit(body, principal, ctx)
                loop = asyncio.get_running_loop()
                return await loop.run_in_executor(ctx.admission, _admit, body, principal, ctx)

        return handle


def _admit(body: ReservationCreate, principal: Principal, ctx: AppContext) -> Response:
    raw: dict[str, Any] = body.model_dump(mode="json", by_alias=True, exclude_none=True)
    view = reservations.create(ctx.store, ctx.index, principal, raw, ctx.clock(), ctx.new_id)
    # The hot path answers with the model's JSON directly rather than having it validated again.
    return Response(
        content=created_public(view, body).model_dump_json(),
        status_code=200 if view.replayed else 201,
        media_type="application/json",
    )


# Served by AdmissionRoute's handler: this signature documents the route in OpenAPI (and serves it
# the same way under a plain APIRoute). No docstring: it would become the operation's description.
async def create_reservation(body: ReservationCreate, principal: PrincipalDep, ctx: ContextDep) -> Response:
    return _admit(body, principal, ctx)


router.add_api_route(
    "/reservations",
    create_reservation,
    methods=["POST"],
    response_model=ReservationPublic,
    status_code=201,
    responses={
        200: {
            "model": ReservationPublic,
            "description": "The first reservation made with this idempotencyKey.",
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
