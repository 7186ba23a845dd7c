"""The ledger's records: a reservation as admitted, and a live booking as the booking index keeps it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class Reservation:
    """A reservation as admitted: what was asked (`devices`, as sent), its window and its counts."""

    id: str
    tenant_id: str
    pool_id: str
    status: str
    starts_at: datetime
    ends_at: datetime | None
    devices: tuple[Mapping[str, Any], ...]
    gpu_count: int
    gpu_slices: int
    counts: Mapping[str, int]
    fingerprint: str
    created_at: datetime
    idempotency_key: str | None = None
    generation: int = 1
    preemptible: bool = False
    """Made with `preemptible: true`: a workload placement cannot fit may end it early."""


@dataclass(frozen=True, slots=True)
class LiveBooking:
    """A live booking as the booking index keeps it."""

    allocation_id: str
    atom_id: str
    starts_at: datetime
    ends_at: datetime | None
    tenant_id: str | None
    pool_id: str | None
    cls: str
    gpu_id: str | None = None
    """The GPU of the atom: its family is booked by one holder at a time (`domain.ledger.ledger`)."""
