"""`better-compute partitions book|release` against the real app on both stores: an admin holds a
GPU's whole family for maintenance and ends it; a conflict books nothing and exits 1."""

from __future__ import annotations

import json

import httpx
import pytest
from typer.testing import CliRunner

from better_compute.cli import config
from better_compute.client import Compute
from better_compute.storage.store import Store
from tests.builders import stored_events
from tests.cli.test_resources_cmd import Live, run


@pytest.fixture
def live(store: Store, monkeypatch: pytest.MonkeyPatch) -> Live:
    world = Live(store)

    def connect(settings: config.Settings) -> Compute:
        return Compute(
            settings.server, settings.token, transport=httpx.MockTransport(world.handle), retries=1
        )

    monkeypatch.setattr(config, "connect", connect)
    world.store = store  # type: ignore[attr-defined]
    return world


def first_gpu(live: Live) -> str:
    listed = live.http.get("/v1/gpus", headers={"Authorization": f"Bearer {live.admin}"}).json()
    return str(min(g["id"] for g in listed["items"]))


def test_partitions_book_and_release(runner: CliRunner, live: Live) -> None:
    gpu = first_gpu(live)
    window = ("--start", "2026-12-01T10:00Z", "--end", "2026-12-01T12:00Z")
    table = run(runner, live.admin, "partitions", "book", gpu, *window)
    assert table.exit_code == 0, table.output
    booking = f"partition:{gpu}:2026-12-01T10:00:00Z"
    assert booking in table.stdout and "2026-12-01 12:00:00Z" in table.stdout
    assert "atoms    8" in table.stdout  # the GPU and its seven 1g.10gb instances

    clash = run(
        runner, live.admin, "partitions", "book", gpu, "--start", "2026-12-01T11:00Z", "--duration", "2h"
    )
    assert clash.exit_code == 1
    assert (
        f"CONFLICT: GPU {gpu} is booked in that window; the whole GPU is free from 2026-12-01 12:00:00Z"
        in clash.stderr
    )
    as_json = run(
        runner,
        live.admin,
        "partitions",
        "book",
        gpu,
        "--start",
        "2026-12-01T11:00Z",
        "--duration",
        "2h",
        "--json",
    )
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout)["freeFrom"] == "2026-12-01T12:00:00Z"

    released = run(runner, live.admin, "partitions", "release", booking, "--json")
    assert released.exit_code == 0, released.output
    assert json.loads(released.stdout) == {
        "status": "released",
        "bookingId": booking,
        "gpuId": gpu,
        "ended": 8,
    }
    assert [e["subject"] for e in stored_events(live.store, "gpu.partition.released")] == [booking]  # type: ignore[attr-defined]
    events = run(runner, live.admin, "events", "--type", "gpu.partition.booked", "--json")
    assert events.exit_code == 0, events.output
    assert gpu in events.stdout


def test_partitions_refusals(runner: CliRunner, live: Live) -> None:
    gpu = first_gpu(live)
    tenant = run(runner, live.acme, "partitions", "book", gpu, "--duration", "1h")
    assert tenant.exit_code == 1 and "FORBIDDEN: partitions.book needs a fleet-admin token" in tenant.stderr
    both = run(
        runner, live.admin, "partitions", "book", gpu, "--end", "2026-12-01T12:00Z", "--duration", "1h"
    )
    assert both.exit_code == 2 and "exactly one of --end and --duration" in both.output
    missing = run(runner, live.admin, "partitions", "book", "GPU-nowhere", "--duration", "1h")
    assert missing.exit_code == 1 and "NOT_FOUND: GPU GPU-nowhere not found" in missing.stderr
    too_long = run(runner, live.admin, "partitions", "book", gpu, "--duration", "40d")
    assert too_long.exit_code == 1 and "at most 30 days" in too_long.stderr
    gone = run(runner, live.admin, "partitions", "release", "bkg-424242")
    assert gone.exit_code == 1 and "NOT_FOUND: no partition change bkg-424242" in gone.stderr
