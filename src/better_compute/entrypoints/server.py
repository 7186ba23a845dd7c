"""The server's composition root: one `Services` per process, built from `Settings`, and the app over it.

Every server process is wired here and only here: `serve` (one process, or the parent of workers),
each worker of `serve --workers N` (`entrypoints/asgi.py`), `admin bootstrap`, the OpenAPI document,
and the tests that drive the real app, which pass a fixed clock or counting ids where they need them
and get everything else as production has it. The reconcilers will run over the same `Services`.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime

from fastapi import FastAPI

from better_compute.api.app import Warming, create_app
from better_compute.entrypoints.ids import RandomIds
from better_compute.entrypoints.replay import scratch as replay_scratch
from better_compute.service.kernel.clock import Clock
from better_compute.service.kernel.ids import Ids
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.metering.slurm_job_ids import StoredSlurmJobIds
from better_compute.service.placement.recorded_demand import RecordedDemand
from better_compute.service.services import Services
from better_compute.service.tenancy.credentials import TokenMemory
from better_compute.service.tx import Tx
from better_compute.settings import Settings
from better_compute.storage.store import Store

ADMISSION_THREADS = 4
"""Reservations admitted at once per process: enough to keep its core busy while others wait on the
database (admission is short; more threads would only queue for the interpreter lock)."""


def utc_now() -> datetime:
    """The production clock."""
    return datetime.now(UTC)


def open_store(settings: Settings, *, migrate: bool = True) -> Store:
    """The store on `settings.database_url`, brought to the newest schema unless `migrate` is False
    (a worker process, whose parent has migrated it)."""
    return Store.open(settings.database_url, migrate_schema=migrate)


def build_services(store: StorePort[Tx], *, clock: Clock = utc_now, ids: Ids | None = None) -> Services:
    """Everything a process's use cases share, over `store`: the clock and ids (production ones
    unless given), a booking index and a token memory of its own, and admission threads on a store
    that has several writers (SQLite has one: threads would only queue for it, so it admits on the
    event loop)."""
    admission = (
        None
        if store.dialect == "sqlite"
        else ThreadPoolExecutor(ADMISSION_THREADS, "admission", initializer=store.keep_connections)
    )
    return Services(
        store=store,
        clock=clock,
        ids=RandomIds() if ids is None else ids,
        index=BookingIndex(),
        tokens=TokenMemory(),
        admission=admission,
        scratch=replay_scratch,
        gradients=RecordedDemand(store),
        slurm_job_ids=StoredSlurmJobIds(store),
    )


def build_app(
    services: Services, settings: Settings, *, warming: Warming = "none", metrics_dir: str | None = None
) -> FastAPI:
    """The HTTP API over `services`, with the body limits and the metrics settings of `settings`;
    `warming`: how it warms its caches as it starts (`api.app.Warming`); `metrics_dir`: where the
    processes of `serve --workers N` keep their figures together (`PROMETHEUS_MULTIPROC_DIR`)."""
    return create_app(
        services,
        max_body_bytes=settings.max_body_bytes,
        request_timeout=settings.timeout_request,
        metrics_auth=settings.metrics_auth,
        metrics_dir=metrics_dir,
        metrics_allocations=settings.metrics_allocations,
        warming=warming,
    )


@contextmanager
def running(settings: Settings, *, migrate: bool = True) -> Iterator[Services]:
    """The services of a process that runs until the block ends: its store opened (and migrated)
    first, its admission threads stopped and its store closed last."""
    store = open_store(settings, migrate=migrate)
    try:
        services = build_services(store)
        try:
            yield services
        finally:
            services.close()
    finally:
        store.close()


__all__ = ["ADMISSION_THREADS", "build_app", "build_services", "open_store", "running", "utc_now"]
