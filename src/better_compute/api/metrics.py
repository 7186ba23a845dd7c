"""`GET /metrics`: the server's figures in the Prometheus text format (docs/metrics.md lists them).

Two kinds of figure. What the store knows (atoms by pool, class and state; billable GPU-seconds by
meter; events by type; nodes by state; unplaced replicas; quota used) is read when Prometheus scrapes
(service.metering.census, service.ops.fleet_gauges), so every process of a server answers the same.
What only a process sees as it happens (HTTP requests by route and status, reservations created and
refused, how long admission took, ledger conflicts inside a request's retries) is counted in memory
as it answers: a counter increment and a histogram observation, no I/O.

`serve --workers N` runs N processes behind one port, and a scrape reaches one of them; so there the
in-memory figures are kept in prometheus-client's multiprocess mode (`PROMETHEUS_MULTIPROC_DIR`,
which `serve` makes for its workers), and every worker answers the sum over all of them, with
`process_*` summed over the server's processes. One process keeps them in its own registry.

Each app has a registry of its own, never prometheus-client's global one: tests build many apps in
one process, and a server process builds one. It is open by default, like Prometheus targets on an
internal port, or needs a fleet-admin token (`BC_METRICS_AUTH=admin`, docs/operations.md#metrics).
"""

from __future__ import annotations

import functools
import os
import platform
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, cast

from fastapi import FastAPI, Request, Response
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.process_collector import ProcessCollector
from starlette.concurrency import run_in_threadpool
from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from better_compute import __version__
from better_compute.domain.tenancy.credentials import bearer_token, require_admin
from better_compute.service.metering import census
from better_compute.service.ops import fleet_gauges
from better_compute.service.services import Services
from better_compute.service.tenancy import credentials
from better_compute.wire import codes

MetricsAuth = Literal["none", "admin"]
"""Who may read /metrics: anyone who reaches the port (`none`), or a fleet-admin token (`admin`)."""

ADMISSION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Seconds: admission takes milliseconds on a healthy server; the upper buckets catch a stalled one."""

HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Seconds an HTTP answer took; the top buckets catch long polls (a node's spec read waits 30 s)."""

UNMATCHED_ROUTE = "unmatched"
"""The `route` label of a request no route matched (a 404 or 405 before any route ran): the raw path
is never a label, so a scanner cannot make a series per path it tries."""

SECONDS_PER_HOUR = 3600


class _StoreFigures:
    """Reads the store's figures at scrape time (a prometheus-client custom collector)."""

    def __init__(self, services: Services, *, allocations: bool) -> None:
        self._services = services
        self._tally = census.EventTally()
        self._allocations = allocations

    def describe(self) -> Iterable[Metric]:
        # Named without being read: registering must not touch the database.
        return [*self._families(), *self._fleet()]

    def collect(self) -> Iterable[Metric]:
        s = self._services
        now = s.clock()
        taken = census.take(s.store, s.index, self._tally, now)
        gauges = fleet_gauges.take(s.store, s.index, now, devices=self._allocations)
        return [*self._families(taken), *self._fleet(gauges)]

    def _fleet(self, taken: fleet_gauges.FleetGauges | None = None) -> list[Metric]:
        nodes = GaugeMetricFamily(
            "better_compute_nodes",
            "Nodes by cluster, state (live, silent, unjoined) and whether they are cordoned.",
            labels=["cluster", "state", "cordoned"],
        )
        age = GaugeMetricFamily(
            "better_compute_node_last_contact_age_seconds",
            "Seconds since each node's bcd last reached the server, signed (a report or a spec read).",
            labels=["node"],
        )
        unplaced = GaugeMetricFamily(
            "better_compute_unplaced_replicas",
            "Workload replicas no cluster took, by tenant.",
            labels=["tenant"],
        )
        used = GaugeMetricFamily(
            "better_compute_quota_used",
            "Atoms each tenant's bookings hold now, by pool and class (what its quota counts).",
            labels=["tenant", "pool", "class"],
        )
        limit = GaugeMetricFamily(
            "better_compute_quota_limit",
            "Atoms each tenant may hold at once, by pool and class (its quota rows).",
            labels=["tenant", "pool", "class"],
        )
        fragmentation = GaugeMetricFamily(
            "better_compute_pool_fragmentation_ratio",
            "Share (0..1) of each pool's free GPU capacity that its last 30 days' request sizes cannot use.",
            labels=["pool"],
        )
        families: list[Metric] = [nodes, age, unplaced, used, limit, fragmentation]
        devices = GaugeMetricFamily(
            "better_compute_allocation_info",
            "1 for each GPU or MIG instance an allocation holds now, by DCGM's labels (joins DCGM's series).",
            labels=["tenant", "allocation", "Hostname", "UUID", "GPU_I_ID"],
        )
        if self._allocations:
            families.append(devices)
        if taken is None:
            return families
        for (cluster, state, cordoned), n in sorted(taken.nodes.items()):
            nodes.add_metric([cluster, state, "true" if cordoned else "false"], n)
        for node, seconds in sorted(taken.contact_age.items()):
            age.add_metric([node], seconds)
        for tenant, n in sorted(taken.unplaced.items()):
            unplaced.add_metric([tenant], n)
        for (tenant, pool, cls), n in sorted(taken.quota_used.items()):
            used.add_metric([tenant, pool, cls], n)
        for (tenant, pool, cls), n in sorted(taken.quota_limit.items()):
            limit.add_metric([tenant, pool, cls], n)
        for pool, ratio in sorted(taken.fragmentation.items()):
            fragmentation.add_metric([pool], ratio)
        for d in taken.devices:
            devices.add_metric([d.tenant, d.allocation, d.hostname, d.uuid, d.gpu_instance_id], 1)
        return families

    @staticmethod
    def _families(taken: census.Census | None = None) -> list[Metric]:
        atoms = GaugeMetricFamily(
            "better_compute_atoms",
            "Atoms of each pool now, by class and state (free, booked, changing, parent, unavailable).",
            labels=["pool", "class", "state"],
        )
        seconds = CounterMetricFamily(
            "better_compute_billable_gpu_seconds",
            "GPU-seconds tenants' bookings have held up to now, by meter, each atom at its share of a GPU.",
            labels=["meter"],
        )
        events = CounterMetricFamily(
            "better_compute_events", "Events in the event log, by type.", labels=["type"]
        )
        if taken is not None:
            for (pool, cls, state), n in sorted(taken.atoms.items()):
                atoms.add_metric([pool, cls, state], n)
            for meter, value in sorted(taken.billable_hours.items()):
                seconds.add_metric([meter], value * SECONDS_PER_HOUR)
            for type_, n in sorted(taken.events.items()):
                events.add_metric([type_], n)
        return [atoms, seconds, events]


class _BuildInfo:
    """`better_compute_build_info`: 1, labelled with the version that answers (a custom collector, so
    that it is one series whatever the number of processes)."""

    def collect(self) -> Iterable[Metric]:
        info = GaugeMetricFamily(
            "better_compute_build_info",
            "1, labelled with the better-compute version and the Python that run this server.",
            labels=["version", "python"],
        )
        info.add_metric([__version__, platform.python_version()], 1)
        return [info]


_PID_IN_FILE = re.compile(r"_(\d+)\.db$")


class _ServerProcesses:
    """`process_*` of a server of several processes: summed over the processes that are running now
    (the parent, which runs the reconcilers, and each worker that has written a figure), since one
    scrape reaches one worker. CPU seconds, memory and open descriptors add up; the start time is the
    earliest; the descriptor limit is this process's (every process of a server has the same)."""

    _EARLIEST = "process_start_time_seconds"
    _OWN = "process_max_fds"

    def __init__(self, directory: str) -> None:
        self._directory = Path(directory)

    def _pids(self) -> list[int]:
        found = {os.getpid(), os.getppid()}
        for path in self._directory.glob("*.db"):
            match = _PID_IN_FILE.search(path.name)
            if match:
                found.add(int(match.group(1)))
        return sorted(p for p in found if p > 1)

    def collect(self) -> Iterable[Metric]:
        merged: dict[str, Metric] = {}
        for pid in self._pids():
            own = pid == os.getpid()
            for family in ProcessCollector(pid=functools.partial(int, pid), registry=None).collect():
                sample = family.samples[0]
                kept = merged.get(family.name)
                if kept is None:
                    merged[family.name] = family
                    continue
                old = kept.samples[0]
                if family.name == self._EARLIEST:
                    value = min(old.value, sample.value)
                elif family.name == self._OWN:
                    value = sample.value if own else old.value
                else:
                    value = old.value + sample.value
                kept.samples[0] = old._replace(value=value)
        return list(merged.values())


class Metrics:
    """One app's metrics: its registry, the counters requests and admission increment, and the store's
    figures.

    It is also the `service.kernel.telemetry.Telemetry` the reservation use cases report to.
    `multiprocess_dir`: where the processes of `serve --workers N` keep their figures (prometheus-client
    reads `PROMETHEUS_MULTIPROC_DIR` as it is imported, so the directory is set before the process
    starts); a scrape then answers the sum over the processes. `allocations`: also answer
    `better_compute_allocation_info` (docs/metrics.md#gpu-utilisation-per-tenant)."""

    def __init__(
        self,
        services: Services,
        auth: MetricsAuth = "none",
        *,
        multiprocess_dir: str | None = None,
        allocations: bool = False,
    ) -> None:
        self.auth = auth
        self.registry = CollectorRegistry()
        self.multiprocess_dir = multiprocess_dir
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
        self.requests = Counter(
            "better_compute_http_requests",
            "HTTP requests answered, by method, route template and status code.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "better_compute_http_request_duration_seconds",
            "Time from a request's arrival to the end of its answer, by method, route template and status.",
            ["method", "route", "status"],
            buckets=HTTP_BUCKETS,
            registry=self.registry,
        )
        # What the store knows, and what is the same in every process, is read once per scrape.
        self.shared = CollectorRegistry()
        self.shared.register(_BuildInfo())
        self.shared.register(_StoreFigures(services, allocations=allocations))
        if multiprocess_dir is None:
            ProcessCollector(registry=self.registry)
        else:
            self.shared.register(_ServerProcesses(multiprocess_dir))

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

    def request_answered(self, method: str, route: str, status: int, seconds: float) -> None:
        """An HTTP request answered with `status` after `seconds`, matched to the route template `route`."""
        self.requests.labels(method=method, route=route, status=str(status)).inc()
        self.latency.labels(method=method, route=route, status=str(status)).observe(seconds)

    def _gathered(self) -> CollectorRegistry:
        """Every figure of this server: this process's (or, with several, all processes' summed),
        and the shared ones."""
        gathered = CollectorRegistry()
        if self.multiprocess_dir is None:
            gathered.register(_Registry(self.registry))
        else:
            MultiProcessCollector(gathered, self.multiprocess_dir)  # type: ignore[no-untyped-call]
        gathered.register(_Registry(self.shared))
        return gathered

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The metrics in the format the scraper accepts (Prometheus text unless it asks for
        OpenMetrics), and its content type."""
        encode, content_type = choose_encoder(accept or "")
        return encode(self._gathered()), content_type


class _Registry:
    """A registry's metrics as one collector of another (prometheus-client merges none itself)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        return self._registry.collect()


def _route_of(scope: Scope) -> str:
    """The template of the route that answered (`/v1/reservations/{reservation_id}`), never the raw path."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if not isinstance(path, str):
        return UNMATCHED_ROUTE
    return f"{path}/{{path}}" if isinstance(route, Mount) else path


class RequestFigures:
    """Pure ASGI middleware that counts each HTTP answer and its time by method, route template and
    status (an error raised past every handler counts as the 500 Starlette then sends)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def noting(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, noting)
        finally:
            method = scope["method"] if scope["method"] in _METHODS else "other"
            self.metrics.request_answered(method, _route_of(scope), status, time.perf_counter() - started)


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""Methods kept as a label; any other is `other`, so a client cannot make a series per verb it invents."""


def metrics_of(request: Request) -> Metrics:
    return cast(Metrics, request.app.state.metrics)


def install(
    app: FastAPI,
    services: Services,
    auth: MetricsAuth,
    *,
    multiprocess_dir: str | None = None,
    allocations: bool = False,
) -> Metrics:
    metrics = app.state.metrics = Metrics(
        services, auth, multiprocess_dir=multiprocess_dir, allocations=allocations
    )

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


def count_requests(app: FastAPI) -> None:
    """Count every HTTP answer by route and status: call after the body limits are added, so that
    their 413 and 408 answers are counted too."""
    app.add_middleware(RequestFigures, metrics=metrics_of_app(app))


def metrics_of_app(app: FastAPI) -> Metrics:
    return cast(Metrics, app.state.metrics)


__all__ = [
    "ADMISSION_BUCKETS",
    "HTTP_BUCKETS",
    "Metrics",
    "MetricsAuth",
    "RequestFigures",
    "count_requests",
    "install",
    "metrics_of",
]
