"""`better-compute quotas set|list` with device-class rows beside pool rows, against the real app on
both stores: a row set by flags reads back in the table (with its scope) and as JSON."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tests.builders import bearer
from tests.cli.test_resources_cmd import Live, live, run

__all__ = ["live"]

H100 = {
    "name": "h100-80gb",
    "class": "gpu",
    "selector": {"matchExpressions": [{"key": "gpuModel", "op": "In", "values": ["H100-80GB"]}]},
}


def test_a_device_class_row_is_set_and_listed_beside_a_pool_row(runner: CliRunner, live: Live) -> None:
    made = live.http.post("/v1/device-classes", json=H100, headers=bearer(live.admin))
    assert made.status_code == 201, made.text
    pool = run(
        runner,
        live.admin,
        "quotas",
        "set",
        "--tenant",
        "acme",
        "--pool",
        "p1",
        "--class",
        "gpu",
        "--limit",
        "2",
    )
    assert pool.exit_code == 0, pool.output
    cluster = run(
        runner,
        live.admin,
        "quotas",
        "set",
        "--tenant",
        "acme",
        "--device-class",
        "h100-80gb",
        "--scope",
        "cluster",
        "--cluster",
        "c1",
        "--guaranteed",
        "16",
        "--floor",
        "4",
        "--weight",
        "2",
        "--json",
    )
    assert cluster.exit_code == 0, cluster.output
    assert json.loads(cluster.stdout) == {
        "tenantId": "acme",
        "scope": "cluster",
        "deviceClass": "h100-80gb",
        "clusterId": "c1",
        "guaranteedDevices": 16,
        "floorDevices": 4,
        "overQuotaWeight": 2.0,
    }
    fleet = run(
        runner,
        live.admin,
        "quotas",
        "set",
        "--tenant",
        "acme",
        "--device-class",
        "h100-80gb",
        "--scope",
        "fleet",
        "--guaranteed",
        "32",
    )
    assert fleet.exit_code == 0, fleet.output
    table = run(runner, live.admin, "quotas", "list", "--tenant", "acme")
    assert table.exit_code == 0, table.output
    lines = [line.split() for line in table.stdout.splitlines() if line.strip().startswith("acme")]
    assert [line[:2] for line in lines] == [["acme", "pool"], ["acme", "cluster"], ["acme", "fleet"]]
    assert "16" in lines[1] and "32" in lines[2]
    only = run(runner, live.admin, "quotas", "list", "--scope", "fleet", "--json")
    assert [r["guaranteedDevices"] for r in json.loads(only.stdout)["items"]] == [32]


def test_a_row_missing_its_flags_is_refused_before_any_call(runner: CliRunner, live: Live) -> None:
    half = run(runner, live.admin, "quotas", "set", "--tenant", "acme", "--device-class", "h100-80gb")
    assert half.exit_code == 2 and "--scope" in half.output
    pool = run(runner, live.admin, "quotas", "set", "--tenant", "acme", "--pool", "p1")
    assert pool.exit_code == 2 and "--limit" in pool.output
