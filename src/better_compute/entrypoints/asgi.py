"""The ASGI application for server processes started by uvicorn itself (`serve --workers N`).

Each worker process reads its `Settings` from the environment, where the parent put its own
(`Settings.environment`: the database URL and the body limits), opens its own store (the parent has
already migrated it) and builds its own `Services`, which live as long as the process. Connection
timeouts need no variable: uvicorn hands its own configuration to workers. `PROMETHEUS_MULTIPROC_DIR`,
a directory `serve` made for this server alone, is where every worker keeps its metrics.
"""

from __future__ import annotations

import os

from fastapi import FastAPI

from better_compute.entrypoints.server import build_app, build_services, open_store
from better_compute.settings import Settings

MULTIPROC_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
"""Where `serve --workers N` has its workers keep their metrics together: prometheus-client reads it as
it is imported, and /metrics gathers every worker's figures from it (api/metrics.py)."""


def create() -> FastAPI:
    settings = Settings()
    # A worker warms its caches before it accepts anything: a rolling restart never sends a request
    # to a cold one (the others, already warm, take the connections meanwhile).
    return build_app(
        build_services(open_store(settings, migrate=False)),
        settings,
        warming="blocking",
        metrics_dir=os.environ.get(MULTIPROC_VARIABLE) or None,
    )
