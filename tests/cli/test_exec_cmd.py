"""`workloads exec` and `endpoints exec` through the CLI, against the real app and a node's agent (a
real listener over an in-test runtime): the command's stdout and stderr as it wrote them, its exit
code as the CLI's, and the CLI's own exit classes for a refusal before it ran; at 80 columns and
piped (CliRunner's output is not a tty)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.client import Compute
from better_compute.storage.store import Store
from tests.api.test_exec import ExecRuntime
from tests.api.test_logs import Fleet, workload


@pytest.fixture
def fleet(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fleet]:
    made = Fleet(store, tmp_path)
    made.runtimes = {n: ExecRuntime() for n in made.ids}

    def connect(settings: config.Settings) -> Compute:
        return Compute(settings.server, settings.token, transport=made.transport(), retries=0)

    monkeypatch.setattr(config, "connect", connect)
    yield made
    for agent in made.agents.values():
        agent.stop()


def cli(fleet: Fleet, *args: str) -> Result:
    """Run the CLI with the tenant's token (given before `--`: after it, all is the command's)."""
    token = fleet.platform["Authorization"].removeprefix("Bearer ")
    at = args.index("--") if "--" in args else len(args)
    given = [*args[:at], "--server", "http://bc.test", "--token", token, *args[at:]]
    return CliRunner().invoke(app, given, env={"COLUMNS": "80"})


def placed(fleet: Fleet) -> tuple[str, str, str]:
    w = workload(fleet, 1)
    ((allocation, node),) = fleet.replicas(w["id"]).values()
    fleet.runtimes[node].texts[allocation] = "up\n"
    return w["id"], allocation, node


def test_workloads_exec_prints_both_outputs_and_exits_with_the_commands_code(fleet: Fleet) -> None:
    wid, allocation, node = placed(fleet)
    fleet.listen(node)
    # Options go before `--`; after it everything is the command, options of its own included.
    ran = cli(fleet, "workloads", "exec", wid, "--timeout", "20", "--", "ls", "-la", "--json")
    assert ran.exit_code == 0, ran.output
    assert ran.stdout == f"{allocation}: ls -la --json\n" and ran.stderr == "on stderr\n"
    assert fleet.runtimes[node].runs[-1] == (allocation, ("ls", "-la", "--json"), 20.0)
    failed = cli(fleet, "workloads", "exec", "w", "--replica", "0", "--", "exit", "3")
    assert failed.exit_code == 3 and failed.stdout == f"{allocation}: exit 3\n"
    as_json = cli(fleet, "workloads", "exec", "w", "--json", "--", "exit", "2")
    assert as_json.exit_code == 2
    answer = json.loads(as_json.stdout)
    assert (answer["allocationId"], answer["node"], answer["exitCode"], answer["timedOut"]) == (
        allocation,
        node,
        2,
        False,
    )


def test_a_command_past_its_timeout_or_its_output_bound_says_so_on_stderr(fleet: Fleet) -> None:
    wid, allocation, node = placed(fleet)
    fleet.listen(node)
    slow = cli(fleet, "workloads", "exec", wid, "--", "sleep", "99")
    assert slow.exit_code == 124 and slow.stdout == "begun\n"
    assert f"error: the command in {allocation} on node {node} ran past its timeout" in slow.stderr
    assert "may still be running in the container" in " ".join(slow.stderr.split())
    loud = cli(fleet, "workloads", "exec", wid, "--", "yes")
    assert loud.exit_code == 0 and loud.stdout == "y\n" * 4
    assert "note: the output was cut at 1 MiB (stdout and stderr each)" in loud.stderr


def test_a_timed_out_exec_says_the_command_may_keep_running_in_the_container(fleet: Fleet) -> None:
    """Past `--timeout` only the node's `podman exec` client is stopped: the CLI does not claim the
    command was killed."""
    wid, _, node = placed(fleet)
    fleet.listen(node)
    slow = cli(fleet, "workloads", "exec", wid, "--", "sleep", "99")
    said = " ".join(slow.stderr.split())
    assert slow.exit_code == 124 and "killed" not in said
    assert "(--timeout, at most 60 s): its exec was stopped, but the command may still be running" in said


def test_a_refusal_before_the_command_ran_keeps_the_clis_exit_classes(fleet: Fleet) -> None:
    wid, _, node = placed(fleet)
    unavailable = cli(fleet, "workloads", "exec", wid, "--", "true")  # the node serves no agent yet
    assert unavailable.exit_code == 1 and unavailable.stdout == ""
    assert f"error: UNAVAILABLE: node {node} does not serve exec (bcd run --listen)" in unavailable.stderr
    fleet.listen(node)
    assert cli(fleet, "workloads", "exec", "nosuch", "--", "true").exit_code == 1
    missing = cli(fleet, "workloads", "exec", wid)
    assert missing.exit_code == 2 and "Missing argument" in missing.stderr
    assert cli(fleet, "workloads", "exec", wid, "--timeout", "61", "--", "true").exit_code == 2
    too_many = cli(fleet, "workloads", "exec", wid, "--", *["x"] * 65)
    assert too_many.exit_code == 2 and "CMD: List should have at most 64 items" in too_many.stderr
    assert fleet.runtimes[node].runs == []


def test_endpoints_exec_names_its_component_and_copy(fleet: Fleet) -> None:
    refused = cli(fleet, "endpoints", "exec", "chat", "--component", "llama", "--", "true")
    assert refused.exit_code == 1 and "NOT_FOUND" in refused.stderr
    no_component = cli(fleet, "endpoints", "exec", "chat", "--", "true")
    assert no_component.exit_code == 2 and "--component" in no_component.stderr
