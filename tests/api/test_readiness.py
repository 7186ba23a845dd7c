"""Warm before ready: a server process says `starting` (503) on `/healthz` and `/readyz` until it has
loaded the booking index and every pool's atoms; a worker of `serve --workers N` warms before it
accepts anything; a failed warm-up is tried again, never taken for ready."""

from __future__ import annotations

import threading
import warnings
from datetime import timedelta
from pathlib import Path

import pytest

from better_compute.api import app as app_module
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.entrypoints.server import build_app, build_services
from better_compute.service.services import Services
from better_compute.service.warmup import warm
from better_compute.settings import Settings
from better_compute.storage.store import Store
from tests.builders import T0, small_fleet
from tests.node_world import NodeWorld

with warnings.catch_warnings():
    # starlette warns on import when only httpx (not httpx2) is installed; the client works the same.
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


def services_over(store: Store) -> Services:
    load_fleet(store, parse_fleet(small_fleet(nodes=2, layout="all-1g.10gb")), T0)
    return build_services(store, clock=lambda: T0)


def test_a_process_answers_starting_until_its_caches_are_warm(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = services_over(store)
    release = threading.Event()

    def slow(s: Services) -> None:
        assert release.wait(30)
        warm(s)

    monkeypatch.setattr(app_module, "warm_caches", slow)
    with TestClient(build_app(services, Settings(), warming="background")) as http:
        for path in ("/healthz", "/readyz"):
            answer = http.get(path)
            assert answer.status_code == 503 and answer.json()["status"] == "starting", path
        release.set()
        assert services.ready.wait(30)
        for path in ("/healthz", "/readyz"):
            answer = http.get(path)
            assert answer.status_code == 200 and answer.json()["status"] == "ok", path


def test_a_worker_warms_before_it_answers_anything(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    services = services_over(store)
    warmed: list[bool] = []

    def spy(s: Services) -> None:
        warm(s)
        warmed.append(True)

    monkeypatch.setattr(app_module, "warm_caches", spy)
    with TestClient(build_app(services, Settings(), warming="blocking")) as http:
        assert warmed == [True] and services.ready.is_set()
        assert http.get("/readyz").status_code == 200


def test_a_warm_up_that_fails_is_tried_again_and_never_taken_for_ready(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = services_over(store)
    tries: list[int] = []

    def flaky(s: Services) -> None:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("the database is restarting")
        warm(s)

    monkeypatch.setattr(app_module, "warm_caches", flaky)
    with TestClient(build_app(services, Settings(), warming="background")) as http:
        assert services.ready.wait(30)
        assert len(tries) == 2 and http.get("/healthz").status_code == 200


def test_warming_loads_every_pools_atoms_and_the_live_bookings(store: Store) -> None:
    services = services_over(store)
    warm(services)
    with store.read() as tx:
        pools = [p.id for p in tx.pools.all()]
        assert pools
        for pool in pools:  # cached: handed back as loaded, without reading the pool again
            assert services.index.pool_atoms(tx, pool) is services.index.pool_atoms(tx, pool)


def test_warm_up_reads_only_bookings_that_reach_past_now_regression(store: Store, tmp_path: Path) -> None:
    """A year of ended bookings made a process slower to start and bigger for ever: warming loaded
    every live booking the ledger ever had, to forget them on the first reservation."""
    world = NodeWorld(store, tmp_path)
    ended = world.reserve([{"class": "gpu.mig", "count": 1}], duration="1h")["atoms"][0]["id"]
    running = world.reserve([{"class": "gpu.mig", "count": 1}], duration="4h")["atoms"][0]["id"]
    later = world.clock.now + timedelta(hours=2)
    services = build_services(store, clock=lambda: later)
    warm(services)
    assert not services.index.knows_booking_of(ended)
    assert services.index.knows_booking_of(running)
