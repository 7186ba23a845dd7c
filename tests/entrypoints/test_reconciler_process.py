"""`serve`'s reconciler process: started again whenever it exits, and stopped for good with the server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from better_compute.entrypoints import database, reconciler_process
from better_compute.entrypoints.reconciler_process import ReconcilerProcess, reconcile_command
from better_compute.storage.store import Store
from tests.conftest import SERIAL

pytestmark = SERIAL  # child processes started and waited for on deadlines: in the suite's serial group

CHILD = """
import pathlib, sys, time
p = pathlib.Path(sys.argv[1])
p.write_text((p.read_text() if p.exists() else "") + "x")
time.sleep(60 if len(p.read_text()) >= 3 else 0)  # the third one stays up
"""


def eventually(probe: Callable[[], bool], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not probe():
        assert time.monotonic() < deadline, f"not within {seconds:g} s: {what}"
        time.sleep(0.02)


def test_a_reconciler_process_that_exits_is_started_again_until_the_server_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconciler_process, "RESTART_FIRST", 0.01)
    starts = tmp_path / "starts"
    child = ReconcilerProcess([sys.executable, "-c", CHILD, str(starts)], os.environ)
    child.start()
    try:
        eventually(
            lambda: starts.exists() and starts.read_text() == "xxx" and child.pid is not None, "a third"
        )
        running = child.pid
        assert running is not None and child.started == 3
    finally:
        child.stop()
    assert child.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(running, 0)  # stopped (and reaped), not left behind
    assert starts.read_text() == "xxx" and child.started == 3  # and none started after


def test_a_stop_before_the_first_start_starts_nothing() -> None:
    child = ReconcilerProcess([sys.executable, "-c", "raise SystemExit(1)"], os.environ)
    child.stop()
    child.start()
    child.stop()
    assert child.started == 0 and child.pid is None


def test_the_command_is_reconcile_at_the_duty_given_stopping_with_this_process() -> None:
    assert reconcile_command(0.25)[-6:] == [
        "better_compute.entrypoints.cli",
        "reconcile",
        "--duty",
        "0.25",
        "--parent",
        str(os.getpid()),
    ]


SERVER = """
import subprocess, sys, time
child = subprocess.Popen(
    sys.argv[1:] + ["--parent", str(__import__("os").getpid())], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
)
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_reconciler_whose_server_is_killed_outright_stops_by_itself(tmp_path: Path) -> None:
    """A server killed with SIGKILL runs no stop callback: its reconciler child, left behind, went
    on stepping nodes (on SQLite beside the next server's own) until the machine stopped."""
    child_pid = 0

    def gone() -> bool:  # exited: reaped, or a zombie its new parent has not reaped yet
        try:
            return Path(f"/proc/{child_pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
        except FileNotFoundError:
            return True

    url = f"sqlite:///{tmp_path / 'bc.db'}"
    Store.open(url).close()  # migrated, as serve leaves it
    command = [*reconcile_command(0.1)[:-2], "--database-url", url]
    server = subprocess.Popen([sys.executable, "-c", SERVER, *command], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        child_pid = int(server.stdout.readline())
        time.sleep(3)  # past its start-up
        assert not gone()
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        if server.stdout is not None:
            server.stdout.close()

    eventually(gone, "the orphaned reconciler stopped", seconds=60)


def test_a_child_that_exits_once_the_server_is_stopping_is_not_started_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Ctrl-C reached the child with the server (one process group): it exited, and the supervisor
    started another while the server was still finishing its requests."""
    monkeypatch.setattr(reconciler_process, "RESTART_FIRST", 0.01)
    server_stopping = threading.Event()
    server_stopping.set()
    child = ReconcilerProcess([sys.executable, "-c", "pass"], os.environ, server_stopping)
    child.start()
    try:
        eventually(lambda: child.started == 1 and child.pid is None, "the one child ran and exited")
        time.sleep(0.2)
        assert child.started == 1
    finally:
        child.stop()


def test_the_child_runs_in_a_session_of_its_own() -> None:
    """So a signal to the server's terminal or process group is the server's to act on."""
    child = ReconcilerProcess([sys.executable, "-c", "import time; time.sleep(60)"], os.environ)
    child.start()
    try:
        eventually(lambda: child.pid is not None, "the child started")
        running = child.pid
        assert running is not None and os.getsid(running) != os.getsid(0)
    finally:
        child.stop()


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite:///file::memory:?cache=shared&uri=true",
        "sqlite:///x?mode=memory&uri=true",
    ],
)
def test_every_spelling_of_an_in_memory_sqlite_database_has_no_file(url: str) -> None:
    """An in-memory database in SQLite's URI form was taken for a file: serve started a reconciler
    process that could never open it."""
    assert database.target(url).sqlite_path is None
