"""Liveness: the process answers and its database does too."""

from __future__ import annotations

from fastapi import APIRouter

from better_compute import __version__
from better_compute.api.deps import StoreDep
from better_compute.service import inventory
from better_compute.wire.inventory import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
def healthz(store: StoreDep) -> Health:
    inventory.list_clusters(store, limit=1)
    return Health(status="ok", database=store.dialect, version=__version__)
