"""Health and readiness: the process answers, its database does too, and it has warmed the caches
its hot path reads (`service.warmup`). Until it has, both answer `starting` with 503, so a load
balancer sends it nothing yet. While the database cannot be reached, or cannot be written (a
read-only SQLite file), both answer 503 `UNAVAILABLE` with `Retry-After`, as every request that
needs the database does."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from better_compute import __version__
from better_compute.api.deps import ServicesDep
from better_compute.wire.inventory import Health

router = APIRouter(tags=["health"])


STARTING: dict[int | str, dict[str, Any]] = {
    503: {
        "model": Health,
        "description": "Starting: the process is still warming its caches. Or the database cannot be"
        " reached or written: then the body is an `UNAVAILABLE` error (`ErrorBody`), with `Retry-After`.",
    }
}


def _health(services: ServicesDep) -> Response:
    services.store.check()
    ready = services.ready.is_set()
    body = Health(status="ok" if ready else "starting", database=services.store.dialect, version=__version__)
    return JSONResponse(body.model_dump(mode="json"), status_code=200 if ready else 503)


@router.get("/healthz", response_model=Health, responses=STARTING)
def healthz(services: ServicesDep) -> Response:
    """`ok` once the process and its database answer and its caches are warm; `starting` (503)
    while it warms them; 503 `UNAVAILABLE` while its database cannot be reached or written."""
    return _health(services)


@router.get("/readyz", response_model=Health, responses=STARTING)
def readyz(services: ServicesDep) -> Response:
    """For load balancers: 200 once the process is ready for traffic, 503 (`starting`) before, and 503
    (`UNAVAILABLE`) while its database cannot be reached or written."""
    return _health(services)
