"""One error format and exit statuses by class, across the CLI.

Usage errors exit 2, a server's refusal 1, no answer 3 (docs/cli.md, Exit codes); every error is one
`error: ...` line in plain words, never pydantic's rendering; a reader closing the output pipe is no
error; a malformed server URL says what is wrong with it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pydantic
import pytest
import typer
from typer.testing import CliRunner

from better_compute.cli import choices, config
from better_compute.cli.app import app
from better_compute.cli.errors import CliGroup
from better_compute.client import Compute
from better_compute.wire import policies, pools, quotas, reservations
from tests.client.fakes import FakeServer, error_json

SRC = Path(__file__).resolve().parents[2] / "src"
PYDANTIC_WORDS = ("validation error for", "input_value=", "type=", '"type"', '"loc"', "Value error")


def _closed_port() -> int:
    """A local port nothing listens on: bound, then released."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "better_compute.entrypoints.cli", *args]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BC_")}
    return {**env, "PYTHONPATH": str(SRC), "COLUMNS": "80", **extra}


def test_a_usage_error_exits_2_in_the_one_error_format(runner: CliRunner) -> None:
    result = runner.invoke(app, ["layouts", "list"], env={"COLUMNS": "80"})

    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == "error: Missing option '--gpu'."
    assert "--help' for help." in result.stderr
    assert "╭" not in result.stderr
    root = runner.invoke(app, ["--bogus"])
    assert root.exit_code == 2
    assert root.stderr.splitlines()[0] == "error: No such option: --bogus"


def test_an_unknown_choice_is_a_usage_error_listing_the_choices(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["pools", "create", "--name", "p", "--cluster", "c", "--owner", "o", "--mode", "x"]
    )

    assert result.exit_code == 2
    first = result.stderr.splitlines()[0]
    assert (
        first
        == "error: Invalid value for '--mode': 'x' is not one of 'exclusive', 'mig', 'timeslice', 'mps'."
    )


def test_a_server_refusal_exits_1(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("GET", "/v1/reservations")] = (403, error_json("FORBIDDEN", "not yours"))

    result = runner.invoke(app, ["reservations", "list", "--token", "t"])

    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == "error: FORBIDDEN: not yours"


def test_an_unreachable_server_exits_3(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    def connect(settings: config.Settings) -> Compute:
        return Compute(settings.server, settings.token, retries=1, sleep=lambda _: None)

    monkeypatch.setattr(config, "connect", connect)
    port = _closed_port()

    result = runner.invoke(
        app, ["reservations", "list", "--server", f"http://127.0.0.1:{port}", "--token", "t"]
    )
    as_json = runner.invoke(app, ["api", "clusters.list", "--server", f"http://127.0.0.1:{port}"])

    assert result.exit_code == 3
    assert result.stderr.startswith(
        f"error: TRANSPORT: reservations.list: no answer from http://127.0.0.1:{port}"
    )
    assert as_json.exit_code == 3


def test_arguments_the_client_refuses_exit_2_in_plain_words(runner: CliRunner, server: FakeServer) -> None:
    result = runner.invoke(app, ["reservations", "list", "--limit", "5000", "--token", "t"])

    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: INVALID_INPUT: reservations.list: limit: Input should be less than or equal to 1000"
    )
    assert server.requests == []


def test_a_servers_validation_errors_are_told_as_field_and_message(
    runner: CliRunner, server: FakeServer
) -> None:
    faults = [
        {
            "type": "greater_than",
            "loc": ["devices", 0, "count"],
            "msg": "Input should be greater than 0",
            "input": 0,
        },
        {"type": "missing", "loc": ["poolId"], "msg": "Field required", "input": {}},
    ]
    server.routes[("GET", "/v1/reservations")] = (
        400,
        error_json("INVALID_INPUT", "devices[0].count: Input should be greater than 0", errors=faults),
    )

    result = runner.invoke(app, ["reservations", "list", "--token", "t"])

    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error: INVALID_INPUT: devices[0].count: Input should be greater than 0",
        "  devices[0].count: Input should be greater than 0",
        "  poolId: Field required",
    ]
    as_json = runner.invoke(app, ["reservations", "list", "--token", "t", "--json"])
    assert '"greater_than"' in as_json.stderr  # scripts keep the API's whole error object


def test_a_pydantic_error_escaping_a_command_is_told_in_plain_words(runner: CliRunner) -> None:
    class Body(pydantic.BaseModel):
        count: int = pydantic.Field(gt=0)
        name: str

    probe = typer.Typer(cls=CliGroup)

    @probe.command()
    def make(count: int) -> None:
        Body.model_validate({"count": count})

    @probe.command()
    def other() -> None:
        """A second command, so `make` is a subcommand as in the real CLI."""

    result = runner.invoke(probe, ["make", "0"])

    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: INVALID_INPUT: count: Input should be greater than 0",
        "  count: Input should be greater than 0",
        "  name: Field required",
    ]
    assert not any(word in result.stderr for word in PYDANTIC_WORDS)


@pytest.mark.parametrize("args", [("gpus",), ("gpus", "--json")])
def test_a_pipe_closed_early_is_not_an_error(args: tuple[str, ...]) -> None:
    head = subprocess.run(
        ["bash", "-c", 'set -o pipefail; "$@" | head -1', "bash", *_cli(*args)],
        capture_output=True,
        env=_env(),
        timeout=60,
        check=False,
    )
    assert head.returncode == 0
    assert head.stderr == b""
    assert len(head.stdout.splitlines()) == 1

    # The reader gone before the first write: the write fails every time, not by timing.
    with subprocess.Popen(_cli(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        stderr = proc.stderr.read()
        status = proc.wait(timeout=60)
    assert status == 0
    assert stderr == b""


def test_a_server_without_a_scheme_is_refused_with_a_hint(runner: CliRunner, server: FakeServer) -> None:
    from_env = runner.invoke(app, ["reservations", "list"], env={"BC_SERVER": "bc.example:8000"})
    from_option = runner.invoke(app, ["api", "clusters.list", "--server", "bc.example:8000"])
    login = runner.invoke(app, ["login", "--server", "bc.example:8000", "--token", "t"])

    assert from_env.exit_code == 2
    assert from_env.stderr.strip() == (
        "error: BC_SERVER is 'bc.example:8000': a server URL starts with http:// or https:// "
        "(such as https://bc.example:8000)"
    )
    assert from_option.exit_code == 2
    assert "--server is 'bc.example:8000': a server URL starts with http://" in from_option.stderr
    assert login.exit_code == 2
    assert "--server is 'bc.example:8000': a server URL starts with http://" in login.stderr
    assert server.requests == []


def test_a_server_ending_in_v1_is_refused_before_sending_with_a_hint(
    runner: CliRunner, server: FakeServer
) -> None:
    result = runner.invoke(
        app, ["reservations", "list", "--token", "t"], env={"BC_SERVER": "http://bc.test:8000/v1"}
    )

    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: BC_SERVER is 'http://bc.test:8000/v1': name the server's root, without /v1 "
        "(http://bc.test:8000); the client adds /v1 to every path"
    )
    assert server.requests == []


def test_help_lists_choices_and_shows_flags_without_a_type(runner: CliRunner) -> None:
    pools_help = runner.invoke(app, ["pools", "create", "--help"], env={"COLUMNS": "80"}).stdout
    gpus_help = runner.invoke(app, ["gpus", "--help"], env={"COLUMNS": "80"}).stdout

    assert "<exclusive|mig|timeslice" in pools_help
    assert "<bool>" not in gpus_help and "<bool>" not in pools_help
    assert "--json" in gpus_help


def test_the_clis_choices_are_the_apis() -> None:
    assert get_args(choices.SharingMode) == get_args(pools.SharingMode)
    assert get_args(choices.QuotaScope) == get_args(quotas.QuotaScope)
    assert get_args(choices.SubjectType) == get_args(policies.SubjectType)
    assert get_args(choices.ReservationStatus) == get_args(reservations.ReservationStatus)
