"""`endpoints` through typer's CliRunner against the real app (the client's transport hands each
request to the app in-process), on a pool of H100 nodes whose `n-1` runs `bcd run`'s loop."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.cli.endpoints_cmd import draw_gpu
from better_compute.client import Compute
from better_compute.service.gate.mig_gate import Reconciler
from better_compute.storage.store import Store
from tests.builders import admin_token, tenant_token
from tests.node_world import NodeWorld


@pytest.fixture
def world(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> NodeWorld:
    live = NodeWorld(store, tmp_path)

    def connect(settings: config.Settings) -> Compute:
        return Compute(
            settings.server, settings.token, transport=live.transport(), retries=1, sleep=lambda _: None
        )

    monkeypatch.setattr(config, "connect", connect)
    return live


def run(runner: CliRunner, token: str, *args: str) -> Any:
    return runner.invoke(
        app, [*args, "--token", token, "--server", "http://testserver"], env={"COLUMNS": "200"}
    )


def test_create_list_show_and_delete_an_endpoint(runner: CliRunner, world: NodeWorld, store: Store) -> None:
    daemon, _ = world.daemon("n-1")
    assert daemon.step(False)
    platform = tenant_token(store, "platform")
    types = (
        "--partition-type",
        "mig-3g.40gb",
        "--partition-type",
        "mig-2g.20gb",
        "--partition-type",
        "mig-2g.20gb",
    )
    created = run(runner, platform, "endpoints", "create", "chat", "--pool", "p1", *types, "--price", "25.25")
    assert created.exit_code == 0, created.output
    assert "Creating" in created.stdout and "n-1" in created.stdout
    assert daemon.step(True)
    Reconciler(store, world.clock, "r1").tick()
    shown = run(runner, platform, "endpoints", "show", "chat")
    assert shown.exit_code == 0, shown.output
    assert "InService" in shown.stdout
    assert "4 x mig-2g.20gb, 2 x mig-3g.40gb" in shown.stdout
    assert "[" in shown.stdout and "3g.40gb" in shown.stdout  # one GPU drawn split
    listed = run(runner, admin_token(store), "endpoints", "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert [e["name"] for e in json.loads(listed.stdout)["items"]] == ["chat"]
    deleted = run(runner, platform, "endpoints", "delete", "chat")
    assert deleted.exit_code == 0 and "Deleting" in deleted.stdout


def test_a_refusal_names_the_option_and_a_failed_endpoint_says_why(
    runner: CliRunner, world: NodeWorld, store: Store
) -> None:
    platform = tenant_token(store, "platform")
    lacks = run(
        runner, platform, "endpoints", "create", "x", "--pool", "p1", "--partition-type", "mig-4g.20gb"
    )
    assert lacks.exit_code != 0
    assert "mig-4g.20gb is not offered by H100-80GB" in lacks.output
    failed = run(
        runner, platform, "endpoints", "create", "x", "--pool", "p1", "--partition-type", "mig-7g.80gb"
    )
    assert failed.exit_code == 1, failed.output  # recorded, Failed, with the reason
    assert "Failed" in failed.stdout and "run no daemon (never joined)" in failed.stdout
    missing = run(runner, platform, "endpoints", "create", "y", "--pool", "p1")
    assert missing.exit_code != 0 and "--partition-type" in missing.output


def test_endpoints_create_exits_non_zero_when_the_endpoint_ends_failed(
    runner: CliRunner, world: NodeWorld, store: Store
) -> None:
    """A Failed endpoint is recorded (and tried again as capacity frees), but a script reading the
    exit status must not take it as made: status 1, the reason on stderr, the answer on stdout."""
    platform = tenant_token(store, "platform")
    types = ("--partition-type", "mig-7g.80gb")
    failed = run(runner, platform, "endpoints", "create", "x", "--pool", "p1", "--instances", "3", *types)
    assert failed.exit_code == 1, failed.output
    assert "Failed" in failed.stdout
    assert "error: endpoint x is Failed: variant AllTraffic asks for 3 instances" in failed.stderr
    as_json = run(runner, platform, "endpoints", "create", "y", "--pool", "p1", *types, "--json")
    assert as_json.exit_code == 1, as_json.output
    assert json.loads(as_json.stdout)["status"] == "Failed" and not as_json.stderr
    world.daemon("n-1")[0].step(False)
    made = run(runner, platform, "endpoints", "create", "z", "--pool", "p1", *types)
    assert made.exit_code == 0, made.output
    assert "Creating" in made.stdout


def test_a_gpu_is_drawn_split_by_memory() -> None:
    bar = draw_gpu(["mig-4g.40gb", "mig-2g.20gb", "mig-1g.10gb"], width=56).plain
    assert bar.count("[") == 3
    assert bar.index("2g.20gb") > bar.index("4g.40gb")
    widths = [len(part) + 1 for part in bar.split("]")[:-1]]
    assert widths[0] > widths[1] > widths[2]  # 40 GB wider than 20 GB wider than 10 GB


def test_components_create_show_scale_and_delete(runner: CliRunner, world: NodeWorld, store: Store) -> None:
    daemon, _ = world.daemon("n-1")
    assert daemon.step(False)
    platform = tenant_token(store, "platform")
    made = run(
        runner, platform, "endpoints", "create", "chat", "--pool", "p1", "--partition-type", "mig-7g.80gb"
    )
    assert made.exit_code == 0, made.output
    assert daemon.step(True)
    Reconciler(store, world.clock, "r1").tick()
    args = (
        "--endpoint",
        "chat",
        "--model",
        "llama-3-70b",
        "--partition-type",
        "mig-7g.80gb",
        "--copies",
        "3",
    )
    created = run(runner, platform, "components", "create", "big", *args)
    assert created.exit_code == 0, created.output
    assert "1 copies wait: no free mig-7g.80gb partition" in created.stdout
    copies = [
        line.split()[:2]
        for line in created.stdout.splitlines()
        if re.match(r"\s*\d+\s+(placed|pending)\b", line)
    ]
    assert [state for _, state in copies] == ["placed", "placed", "pending"] and "MIG-" in created.stdout
    scaled = run(runner, platform, "components", "scale", "big", "--copies", "2", "--json")
    assert scaled.exit_code == 0, scaled.output
    assert json.loads(scaled.stdout)["pendingCopies"] == 0
    wrong = run(runner, platform, "components", "create", "odd", *args[:4], "--partition-type", "mig-1g.10gb")
    assert wrong.exit_code != 0 and "does not declare" in wrong.output
    listed = run(runner, platform, "components", "list")
    assert listed.exit_code == 0 and "big" in listed.stdout
    deleted = run(runner, platform, "components", "delete", "big")
    assert deleted.exit_code == 0, deleted.output


def test_endpoints_update_recuts_live_and_is_refused_while_creating(
    runner: CliRunner, world: NodeWorld, store: Store
) -> None:
    daemon, fake = world.daemon("n-1")
    assert daemon.step(False)
    platform = tenant_token(store, "platform")
    made = run(
        runner, platform, "endpoints", "create", "chat", "--pool", "p1", "--partition-type", "mig-7g.80gb"
    )
    assert made.exit_code == 0, made.output
    early = run(runner, platform, "endpoints", "update", "chat", "--partition-type", "mig-3g.40gb")
    assert early.exit_code != 0 and "endpoint chat is Creating" in early.output
    assert daemon.step(True)
    Reconciler(store, world.clock, "r1").tick()
    args = ("--partition-type", "mig-3g.40gb", "--partition-type", "mig-3g.40gb")
    updated = run(runner, platform, "endpoints", "update", "chat", *args, "--json")
    assert updated.exit_code == 0, updated.output
    assert json.loads(updated.stdout)["status"] == "Updating"
    assert daemon.step(True)
    Reconciler(store, world.clock, "r1").tick()
    shown = run(runner, platform, "endpoints", "show", "chat", "--json")
    assert json.loads(shown.stdout)["status"] == "InService"
    assert json.loads(shown.stdout)["instances"][0]["partitions"] == {"mig-3g.40gb": 4}
    assert {gi.profile for g in fake.list_gpus() for gi in g.instances} == {"3g.40gb"}


def _event_count(store: Store) -> int:
    with store.read() as tx:
        return tx.events.tail_start()[0]


def test_endpoints_delete_dry_run_says_what_would_happen_and_changes_nothing(
    runner: CliRunner, world: NodeWorld, store: Store
) -> None:
    daemon, _ = world.daemon("n-1")
    assert daemon.step(False)
    platform = tenant_token(store, "platform")
    made = run(
        runner, platform, "endpoints", "create", "chat", "--pool", "p1", "--partition-type", "mig-7g.80gb"
    )
    assert made.exit_code == 0, made.output
    assert daemon.step(True)
    Reconciler(store, world.clock, "r1").tick()
    args = ("--endpoint", "chat", "--model", "m", "--partition-type", "mig-7g.80gb", "--copies", "1")
    assert run(runner, platform, "components", "create", "big", *args).exit_code == 0
    before = _event_count(store)

    planned = runner.invoke(
        app,
        ["endpoints", "delete", "chat", "--dry-run", "--token", platform, "--server", "http://testserver"],
        env={"COLUMNS": "80"},
    )
    assert planned.exit_code == 0, planned.output
    assert "endpoint chat (tenant platform) would be deleted; nothing was changed" in planned.stdout
    assert "components it would remove: big" in planned.stdout
    row = next(line.split() for line in planned.stdout.splitlines() if line.startswith("n-1"))
    assert row[0] == "n-1" and row[-1] == "all-1g.10gb"  # back to pool p1's layout
    assert all(len(line) <= 80 for line in planned.stdout.splitlines())
    as_json = json.loads(run(runner, platform, "endpoints", "delete", "chat", "--dry-run", "--json").stdout)
    assert as_json["dryRun"] is True and as_json["deletion"]["components"] == ["big"]
    assert as_json["deletion"]["nodes"] == [
        {"node": "n-1", "poolId": "p1", "layoutFrom": "mixed:7g.80gb", "layoutTo": "all-1g.10gb"}
    ]

    # Nothing changed: the endpoint serves, its component is there, no event was logged.
    assert _event_count(store) == before
    shown = json.loads(run(runner, platform, "endpoints", "show", "chat", "--json").stdout)
    assert shown["status"] == "InService" and "dryRun" not in shown
    assert run(runner, platform, "components", "show", "big").exit_code == 0

    deleted = run(runner, platform, "endpoints", "delete", "chat", "--json")
    assert deleted.exit_code == 0, deleted.output
    answer = json.loads(deleted.stdout)
    assert "dryRun" not in answer and answer["deletion"] == as_json["deletion"]
    assert _event_count(store) > before
    missing = run(runner, platform, "endpoints", "delete", "chat", "--dry-run")
    assert missing.exit_code == 1 and "endpoint chat not found" in missing.stderr
