"""The FastAPI application, built around the `Services` the composition root hands in."""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Literal

from fastapi import FastAPI

from better_compute import __version__
from better_compute.api import console, docs, errors, guards, links, metrics, operations, refusals, version
from better_compute.api.limits import BodyLimits
from better_compute.api.routes import (
    bills,
    capacity,
    container_exec,
    credentials,
    device_classes,
    doctor,
    endpoints,
    events,
    health,
    inventory,
    invocations,
    logs,
    node_detail,
    nodes,
    partitions,
    policies,
    pools,
    prices,
    priority_classes,
    quotas,
    replay,
    reservations,
    tenants,
    usage,
    workloads,
)
from better_compute.domain.endpoints.invoke_routing import MAX_INVOKE_BODY_BYTES
from better_compute.domain.kernel.errors import Unavailable
from better_compute.domain.ops.replay import MAX_BODY_BYTES as MAX_REPLAY_BODY_BYTES
from better_compute.service.services import Services
from better_compute.service.warmup import warm as warm_caches

Warming = Literal["none", "background", "blocking"]
"""How a process warms its caches as it starts (`service.warmup`): not at all (an app driven
in-process), in the background while it already answers `/healthz` with `starting` (one `serve`
process), or before it accepts anything (a worker of `serve --workers N`)."""

_log = logging.getLogger("better_compute.warmup")


def _warm_until_done(services: Services) -> None:
    """Warm, trying again each second while the database cannot be read (a restart racing its
    database); then say ready. Whether the process is ready never decides what a request gets: a
    cold process loads what a request needs on the way."""
    while not services.stopping.is_set():
        try:
            warm_caches(services)
        except Unavailable:  # the store logs when an outage starts and ends; readiness waits
            services.stopping.wait(1.0)
            continue
        except Exception:  # the next try logs again; readiness waits
            _log.exception("warming the caches failed; trying again")
            services.stopping.wait(1.0)
            continue
        settle_heap()
        services.ready.set()
        return


def settle_heap() -> None:
    """Move everything the process holds once it is warm (modules, the app, the caches just loaded)
    out of the garbage collector's sight (`gc.freeze`).

    CPython's full collection walks every tracked object, and a server process holds hundreds of
    thousands that live as long as it does; under load (64 invokes in flight keep their objects alive
    across the young collections, so the old generation fills) full collections came every two
    seconds and each stopped every request for 100-350 ms: the p99 of `bench/endpoints.py`'s invoke.
    Frozen, those objects are never walked again; what is made later is collected as before."""
    gc.collect()
    gc.freeze()


def _lifespan(services: Services, warming: Warming) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if warming == "blocking":
            services.ready.clear()
            _warm_until_done(services)
        elif warming == "background":
            services.ready.clear()
            threading.Thread(target=_warm_until_done, args=(services,), name="warmup", daemon=True).start()
        if warming != "none":
            # The OpenAPI document is derived from the source (api/refusals.py): about a second of CPU,
            # spent here before the server listens, not by the first GET /openapi.json while requests
            # wait on the event loop. Not in a thread: CPython 3.11's parser is not safe to run in two
            # threads at once ("AST constructor recursion depth mismatch").
            _app.openapi()
        # One pool of connections to endpoints' model servers for the process (`endpoints.invoke`).
        async with invocations.new_upstream() as upstream:
            _app.state.upstream = upstream
            try:
                yield
            finally:
                _app.state.upstream = None

    return lifespan


def create_app(
    services: Services,
    *,
    max_body_bytes: int,
    request_timeout: float,
    metrics_auth: metrics.MetricsAuth = "none",
    metrics_dir: str | None = None,
    metrics_allocations: bool = False,
    warming: Warming = "none",
) -> FastAPI:
    """The app over `services` (built by `entrypoints/server.py`, which also closes them). A request
    body over `max_body_bytes` is refused (413), and so is one whose next part does not arrive
    within `request_timeout` seconds (408): see `api/limits.py`. `/metrics` is open to anyone who
    reaches it, or needs a fleet-admin token with `metrics_auth="admin"` (`api/metrics.py`); a worker
    of `serve --workers N` keeps its figures in `metrics_dir` with the others', and
    `metrics_allocations` adds the series that joins allocations to DCGM's.
    `warming`: how the process warms its caches as it starts (`Warming`)."""
    app = FastAPI(
        title="better-compute",
        version=__version__,
        description="GPU fleet control plane: whole GPUs, MIG instances and shared slots booked as atoms.",
        generate_unique_id_function=operations.operation_id,
        docs_url=None,  # served by api/docs.py from local assets, not a CDN
        redoc_url=None,
        lifespan=_lifespan(services, warming),
    )
    app.state.services = services
    errors.install(app)
    # Routes are matched in the order they are included: the busiest first.
    app.include_router(reservations.router)
    app.include_router(health.router)
    docs.install(app)
    app.include_router(inventory.router)
    app.include_router(nodes.router)
    app.include_router(node_detail.router)
    app.include_router(pools.router)
    guards.install(app)
    app.include_router(tenants.router)
    app.include_router(credentials.router)
    app.include_router(quotas.router)
    app.include_router(policies.router)
    app.include_router(device_classes.router)
    app.include_router(priority_classes.router)
    app.include_router(logs.router)
    app.include_router(container_exec.router)
    app.include_router(workloads.router)
    app.include_router(endpoints.router)
    app.include_router(invocations.router)
    app.include_router(capacity.router)
    app.include_router(events.router)
    metrics.install(
        app, services, metrics_auth, multiprocess_dir=metrics_dir, allocations=metrics_allocations
    )
    app.include_router(usage.router)
    app.include_router(bills.router)
    app.include_router(prices.router)
    app.include_router(partitions.router)
    app.include_router(doctor.router)
    app.include_router(replay.router)
    console.install(app)
    links.install(app)
    refusals.install(app)
    # Added late, so outer: a body is capped and timed before anything else reads it.
    app.add_middleware(
        BodyLimits,
        max_bytes=max_body_bytes,
        timeout=request_timeout,
        caps=(
            (invocations.INVOKE_PATH, MAX_INVOKE_BODY_BYTES),
            (replay.REPLAY_PATH, MAX_REPLAY_BODY_BYTES),
        ),
    )
    metrics.count_requests(app)  # outside the body limits: their 413 and 408 are counted too
    version.install(app)  # outermost of all: every answer, refusals included, names the API version
    return app
