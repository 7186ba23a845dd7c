"""The ASGI application for server processes started by uvicorn itself (`serve --workers N`).

Each worker process opens its own store from `BC_DATABASE_URL`; the parent has already migrated it.
The parent passes its body limits the same way: `BC_MAX_BODY_BYTES` and `BC_TIMEOUT_REQUEST`
(seconds). Connection timeouts need no variable: uvicorn hands its own configuration to workers.
"""

from __future__ import annotations

import os

from fastapi import FastAPI

from better_compute.api.app import create_app
from better_compute.api.limits import DEFAULT_MAX_BODY_BYTES, DEFAULT_REQUEST_TIMEOUT
from better_compute.storage.store import Store

DEFAULT_DATABASE_URL = "sqlite:///better-compute.db"


def create() -> FastAPI:
    url = os.environ.get("BC_DATABASE_URL") or DEFAULT_DATABASE_URL
    max_body_bytes = int(os.environ.get("BC_MAX_BODY_BYTES") or DEFAULT_MAX_BODY_BYTES)
    request_timeout = float(os.environ.get("BC_TIMEOUT_REQUEST") or DEFAULT_REQUEST_TIMEOUT)
    store = Store.open(url, migrate_schema=False)
    return create_app(store, max_body_bytes=max_body_bytes, request_timeout=request_timeout)
