"""The booking ledger's rules that need no database: windows, when an atom is next free, the atom rule.

The database enforces exclusivity (docs/concepts.md#the-ledger); this module decides what to tell a
user when it refuses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from better_compute.domain.choose import earliest_common_start
from better_compute.domain.timewin import Window


@dataclass(frozen=True)
class Booking:
    """One claim on one atom."""

    id: str
    atom_id: str
    gpu_id: str
    allocation_id: str
    tenant_id: str | None
    span: Window
    state: str = "live"


def earliest_free(busy: Iterable[Window], wanted: Window) -> datetime | None:
    """The earliest start at or after `wanted.start` at which a window of `wanted`'s length is free.

    None when nothing is ever free again (an open-ended booking, or an open-ended request that can
    only follow bookings that never end).
    """
    return earliest_common_start({"atom": list(busy)}, 1, wanted.duration, wanted.start)


def partition_allocation_id(gpu_id: str, start: datetime) -> str:
    """The allocation id of a partition change: `partition:<gpuId>:<start>` (ISO 8601 UTC start)."""
    return f"partition:{gpu_id}:{start.astimezone(UTC).isoformat().replace('+00:00', 'Z')}"
