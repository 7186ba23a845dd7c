"""End-to-end fixtures: a real `better-compute serve` on loopback, over a SQLite file of the test's own.

`server` starts one for tests/e2e, as `make run` does (`--fleet examples/demo-fleet.yaml`), waits for
`/healthz`, takes a fleet-admin token from `better-compute admin bootstrap`, and always stops the process
at the end. Its simulated nodes run containers with the in-process fake runtime (`--runtime fake`)
unless a test asks for podman; podman, where a test does, runs with this machine's settings
(`CONTAINERS_CONF`: runc, lowered ulimits). `start_server` does the same for a test that needs a server of its own. `cli(...)` runs the
`better-compute` command in a subprocess with no server, token or config from the environment.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import mark_serial

REPO = Path(__file__).resolve().parents[2]
DEMO_FLEET = REPO / "examples" / "demo-fleet.yaml"
HEALTH_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
CLI_TIMEOUT = 60.0

_E2E_DIR = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/e2e starts real processes: mark it `e2e` (deselect with -m 'not e2e'),
    in the serial group."""
    for item in items:
        if _E2E_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
    mark_serial(items, _E2E_DIR)


NOT_PASSED_ON = {
    *("BC_SERVER", "BC_TOKEN", "BC_DATABASE_URL", "XDG_CONFIG_HOME"),
    *("BC_MAX_BODY_BYTES", "BC_TIMEOUT_REQUEST", "BC_TIMEOUT_KEEP_ALIVE"),
}
"""The user's server, token, database, server settings (`better_compute.settings`) and login config."""


CONTAINERS_CONF = """[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]

[engine]
runtime = "runc"
"""
"""podman's settings for the servers' simulated nodes: runc (crun refuses this machine's cgroups)
and ulimits the container may have."""


def clean_env(home: Path) -> dict[str, str]:
    """The environment for our subprocesses: none of NOT_PASSED_ON, and `CONTAINERS_CONF` naming a
    containers.conf of CONTAINERS_CONF in `home`, for the podman a server's simulated nodes run."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_PASSED_ON}
    conf = home / "containers.conf"
    if not conf.is_file():
        home.mkdir(parents=True, exist_ok=True)
        conf.write_text(CONTAINERS_CONF, encoding="utf-8")
    env["CONTAINERS_CONF"] = str(conf)
    env["BC_CONFIG"] = str(home / "config.json")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def command(*args: str) -> list[str]:
    """`better-compute <args>` with this interpreter, so the venv under test is the one that runs."""
    return [sys.executable, "-m", "better_compute.entrypoints.cli", *args]


@dataclass(frozen=True)
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(
    args: Sequence[str],
    home: Path,
    *,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    runner: Sequence[str] = (),
) -> CliResult:
    """`better-compute <args>` in `home`, with `env` added to a clean environment; `runner` is a
    command that runs it (`setpriv ...`)."""
    done = subprocess.run(
        [*runner, *command(*args)],
        input=stdin,
        capture_output=True,
        text=True,
        env={**clean_env(home), **(env or {})},
        cwd=home,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    return CliResult(done.returncode, done.stdout, done.stderr)


@dataclass(frozen=True)
class Server:
    """A running `better-compute serve`: its URL, database, a fleet-admin token and a scratch directory."""

    url: str
    database_url: str
    admin_token: str
    home: Path
    log: Path

    def cli(self, *args: str, token: str | None = None, stdin: str | None = None) -> CliResult:
        """`better-compute <args> --server <url> --token <token>` (the admin token by default)."""
        return run_cli(
            [*args, "--server", self.url, "--token", token or self.admin_token], self.home, stdin=stdin
        )

    def cli_env(self, *args: str, token: str | None = None) -> CliResult:
        """`better-compute <args>` finding its server and token in `BC_SERVER` and `BC_TOKEN`."""
        env = {"BC_SERVER": self.url, "BC_TOKEN": token or self.admin_token}
        return run_cli(list(args), self.home, env=env)

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT)


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, log: Path, *, ready: bool = True) -> bool:
    """True once /healthz answers 200 (with `ready`; else once it answers at all); False if the
    process exits first (e.g. the port was taken)."""
    deadline = time.monotonic() + HEALTH_TIMEOUT
    with httpx.Client(base_url=url, timeout=2.0) as http:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            try:
                if http.get("/healthz").status_code == 200 or not ready:
                    return True
            except httpx.TransportError:
                pass
            time.sleep(0.1)
    output = log.read_text(encoding="utf-8", errors="replace")
    pytest.fail(f"the server did not answer {url}/healthz within {HEALTH_TIMEOUT:.0f} s:\n{output}")


@contextmanager
def start_server(
    home: Path,
    *,
    fleet: Path | None = DEMO_FLEET,
    attempts: int = 3,
    options: Sequence[str] = (),
    database_url: str | None = None,
    admin_token: str | None = None,
    ready: bool = True,
    runner: Sequence[str] = (),
) -> Iterator[Server]:
    """Serve a SQLite database in `home` (or `database_url`) on a free loopback port; stopped when
    the block exits.

    `options` are more `serve` options (`--timeout-request 1`, `--workers 2`); without a
    `--runtime` among them, a fleet's simulated nodes run the in-process fake. With `admin_token`
    (one the database has) the server is not bootstrapped. It is waited for until `/healthz` says it
    is ready, or without `ready` until it answers at all (a server whose database it cannot write is
    never ready). `runner` is a command that runs `serve` (`setpriv ...`)."""
    home.mkdir(parents=True, exist_ok=True)
    database_url = database_url or f"sqlite:///{home / 'bc.db'}"
    log = home / "server.log"
    for attempt in range(attempts):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        args = ["serve", "--database-url", database_url, "--host", "127.0.0.1", "--port", str(port)]
        if fleet is not None:
            args += ["--fleet", str(fleet)]
            if "--runtime" not in options:
                args += ["--runtime", "fake"]
        args += options
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*runner, *command(*args)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=clean_env(home),
                cwd=home,
            )
        try:
            if not _wait_healthy(proc, url, log, ready=ready):
                output = log.read_text(encoding="utf-8", errors="replace")
                if "address already in use" in output.lower() and attempt + 1 < attempts:
                    continue
                pytest.fail(f"the server exited with status {proc.returncode} before answering:\n{output}")
            token = admin_token
            if token is None:
                boot = run_cli(["admin", "bootstrap", "--database-url", database_url], home)
                if boot.returncode != 0:
                    pytest.fail(f"admin bootstrap failed ({boot.returncode}):\n{boot.stdout}{boot.stderr}")
                token = boot.stdout.strip().splitlines()[-1]
            yield Server(url=url, database_url=database_url, admin_token=token, home=home, log=log)
            return
        finally:
            _stop(proc)
    raise AssertionError("unreachable")


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the e2e tests, loaded with examples/demo-fleet.yaml as `make run` does.

    Stopped once tests/e2e is done, not at the end of the session: its simulated nodes keep working
    while it runs (about a sixth of a CPU), which the rest of the suite would pay for until the end."""
    with start_server(tmp_path_factory.mktemp("e2e-server")) as running:
        yield running
