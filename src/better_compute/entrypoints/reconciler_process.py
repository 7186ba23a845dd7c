"""The MIG layout gate's reconciler beside `serve`, in a process of its own.

A reconciler step is mostly Python (building statements, planning, reading rows): in a thread of
the server it holds the interpreter lock that every request needs, and each request waits behind
it, however many cores the machine has. As `better-compute reconcile` in a child process it takes a
core of its own, and the server's requests pay only for the database rows they share. The server
starts it once its database is ready, starts another if it dies (after a pause that doubles up to
`RESTART_MAX`), and stops it (SIGTERM, then SIGKILL after `STOP_WAIT`) when it stops itself.

A lease is what makes a node one reconciler's at a time (`service.gate.mig_gate`): a child that dies
holding some loses them when they run out, and its successor takes them then.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence

_log = logging.getLogger("better_compute.mig_gate")

RESTART_FIRST = 1.0
"""Seconds before the first restart of a reconciler process that exited on its own."""

RESTART_MAX = 30.0
"""The longest pause between restarts (a database that is down for a while)."""

STOP_WAIT = 10.0
"""Seconds a reconciler process has to finish its step and exit once told to stop."""


def reconcile_command(duty: float) -> list[str]:
    """`better-compute reconcile` at `duty`, run by this interpreter, stopping by itself should
    this process die without stopping it (`--parent`: SIGKILL, a crash)."""
    return [
        sys.executable,
        "-m",
        "better_compute.entrypoints.cli",
        "reconcile",
        "--duty",
        f"{duty:g}",
        "--parent",
        str(os.getpid()),
    ]


class ReconcilerProcess:
    """Runs `command` in a child process until `stop`, starting it again whenever it exits.

    `environment` is the whole environment the child gets: the server's settings as `BC_*`
    variables (`Settings.environment`), so that it opens the same database."""

    def __init__(
        self, command: Sequence[str], environment: Mapping[str, str], stopping: threading.Event | None = None
    ) -> None:
        self.command = list(command)
        self.environment = dict(environment)
        self.started = 0
        """Child processes started so far."""
        self._stopping = threading.Event()
        self._server_stopping = stopping
        """The server's own stop signal, set the moment it is told to stop: a child that exits then
        is not started again while the server finishes its requests."""
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._supervise, name="mig-gate-process", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def pid(self) -> int | None:
        """The running child's process id, if one runs."""
        with self._lock:
            child = self._child
        return child.pid if child is not None and child.poll() is None else None

    def _supervise(self) -> None:
        pause = RESTART_FIRST
        while True:
            with self._lock:  # `stop` sets the event under the same lock: no child starts after it
                if self._stopping.is_set():
                    return
                try:
                    # A session of its own: a Ctrl-C in the server's terminal (or a signal to its
                    # process group) is the server's to act on; it stops the child itself.
                    child = subprocess.Popen(self.command, env=self.environment, start_new_session=True)
                except OSError as exc:
                    _log.error("could not start the reconciler process: %s", exc)
                    child = None
                else:
                    self._child = child
                    self.started += 1
            began = time.monotonic()
            code = child.wait() if child is not None else None
            if self._stopping.is_set() or (
                self._server_stopping is not None and self._server_stopping.is_set()
            ):
                return
            if time.monotonic() - began > RESTART_MAX:
                pause = RESTART_FIRST  # it had run a while: a new failure, not the same one again
            _log.warning("the reconciler process exited (status %s); starting another in %g s", code, pause)
            if self._stopping.wait(pause):
                return
            pause = min(pause * 2, RESTART_MAX)

    def stop(self) -> None:
        """Tell the child to stop, wait for it (kill it after `STOP_WAIT`), and start no other."""
        with self._lock:
            self._stopping.set()
            child = self._child
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(STOP_WAIT)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if self._thread.is_alive():
            self._thread.join(STOP_WAIT)


__all__ = ["RESTART_FIRST", "RESTART_MAX", "STOP_WAIT", "ReconcilerProcess", "reconcile_command"]
