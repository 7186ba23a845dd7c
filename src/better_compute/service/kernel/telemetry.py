"""What use cases report while they work, for /metrics: the few facts no table keeps.

A reservation's retries are invisible from outside the use case: the ledger refusing a write because
another booking took an atom first (`Overlap`) is decided again inside `reservations.create`. The
use case tells a `Telemetry` so; the API's metrics count it (api/metrics.py). Reporting is a call on
an object in memory, never I/O, so it costs admission nothing it would notice.
"""

from __future__ import annotations

from typing import Protocol


class Telemetry(Protocol):
    def ledger_conflict(self) -> None:
        """The ledger refused a booking because an atom was already booked for that time."""
        ...


class Silent:
    """Telemetry that reports nowhere: for callers without metrics (the fleet loader, tests)."""

    def ledger_conflict(self) -> None:
        return None


SILENT = Silent()
