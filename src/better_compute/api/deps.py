"""Request-scoped dependencies: the store, the clock and the rest of the app's `AppContext`.

They are `async` because they do no I/O: FastAPI runs sync dependencies in a worker thread, and
that hop, once per dependency per request, cost more than the rest of a reservation's admission.
Each dependency FastAPI resolves costs about as much as a small database query: the reservation
route, the busiest, reads the context straight from the request (`app_context`) and declares the
one `ContextDep` only for its documented signature.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, cast

from fastapi import Depends, Request

from better_compute.service.booking_index import BookingIndex
from better_compute.service.credentials import TokenMemory
from better_compute.service.ports import StorePort


@dataclass(frozen=True)
class AppContext:
    """What the composition root hands the API: the store, the clock, the booking index, the id maker,
    and the tokens this process has seen."""

    store: StorePort
    clock: Callable[[], datetime]
    index: BookingIndex
    new_id: Callable[[], str]
    tokens: TokenMemory
    admission: Executor | None
    """Where reservations are admitted: a few threads that keep their database connections, so that
    a process goes on serving requests while one waits for the database; None: on the event loop."""


def app_context(request: Request) -> AppContext:
    """The app's context, for code that has the request in hand (no dependency to resolve)."""
    return cast(AppContext, request.app.state.context)


async def get_context(request: Request) -> AppContext:
    return app_context(request)


ContextDep = Annotated[AppContext, Depends(get_context)]


async def get_store(request: Request) -> StorePort:
    return app_context(request).store


async def get_now(request: Request) -> datetime:
    return app_context(request).clock()


StoreDep = Annotated[StorePort, Depends(get_store)]
NowDep = Annotated[datetime, Depends(get_now)]
