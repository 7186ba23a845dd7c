"""The ASGI application for server processes started by uvicorn itself (`serve --workers N`).

Each worker process opens its own store from `BC_DATABASE_URL`; the parent has already migrated it.
"""

from __future__ import annotations

import os

from fastapi import FastAPI

from better_compute.api.app import create_app
from better_compute.storage.store import Store

DEFAULT_DATABASE_URL = "sqlite:///better-compute.db"


def create() -> FastAPI:
    url = os.environ.get("BC_DATABASE_URL") or DEFAULT_DATABASE_URL
    return create_app(Store.open(url, migrate_schema=False))
