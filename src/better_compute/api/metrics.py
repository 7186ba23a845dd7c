"""`GET /metrics`: the server's figures in the Prometheus text format (docs/metrics.md lists them).

Two kinds of figure. What the store knows (atoms by pool, class and state; billable hours by meter;
events by type) is read when Prometheus scrapes (service.metering.census), so every process of a server
answers the same. What only a process sees as it happens (reservations created and refused, how
long admission took, ledger conflicts inside a request's retries) is counted in memory by that
process as it answers: a counter increment and a histogram observation per reservation, no I/O.

Each app has a registry of its own, never prometheus-client's global one: tests build many apps in
one process, and a server process builds one. The answer holds aggregate numbers only, labelled by
pool, class, state, meter, event type and error code, never a tenant's id; it is open by default,
like Prometheus targets on an internal port, or needs a fleet-admin token (`BC_METRICS_AUTH=admin`,
docs/operations.md#metrics).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Literal, cast

from fastapi import FastAPI, Request, Response
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from starlette.concurrency import run_in_threadpool

from better_compute.domain.tenancy.credentials import bearer_token, require_admin
from better_compute.service.metering import census
from better_compute.service.services import Services
from better_compute.service.tenancy import credentials
from better_compute.wire import codes

MetricsAuth = Literal["none", "admin"]
"""Who may read /metrics: anyone who reaches the port (`none`), or a fleet-admin token (`admin`)."""

ADMISSION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Seconds: admission takes milliseconds on a healthy server; the upper buckets catch a stalled one."""


class _StoreFigures:
    """Reads the store's figures at scrape time (a prometheus-client custom collector)."""

    def __init__(self, services: Services) -> None:
        self._services = services
        self._tally = census.EventTally()

    def describe(self) -> Iterable[Metric]:
        # Named without being read: registering must not touch the database.
        return self._families()

    def collect(self) -> Iterable[Metric]:
        s = self._services
        return self._families(census.take(s.store, s.index, self._tally, s.clock()))

    @staticmethod
    def _families(taken: census.Census | None = None) -> list[Metric]:
        atoms = GaugeMetricFamily(
            "better_compute_atoms",
            "Atoms of each pool now, by class and state (free, booked, changing, parent, unavailable).",
            labels=["pool", "class", "state"],
        )
        hours = CounterMetricFamily(
            "better_compute_billable_hours",
            "GPU-hours tenants' bookings have held up to now, by meter, each atom at its share of a GPU.",
            labels=["meter"],
        )
        events = CounterMetricFamily(
            "better_compute_events", "Events in the event log, by type.", labels=["type"]
        )
        if taken is not None:
            for (pool, cls, state), n in sorted(taken.atoms.items()):
                atoms.add_metric([pool, cls, state], n)
            for meter, value in sorted(taken.billable_hours.items()):
                hours.add_metric([meter], value)
            for type_, n in sorted(taken.events.items()):
                events.add_metric([type_], n)
        return [atoms, hours, events]


class Metrics:
    """One app's metrics: its registry, the counters admission increments, and the store's figures.

    It is also the `service.kernel.telemetry.Telemetry` the reservation use cases report to."""

    def __init__(self, services: Services, auth: MetricsAuth = "none") -> None:
        self.auth = auth
        self.registry = CollectorRegistry()
        self.created = Counter(
            "better_compute_reservations_created",
            "Reservations created (a replayed idempotencyKey is not counted again).",
            registry=self.registry,
        )
        self.refused = Counter(
            "better_compute_reservations_refused",
            "Reservation requests refused, by error code.",
            ["code"],
            registry=self.registry,
        )
        for code in codes.SERVER_CODES:
            self.refused.labels(code=code)  # every code's series exists from the start, at 0
        self.admission = Histogram(
            "better_compute_admission_seconds",
            "Time from receiving a reservation request to its answer, created or refused.",
            buckets=ADMISSION_BUCKETS,
            registry=self.registry,
        )
        self.conflicts = Counter(
            "better_compute_ledger_conflicts",
            "Bookings the ledger refused because another booking took an atom first (each is decided again).",
            registry=self.registry,
        )
        self.registry.register(_StoreFigures(services))

    def ledger_conflict(self) -> None:
        self.conflicts.inc()

    def answered(self, started: float, *, created: bool = False, refused: str | None = None) -> None:
        """A reservation request answered, `started` at that time.perf_counter(): a reservation was
        `created`, or the request `refused` with that error code (a replayed idempotencyKey is
        neither)."""
        self.admission.observe(time.perf_counter() - started)
        if created:
            self.created.inc()
        if refused is not None:
            self.refused.labels(code=refused).inc()

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The metrics in the format the scraper accepts (Prometheus text unless it asks for
        OpenMetrics), and its content type."""
        encode, content_type = choose_encoder(accept or "")
        return encode(self.registry), content_type


def metrics_of(request: Request) -> Metrics:
    return cast(Metrics, request.app.state.metrics)


def install(app: FastAPI, services: Services, auth: MetricsAuth) -> Metrics:
    metrics = app.state.metrics = Metrics(services, auth)

    @app.get("/metrics", include_in_schema=False)
    async def scrape(request: Request) -> Response:
        if metrics.auth == "admin":
            principal = credentials.authenticate(
                services.store, bearer_token(request.headers.get("authorization"))
            )
            require_admin(principal, "GET /metrics")
        # The store's figures are read in a worker thread: the event loop keeps serving meanwhile.
        body, content_type = await run_in_threadpool(metrics.render, request.headers.get("accept"))
        return Response(content=body, media_type=content_type)

    return metrics


__all__ = ["ADMISSION_BUCKETS", "Metrics", "MetricsAuth", "install", "metrics_of"]
