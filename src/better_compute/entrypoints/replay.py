"""Replay's throwaway store: a fresh SQLite file with the real migrations, the replayed fleet
registered and its nodes' first reports ingested, with a booking index, stock and ids of its own.

The migrations run once per process into a template file; each replay copies it (a copy takes
milliseconds, the migrations a second or two). The file lives in a temporary directory that is
removed when the replay ends, so nothing of it outlives the request, and the deployment's own
store is never written.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from better_compute.domain.ops.fleet import FleetSpec
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.ops.replay import Sandbox
from better_compute.service.placement import workloads
from better_compute.service.placement.placement_stock import Stock
from better_compute.storage.kernel.db import make_engine
from better_compute.storage.store import Store

_template: dict[str, Path] = {}
"""The migrated template of this process, made by the first replay."""
_template_lock = threading.Lock()


class CountingIds:
    """Ids that count up from 1 per kind (`service.kernel.ids.Ids`): a replay is repeatable, and
    ids made later sort later as the production ones do."""

    def __init__(self) -> None:
        self._next = itertools.count(1)

    def _id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._next):014d}"

    def reservation(self) -> str:
        return self._id("rsv")

    def credential(self) -> str:
        return self._id("cred")

    def policy(self) -> str:
        return self._id("pol")

    def workload(self) -> str:
        return self._id("wkl")

    def deployment(self) -> str:
        return self._id("dep")

    def operation(self) -> str:
        return self._id("op")


def _migrated_template() -> Path:
    with _template_lock:
        made = _template.get("path")
        if made is None or not made.exists():
            made = Path(tempfile.mkdtemp(prefix="bc-replay-template-")) / "template.db"
            Store.open(f"sqlite:///{made}").close()
            _template["path"] = made
        return made


@contextmanager
def scratch(fleet: FleetSpec, now: datetime) -> Iterator[Sandbox]:
    """A throwaway store holding `fleet` as registered at `now` (`service.ops.replay.Scratch`)."""
    folder = Path(tempfile.mkdtemp(prefix="bc-replay-"))
    try:
        path = folder / "replay.db"
        shutil.copyfile(_migrated_template(), path)
        # Nothing of it need survive a crash: commits wait for no fsync (WAL, synchronous NORMAL).
        store = Store(make_engine(f"sqlite:///{path}", synchronous_full=False))
        try:
            load_fleet(store, fleet, now)
            # One tie-break for every replay (a server process's is its pid): a replay repeats.
            yield workloads.Wiring(store, BookingIndex(), Stock(salt=0), CountingIds())
        finally:
            store.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


__all__ = ["CountingIds", "scratch"]
