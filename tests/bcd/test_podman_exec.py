"""`PodmanRuntime.run_in` (the agent's exec) over a stand-in for the podman command: `ps` lists one
container of the node, `exec CONTAINER CMD...` runs CMD here. What is tested is bcd's side: the argv
it builds, both outputs read and bounded, the exit code passed through, the timeout enforced."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from better_compute.bcd.containers import NoContainer
from better_compute.bcd.podman import PodmanRuntime
from better_compute.domain.fleet.node_agents import EXEC_OUTPUT_MAX

PS = (
    '[{"Id":"c1","Names":["bc-n-1-dep-1.r0"],"State":"running","ExitCode":0,'
    '"Labels":{"better-compute.node":"n-1","better-compute.allocation":"dep-1.r0"}}]'
)


@pytest.fixture
def podman(tmp_path: Path) -> PodmanRuntime:
    script = tmp_path / "podman"
    script.write_text(
        "#!/bin/sh\n"
        f"case \"$1\" in\n  ps) printf '%s' '{PS}';;\n"
        '  exec) [ "$2" = c1 ] || { echo "Error: no such container $2" >&2; exit 125; }\n'
        '        shift 2; exec "$@";;\nesac\n'
    )
    return PodmanRuntime("n-1", argv=["sh", str(script)])


def test_the_command_runs_in_the_allocations_container_with_both_outputs_and_its_exit_code(
    podman: PodmanRuntime,
) -> None:
    got = podman.run_in("dep-1.r0", ["echo", "hi"], 5)
    assert (got.exit_code, got.stdout, got.stderr, got.truncated, got.timed_out) == (
        0,
        "hi\n",
        "",
        False,
        False,
    )
    both = podman.run_in("dep-1.r0", ["sh", "-c", "echo out; echo err >&2; exit 3"], 5)
    assert (both.exit_code, both.stdout, both.stderr) == (3, "out\n", "err\n")
    with pytest.raises(NoContainer):
        podman.run_in("dep-9.r0", ["true"], 5)


def test_output_past_a_mebibyte_is_cut_and_flagged_and_the_command_still_finishes(
    podman: PodmanRuntime,
) -> None:
    got = podman.run_in("dep-1.r0", ["sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' y; exit 4"], 10)
    assert got.exit_code == 4 and got.truncated and got.stdout == "y" * EXEC_OUTPUT_MAX


def test_a_command_past_its_timeout_is_killed_and_said_so(podman: PodmanRuntime) -> None:
    started = time.monotonic()
    got = podman.run_in("dep-1.r0", ["sh", "-c", "echo begun; exec sleep 30"], 0.5)
    assert time.monotonic() - started < 5
    assert (got.exit_code, got.timed_out, got.stdout) == (124, True, "begun\n")
