"""`better-compute replay --fleet-changes` against the real app: the file is read as YAML and sent
whole, and its changes are laid over the fleet file before the run (docs/replay.md#fleet-changes)."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from tests.builders import T0
from tests.cli.test_replay_cmd import files
from tests.cli.test_resources_cmd import Live, live, run
from tests.service.ops.test_replay import at

__all__ = ["live"]


def args(tmp_path: Path, changes: object) -> list[str]:
    f = files(tmp_path)
    path = tmp_path / "changes.yaml"
    path.write_text(yaml.safe_dump(changes))
    return [
        "replay",
        *("--since", T0.isoformat(), "--until", at(360).isoformat()),
        *("--demand", f["demand"], "--fleet", f["fleet"], "--policy", f["policy"]),
        *("--fleet-changes", str(path)),
    ]


def test_replay_with_a_node_removed_halves_the_batch_and_keeps_svc_waiting(
    runner: CliRunner, live: Live, tmp_path: Path
) -> None:
    """The worked example's fleet less n-2 (4 H100s left): globex's batch of 8 holds 4 from 9:00
    to 12:00 (12 GPU-h; 4 short for 3 h, 12 refused), never all it asked, so it waits to the
    window's end (6 h); acme's svc (4, at 10:00, below batch's
    priority) waits until batch is deleted at 12:00 (2 h, 8 GPU-h short), then holds 4 for 3 h
    (12 GPU-h)."""
    shown = run(runner, live.admin, *args(tmp_path, {"removeNodes": ["n-2"]}), "-o", "wide")
    assert shown.exit_code == 0, shown.output
    rows = [line.split() for line in shown.stdout.splitlines()]
    assert [
        "policy",
        "acme",
        "1",
        "0",
        "12.00",
        "8.00",
        "(insufficient_capacity",
        "8.00)",
        "2h",
        "2h",
        "0",
        "30.00",
        "USD",
    ] in rows
    assert [
        "policy",
        "globex",
        "1",
        "0",
        "12.00",
        "12.00",
        "(insufficient_capacity",
        "12.00)",
        "6h",
        "6h",
        "0",
        "30.00",
        "USD",
    ] in rows


def test_replay_refuses_a_fleet_change_naming_a_node_the_fleet_lacks(
    runner: CliRunner, live: Live, tmp_path: Path
) -> None:
    refused = run(runner, live.admin, *args(tmp_path, {"removeNodes": ["n-1", "n-9"]}))
    assert refused.exit_code == 1
    assert "INVALID_INPUT" in refused.stderr
    assert "fleetChanges.removeNodes[1]: node n-9 is not in the replayed fleet" in refused.stderr
    unreadable = run(runner, live.admin, *args(tmp_path, ["n-1"]))
    assert unreadable.exit_code == 2
    assert "does not hold an object" in unreadable.stderr
