"""Partition bookings (admin): `partitions.book` holds a GPU's whole family of atoms for a window,
`partitions.release` ends it (docs/api.md#partitions)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.ledger.commands import BookPartition
from better_compute.service.ledger import partitions
from better_compute.service.ledger.ledger import PartitionChange, PartitionConflict, PartitionEnded
from better_compute.wire.partitions import PartitionBook, PartitionBookingPublic, PartitionReleasedPublic

router = APIRouter(
    prefix="/v1", tags=["partitions"], dependencies=AUTHENTICATED, route_class=StrictQueryRoute
)


@router.post(
    "/partitions",
    response_model=PartitionBookingPublic,
    status_code=201,
    responses={
        200: {
            "model": PartitionBookingPublic,
            "description": "`status: conflict`: something of the GPU is booked in the window; `freeFrom`"
            " says from when the whole family is free (null: never).",
        }
    },
)
def book_partition(
    body: PartitionBook, principal: PrincipalDep, store: StoreDep, now: NowDep, response: Response
) -> PartitionBookingPublic:
    result = partitions.book(store, principal, book_partition_of(body), now)
    if isinstance(result, PartitionConflict):
        response.status_code = 200
    return booking_public(result)


@router.delete("/partitions/{bookingId}", response_model=PartitionReleasedPublic)
def release_partition(
    booking_id: Annotated[str, Path(alias="bookingId")], principal: PrincipalDep, store: StoreDep, now: NowDep
) -> PartitionReleasedPublic:
    return released_public(partitions.release(store, principal, booking_id, now))


def book_partition_of(body: PartitionBook) -> BookPartition:
    """The request as the ledger's command."""
    return BookPartition(gpu_id=body.gpu_id, start=body.start, end=body.end, duration=body.duration)


def booking_public(result: PartitionChange | PartitionConflict) -> PartitionBookingPublic:
    if isinstance(result, PartitionConflict):
        span = result.span
        return PartitionBookingPublic(
            status="conflict",
            gpu_id=result.gpu_id,
            start=None if span is None else span.start,
            end=None if span is None else span.end,
            free_from=result.free_from,
        )
    return PartitionBookingPublic(
        status="booked",
        gpu_id=result.gpu_id,
        booking_id=result.booking_id,
        start=result.span.start,
        end=result.span.end,
        atoms=list(result.atom_ids),
    )


def released_public(ended: PartitionEnded) -> PartitionReleasedPublic:
    return PartitionReleasedPublic(booking_id=ended.booking_id, gpu_id=ended.gpu_id, ended=ended.ended)
