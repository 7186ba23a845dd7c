"""Request-scoped dependencies: the store and the clock, taken from the app state."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, cast

from fastapi import Depends, Query, Request

from better_compute.service.booking_index import BookingIndex
from better_compute.service.ports import StorePort


def get_store(request: Request) -> StorePort:
    return cast(StorePort, request.app.state.store)


def get_now(request: Request) -> datetime:
    clock = cast(Callable[[], datetime], request.app.state.clock)
    return clock()


StoreDep = Annotated[StorePort, Depends(get_store)]
NowDep = Annotated[datetime, Depends(get_now)]
LimitQ = Annotated[int, Query(ge=1, le=1000, description="Page size.")]
CursorQ = Annotated[str | None, Query(description="`nextCursor` of the previous page.")]


def get_index(request: Request) -> BookingIndex:
    return cast(BookingIndex, request.app.state.index)


def get_new_id(request: Request) -> Callable[[], str]:
    return cast(Callable[[], str], request.app.state.new_id)


IndexDep = Annotated[BookingIndex, Depends(get_index)]
NewIdDep = Annotated[Callable[[], str], Depends(get_new_id)]
