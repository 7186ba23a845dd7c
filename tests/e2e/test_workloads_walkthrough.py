"""The README's "Workloads across clusters" walkthrough on `make run`'s fleet: the commands are read
from the README itself (each with `--json` added, to read its answer), so the two cannot drift apart."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Server
from tests.e2e.test_bcd_loop import eventually

pytestmark = pytest.mark.e2e

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
SECTION = README.split("## Workloads across clusters", 1)[1].split("\n## ", 1)[0]


def commands() -> list[list[str]]:
    """The section's `.venv/bin/better-compute ...` lines, as argument lists (comments dropped)."""
    return [
        shlex.split(line.split("#", 1)[0])[1:]
        for line in SECTION.splitlines()
        if line.startswith(".venv/bin/better-compute ")
    ]


def run(server: Server, args: list[str]) -> Any:
    done = server.cli_env(*args, "--json")
    assert done.returncode == 0, (args, done.stderr)
    return json.loads(done.stdout)


def test_the_readme_walkthrough_previews_places_runs_scales_past_the_fleet_and_frees(server: Server) -> None:
    """On the fake runtime (`start_server`'s default): the replicas' containers run and pass their
    probe, so the deployment is `running` from readiness with 3 of 3 ready, and a replica's log is
    read through its node's agent."""
    preview, create, show, logs, scale, delete = commands()
    assert [c[:2] for c in (preview, create, show, logs, scale, delete)] == [
        ["placement", "preview"],
        ["workloads", "create"],
        ["workloads", "show"],
        ["workloads", "logs"],
        ["workloads", "scale"],
        ["workloads", "delete"],
    ]
    previewed = run(server, preview)
    assert previewed["shares"] == {"us-east": 3}
    assert {v["clusterId"]: v["reason"] for v in previewed["verdicts"]} == {
        "eu-west": "insufficient_capacity",
        "us-east": None,
    }
    assert run(server, ["workloads", "list", "--project", "platform"])["items"] == []

    made = run(server, create)
    assert (made["placedReplicas"], made["unplacedReplicas"]) == (3, 0)
    assert made["shape"]["container"]["image"] == "localhost/better-compute-demo:1"

    def ready() -> dict[str, Any] | None:
        (dep,) = run(server, show)["deployments"]
        return dep if dep["readyReplicas"] == 3 else None

    dep = eventually(ready, "the replicas' containers ready")
    assert (dep["clusterId"], dep["phase"], dep["runningReplicas"]) == ("us-east", "running", 3)
    logged = run(server, logs)
    assert logged["allocationId"] == f"{dep['id']}.r0"
    assert logged["node"].startswith("use-a100-")
    assert logged["lines"].splitlines()[0] == "started localhost/better-compute-demo:1"
    assert "GET /ping" in logged["lines"].splitlines()

    scaled = run(server, scale)
    assert (scaled["placedReplicas"], scaled["unplacedReplicas"], scaled["reason"]) == (
        8,
        1,
        "insufficient_capacity",
    )
    (dep,) = scaled["deployments"]
    assert (dep["clusterId"], dep["shortfall"]) == ("us-east", 1)
    one_gpu = {
        "tenantId": "platform",
        "poolId": "a100-exclusive",
        "duration": "1h",
        "devices": [{"class": "gpu", "count": 1}],
    }
    refused = server.cli_env("api", "reservations.create", "--json", json.dumps(one_gpu))
    assert refused.returncode == 1
    assert json.loads(refused.stderr)["error"]["code"] == "QUOTA_EXCEEDED"

    assert run(server, delete)["name"] == "train"
    booked = server.cli_env("api", "reservations.create", "--json", json.dumps(one_gpu))
    assert booked.returncode == 0, booked.stderr
    rid = json.loads(booked.stdout)["id"]
    assert server.cli_env("api", "reservations.release", "--json", json.dumps({"id": rid})).returncode == 0
