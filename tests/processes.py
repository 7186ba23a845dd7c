"""The processes a race starts: fresh ones, as a server's are, without each importing the server again.

A race's processes used to be started with `spawn`: a fresh interpreter each, importing SQLAlchemy,
psycopg and the service code again (about a second of CPU each, more under load, for dozens of
processes per run). `race_context()` gives a `forkserver` context instead: its server process imports
that code once, then forks each process the race asks for. A forked process is as fresh as a spawned
one: the server has imported modules and done nothing else (no connection, no thread, nothing of the
test's), and the environment is the one the server started with.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import BaseContext

PRELOAD = [
    "tests.reliability.endpoint_race_worker",
    "tests.reliability.gpu_claim_race_worker",
    "tests.reliability.layout_restart_worker",
    "tests.reliability.mig_gate_worker",
    "tests.reliability.pool_race_worker",
    "tests.reliability.preemption_race_worker",
    "tests.reliability.tenant_race_worker",
    "tests.reliability.workload_race_worker",
    "tests.storage.ledger.race_worker",
    "tests.torture.torture",
]
"""What the race workers import, imported once by the fork server (a module that does not import is
skipped there, and imported by the process that needs it)."""


def race_context() -> BaseContext:
    """The multiprocessing context for a race's processes: forked from a server that imported PRELOAD."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)  # no effect once the server runs: the same list each time
    return context
