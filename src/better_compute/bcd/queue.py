"""The on-disk report queue: every report bcd makes is written here before it is sent, and removed
only once the server accepted it, so a report survives a crash, a restart or a server outage.

Each entry is one file, `<number>-<reportId>.json` holding `{"reportId", "report"}`, written to a
temporary name and renamed (never half a file). Entries are sent in number order, so a node's
`AllocationBound` always reaches the server before the `AllocationReleased` that follows it. The
`reportId` (a uuid made when the report is queued) is what lets the server apply a report once
however often it is resent: a resend is signed again, with a new sequence number.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Queued:
    """One queued report: its id, the body (`{"kind": ...}`) and its file."""

    report_id: str
    report: Mapping[str, Any]
    path: Path


class ReportQueue:
    """The queue under `directory` (`<state-dir>/queue`)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = threading.Lock()
        numbers = [self._number(p) for p in self.directory.glob("*.json")]
        self._next = max(numbers, default=0) + 1

    @staticmethod
    def _number(path: Path) -> int:
        head = path.name.split("-", 1)[0]
        return int(head) if head.isdigit() else 0

    def put(self, report: Mapping[str, Any]) -> Queued:
        """Queue `report` under a new `reportId`; it is on disk when this returns."""
        report_id = str(uuid.uuid4())
        with self._lock:
            number = self._next
            self._next += 1
        path = self.directory / f"{number:012d}-{report_id}.json"
        partial = path.with_name(f".{path.name}.partial")
        data = json.dumps({"reportId": report_id, "report": dict(report)}, sort_keys=True).encode()
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, path)
        return Queued(report_id, dict(report), path)

    def pending(self) -> list[Queued]:
        """The queued reports, oldest first."""
        found: list[Queued] = []
        for path in sorted(self.directory.glob("*.json"), key=lambda p: (self._number(p), p.name)):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            found.append(Queued(str(record["reportId"]), record["report"], path))
        return found

    def done(self, entry: Queued) -> None:
        """The server accepted `entry` (or refused it for good): it leaves the queue."""
        entry.path.unlink(missing_ok=True)

    def __len__(self) -> int:
        return len(list(self.directory.glob("*.json")))
