"""`pools update --dry-run` (issue 39, item 3) through the CLI against the real app on both stores: the
server runs the very same update and rolls it back, answering the pool as it would be and each node's
layout change with the bookings it would wait for; nothing is written."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.client import Compute
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from tests.api.test_layout_preview import MIXED, fleet
from tests.builders import T0, admin_token, api_client, tenant_token


class World:
    def __init__(self, store: Store) -> None:
        load_fleet(store, parse_fleet(fleet()), T0)
        self.store = store
        self.http = api_client(store)
        self.admin = admin_token(store)
        self.platform = tenant_token(store, "platform")

    def handle(self, request: httpx.Request) -> httpx.Response:
        answer = self.http.request(
            request.method, str(request.url), headers=dict(request.headers), content=request.content
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    def events(self) -> int:
        with self.store.read() as tx:
            return tx.events.tail_start()[0]


@pytest.fixture
def world(store: Store, monkeypatch: pytest.MonkeyPatch) -> World:
    live = World(store)

    def connect(settings: config.Settings) -> Compute:
        transport = httpx.MockTransport(live.handle)
        return Compute(settings.server, settings.token, transport=transport, retries=1, sleep=lambda _: None)

    monkeypatch.setattr(config, "connect", connect)
    return live


def cli(runner: CliRunner, token: str, *args: str, columns: int | None = 80) -> Any:
    env = {"COLUMNS": str(columns)} if columns else {}
    return runner.invoke(app, [*args, "--token", token], env=env)


def test_pools_update_dry_run_says_what_the_layout_change_would_wait_for(
    runner: CliRunner, world: World
) -> None:
    offered = cli(runner, world.admin, "pools", "offer", "p1", "platform", "--quota", "gpu.mig=4")
    assert offered.exit_code == 0, offered.output
    booked = cli(
        runner,
        world.platform,
        "reserve",
        "--pool",
        "p1",
        "--profile",
        "1g.10gb",
        "--node",
        "n-1",
        "--duration",
        "4h",
    )
    assert booked.exit_code == 0, booked.output
    before = world.events()

    planned = cli(runner, world.admin, "pools", "update", "p1", "--mig-layout", MIXED, "--dry-run")
    assert planned.exit_code == 0, planned.output
    out = planned.stdout
    assert "dry run: pool p1 would be at generation 2; nothing was changed" in out
    assert MIXED in out
    row = next(line for line in out.splitlines() if line.startswith("n-1"))
    assert "platform until 2026-12-01 13:00:00Z" in row
    assert all(len(line) <= 80 for line in out.splitlines())

    piped = cli(
        runner,
        world.admin,
        "pools",
        "update",
        "p1",
        "--mig-layout",
        MIXED,
        "--dry-run",
        "--json",
        columns=None,
    )
    answer = json.loads(piped.stdout)
    assert answer["dryRun"] is True and answer["generation"] == 2
    assert answer["policy"]["migLayout"] == MIXED
    changes = {c["node"]: c for c in answer["layoutChanges"]}
    assert changes["n-1"]["from"] == "all-1g.10gb" and changes["n-1"]["to"] == MIXED
    assert changes["n-1"]["tenants"] == ["platform"] and changes["n-1"]["openEnded"] is False
    assert changes["n-1"]["heldUntil"] == (T0 + timedelta(hours=4)).isoformat().replace("+00:00", "Z")

    # Nothing was written: no event, the pool as it was, no layout change under way.
    assert world.events() == before
    shown = json.loads(cli(runner, world.admin, "pools", "show", "p1", "--json").stdout)
    assert shown["generation"] == 1 and shown["policy"]["migLayout"] == "all-1g.10gb"
    assert "dryRun" not in shown
    with world.store.read() as tx:
        assert tx.mig_layouts.of_nodes(["n-1", "n-2"]) == {}

    done = cli(runner, world.admin, "pools", "update", "p1", "--mig-layout", MIXED, "--json")
    assert done.exit_code == 0, done.output
    made = json.loads(done.stdout)
    assert made["generation"] == answer["generation"] and "dryRun" not in made
    with world.store.read() as tx:
        assert set(tx.mig_layouts.of_nodes(["n-1", "n-2"])) == set(changes)


def test_a_dry_run_is_refused_as_the_update_would_be(runner: CliRunner, world: World) -> None:
    bad = cli(runner, world.admin, "pools", "update", "p1", "--mig-layout", "all-9g.99gb", "--dry-run")
    assert bad.exit_code == 1
    assert "error:" in bad.stderr
    tenant = cli(runner, world.platform, "pools", "update", "p1", "--mig-layout", MIXED, "--dry-run")
    assert tenant.exit_code == 1 and "FORBIDDEN" in tenant.stderr
    nothing = cli(runner, world.admin, "pools", "update", "px", "--max-duration", "8h", "--dry-run")
    assert nothing.exit_code == 0, nothing.output
    assert "no node's layout would change" in nothing.stdout


def test_a_dry_run_compares_the_generation_it_is_sent(world: World) -> None:
    headers = {"Authorization": f"Bearer {world.admin}"}
    body = {"id": "p1", "policy": {"migLayout": MIXED}, "dryRun": True}
    stale = world.http.patch("/v1/pools/p1", json={**body, "generation": 7}, headers=headers)
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "CONFLICT"
    fresh = world.http.patch("/v1/pools/p1", json={**body, "generation": 1}, headers=headers)
    assert fresh.status_code == 200 and fresh.json()["generation"] == 2 and fresh.json()["dryRun"] is True
    assert world.http.get("/v1/pools/p1", headers=headers).json()["generation"] == 1
