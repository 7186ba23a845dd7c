"""Reservations: create (201, or 200 for a replayed idempotency key), get, list, cancel, release."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.deps import ContextDep, IndexDep, NowDep, StoreDep
from better_compute.service import reservations
from better_compute.service.reservations import ReservationView
from better_compute.wire.common import Page
from better_compute.wire.reservations import ReservationCreate, ReservationListQuery, ReservationPublic

router = APIRouter(prefix="/v1", tags=["reservations"], dependencies=AUTHENTICATED)


def reservation_public(view: ReservationView) -> ReservationPublic:
    r = view.row
    return ReservationPublic.model_validate(
        {
            "id": r["id"],
            "tenantId": r["tenant_id"],
            "poolId": r["pool_id"],
            "status": view.status.value,
            "start": r["starts_at"],
            "end": r["ends_at"],
            "devices": r["devices"],
            "atoms": [
                {
                    "id": a["id"],
                    "class": a["class"],
                    "gpuId": a["gpu_id"],
                    "node": a["node_id"],
                    "attributes": a["attributes"],
                }
                for a in view.atoms
            ],
            "gpuCount": r["gpu_count"],
            "gpuSlices": r["gpu_slices"],
            "idempotencyKey": r["idempotency_key"],
            "createdAt": r["created_at"],
        }
    )


@router.post(
    "/reservations",
    response_model=ReservationPublic,
    status_code=201,
    responses={
        200: {
            "model": ReservationPublic,
            "description": "The first reservation made with this idempotencyKey.",
        }
    },
)
async def create_reservation(body: ReservationCreate, principal: PrincipalDep, ctx: ContextDep) -> Response:
    # Admission runs on the event loop: it is one short transaction, and a hop to a worker thread
    # (plus the GIL hand-offs it brings) cost more than it saved. Each server process admits one
    # reservation at a time; run one process per core (`serve --workers`).
    raw: dict[str, Any] = body.model_dump(mode="json", by_alias=True, exclude_none=True)
    view = reservations.create(ctx.store, ctx.index, principal, raw, ctx.clock(), ctx.new_id)
    # The hot path answers with the model's JSON directly rather than having it validated again.
    return Response(
        content=reservation_public(view).model_dump_json(),
        status_code=200 if view.replayed else 201,
        media_type="application/json",
    )


@router.get("/reservations/{id}", response_model=ReservationPublic)
def get_reservation(id: str, principal: PrincipalDep, store: StoreDep, now: NowDep) -> ReservationPublic:
    return reservation_public(reservations.get(store, principal, id, now))


@router.get("/reservations", response_model=Page[ReservationPublic])
def list_reservations(
    q: Annotated[ReservationListQuery, Query()], principal: PrincipalDep, store: StoreDep, now: NowDep
) -> Page[ReservationPublic]:
    views, cursor = reservations.list_reservations(
        store,
        principal,
        now,
        tenant_id=q.tenant_id,
        pool_id=q.pool_id,
        status=q.status,
        limit=q.limit or 100,
        cursor=q.cursor,
    )
    return Page[ReservationPublic](items=[reservation_public(v) for v in views], next_cursor=cursor)


@router.post("/reservations/{id}/cancel", response_model=ReservationPublic)
def cancel_reservation(
    id: str, principal: PrincipalDep, store: StoreDep, index: IndexDep, now: NowDep
) -> ReservationPublic:
    return reservation_public(reservations.cancel(store, index, principal, id, now))


@router.post("/reservations/{id}/release", response_model=ReservationPublic)
def release_reservation(
    id: str, principal: PrincipalDep, store: StoreDep, index: IndexDep, now: NowDep
) -> ReservationPublic:
    return reservation_public(reservations.release(store, index, principal, id, now))
