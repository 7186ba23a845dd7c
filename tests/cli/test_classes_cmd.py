"""`device-classes` and `priority-classes` through typer's CliRunner against the real app on both
stores (the client's transport hands each request to the app in-process)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tests.cli.test_resources_cmd import Live, live, run

__all__ = ["live"]  # the fixture, shared with the other friendly commands


def test_device_classes_are_created_with_matches_and_read_as_a_table_and_json(
    runner: CliRunner, live: Live
) -> None:
    created = run(
        runner,
        live.admin,
        "device-classes",
        "create",
        "--name",
        "h100-3g.40gb",
        "--class",
        "gpu.mig",
        "--match",
        "gpuModel=H100-80GB",
        "--selector",
        '{"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]}',
    )
    assert created.exit_code == 0, created.output
    assert "migProfile In [3g.40gb], gpuModel In [H100-80GB]" in created.stdout
    table = run(runner, live.acme, "device-classes", "list")
    assert table.exit_code == 0, table.output
    assert "h100-3g.40gb" in table.stdout and "gpu.mig" in table.stdout
    shown = run(runner, live.acme, "device-classes", "show", "h100-3g.40gb", "--json")
    assert json.loads(shown.stdout)["selector"]["matchExpressions"][1] == {
        "key": "gpuModel",
        "op": "In",
        "values": ["H100-80GB"],
    }


def test_a_refused_device_class_says_why(runner: CliRunner, live: Live) -> None:
    refused = run(runner, live.acme, "device-classes", "create", "--name", "x", "--class", "gpu")
    assert refused.exit_code != 0
    assert "fleet-admin" in refused.output
    bad = run(
        runner, live.admin, "device-classes", "create", "--name", "x", "--class", "gpu", "--match", "oops"
    )
    assert bad.exit_code != 0 and "KEY=VALUE" in bad.output


def test_priority_classes_are_created_and_listed_with_standard(runner: CliRunner, live: Live) -> None:
    created = run(
        runner,
        live.admin,
        "priority-classes",
        "create",
        "--name",
        "batch",
        "--priority",
        "-10",
        "--preemptible",
    )
    assert created.exit_code == 0, created.output
    listed = run(runner, live.acme, "priority-classes", "list", "--json")
    items = json.loads(listed.stdout)["items"]
    assert [(p["name"], p["priority"], p["preemptible"]) for p in items] == [
        ("batch", -10, True),
        ("standard", 0, False),
    ]
    shown = run(runner, live.acme, "priority-classes", "show", "standard")
    assert shown.exit_code == 0 and "Preemptible  no" in shown.stdout
