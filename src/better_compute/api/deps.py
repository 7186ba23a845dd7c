"""Request-scoped dependencies: the store, the clock, the id source and the rest of the app's `Services`.

They are `async` because they do no I/O: FastAPI runs sync dependencies in a worker thread, and
that hop, once per dependency per request, cost more than the rest of a reservation's admission.
Each dependency FastAPI resolves costs about as much as a small database query: the reservation
route, the busiest, reads the services straight from the request (`services_of`) and declares the
one `ServicesDep` only for its documented signature.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, cast

from fastapi import Depends, Request

from better_compute.service.kernel.ids import Ids
from better_compute.service.kernel.ports import StorePort
from better_compute.service.services import Services
from better_compute.service.tx import Tx


def services_of(request: Request) -> Services:
    """The app's services, for code that has the request in hand (no dependency to resolve)."""
    return cast(Services, request.app.state.services)


async def get_services(request: Request) -> Services:
    return services_of(request)


ServicesDep = Annotated[Services, Depends(get_services)]


async def get_store(request: Request) -> StorePort[Tx]:
    return services_of(request).store


async def get_now(request: Request) -> datetime:
    return services_of(request).clock()


async def get_ids(request: Request) -> Ids:
    return services_of(request).ids


StoreDep = Annotated[StorePort[Tx], Depends(get_store)]
NowDep = Annotated[datetime, Depends(get_now)]
IdsDep = Annotated[Ids, Depends(get_ids)]
