"""The FastAPI application, built around a store and a clock handed in by the composition root."""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from fastapi import FastAPI

from better_compute import __version__
from better_compute.api import errors, guards, links, operations, version
from better_compute.api.deps import AppContext
from better_compute.api.limits import DEFAULT_MAX_BODY_BYTES, DEFAULT_REQUEST_TIMEOUT, BodyLimits
from better_compute.api.routes import (
    credentials,
    health,
    inventory,
    policies,
    pools,
    quotas,
    reservations,
    tenants,
)
from better_compute.service.booking_index import BookingIndex
from better_compute.service.credentials import TokenMemory
from better_compute.service.ports import StorePort


def utc_now() -> datetime:
    return datetime.now(UTC)


_ids = random.Random(secrets.randbits(64))
"""Id suffixes need uniqueness, not secrecy: a seeded generator avoids a system call per id."""


def new_reservation_id() -> str:
    """Time-ordered ids (`rsv-<time><random>`): lists page in creation order, indexes append."""
    return f"rsv-{time.time_ns() // 1000:014x}{_ids.getrandbits(40):010x}"


ADMISSION_THREADS = 4
"""Reservations admitted at once per process: enough to keep its core busy while others wait on the
database (admission is short; more threads would only queue for the interpreter lock)."""


def create_app(
    store: StorePort,
    *,
    clock: Callable[[], datetime] = utc_now,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
) -> FastAPI:
    """The app over `store`. A request body over `max_body_bytes` is refused (413), and so is one
    whose next part does not arrive within `request_timeout` seconds (408): see `api/limits.py`."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        if app.state.context.admission is not None:
            app.state.context.admission.shutdown(wait=True)

    app = FastAPI(
        title="better-compute",
        version=__version__,
        description="GPU fleet control plane: whole GPUs, MIG instances and shared slots booked as atoms.",
        lifespan=lifespan,
        generate_unique_id_function=operations.operation_id,
    )
    # SQLite has one writer: admission threads would only queue for it, so it admits on the loop.
    admission = (
        None
        if store.dialect == "sqlite"
        else ThreadPoolExecutor(ADMISSION_THREADS, "admission", initializer=store.keep_connections)
    )
    app.state.context = AppContext(store, clock, BookingIndex(), new_reservation_id, TokenMemory(), admission)
    errors.install(app)
    # Routes are matched in the order they are included: the busiest first.
    app.include_router(reservations.router)
    app.include_router(health.router)
    app.include_router(inventory.router)
    app.include_router(pools.router)
    guards.install(app)
    app.include_router(tenants.router)
    app.include_router(credentials.router)
    app.include_router(quotas.router)
    app.include_router(policies.router)
    links.install(app)
    # Added late, so outer: a body is capped and timed before anything else reads it.
    app.add_middleware(BodyLimits, max_bytes=max_body_bytes, timeout=request_timeout)
    version.install(app)  # outermost of all: every answer, refusals included, names the API version
    return app
