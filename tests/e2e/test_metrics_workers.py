"""`/metrics` of `serve --workers 2`: one view of the server, whichever worker answers the scrape."""

from __future__ import annotations

import os
import shutil
import subprocess

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import start_server

SCRAPES = 12
HEALTH_CHECKS = 20


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _requests(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], route: str) -> float:
    key = (("method", "GET"), ("route", route), ("status", "200"))
    return samples.get(("better_compute_http_requests_total", key), 0.0)


def test_every_scrape_of_serve_workers_answers_the_sum_over_its_workers(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with start_server(
        tmp_path_factory.mktemp("metrics-workers"),
        fleet=None,
        options=["--workers", "2", "--metrics-allocations"],
    ) as server:
        # A new connection for each request: the kernel hands them to both workers.
        for _ in range(HEALTH_CHECKS):
            assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
        texts = [httpx.get(f"{server.url}/metrics", timeout=5).text for _ in range(SCRAPES)]

    scraped = [_samples(t) for t in texts]
    health = {_requests(s, "/healthz") for s in scraped}
    # Per-worker counters would disagree from scrape to scrape; the sum is one figure.
    assert len(health) == 1 and health.pop() >= HEALTH_CHECKS
    # Each scrape sees every earlier one, whichever worker answered it.
    assert [_requests(s, "/metrics") for s in scraped] == list(range(SCRAPES))
    last = scraped[-1]
    names = {name for name, _ in last}
    assert {
        "better_compute_build_info",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
    } <= names
    # The parent and the two workers, at least: more than one process's descriptors.
    assert last[("process_open_fds", ())] > 0
    assert last[("better_compute_reservations_refused_total", (("code", "INSUFFICIENT_CAPACITY"),))] == 0
    # The option reached the workers: the allocation series is named (no allocation holds a GPU yet).
    assert "# TYPE better_compute_allocation_info gauge" in texts[-1]

    promtool = shutil.which("promtool")
    if promtool is None and not os.environ.get("CI"):
        return
    assert promtool is not None, "CI is set but promtool is not installed (.ci/run installs it)"
    checked = subprocess.run(
        [promtool, "check", "metrics"],
        input=texts[-1],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
