"""The ledger's events: bookings and their end, partition changes, reservations.

Each is a frozen dataclass on `domain.kernel.events.Event`; `domain.ops.event_types` registers
every context's types, for reading the log back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

from better_compute.domain.kernel.events import Event, payload_key


@dataclass(frozen=True, slots=True)
class LedgerBooked(Event):
    """Atoms were booked for an allocation (one event per booking row; `subject`: the allocation)."""

    TYPE: ClassVar[str] = "ledger.booked"
    COLUMNS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("atoms", "atom_id"),
        ("tenantId", "tenant_id"),
        ("poolId", "pool_id"),
        ("class", "class"),
        ("start", "starts_at"),
        ("end", "ends_at"),
        ("gpuId", "gpu_id"),
    )
    """Each payload key and the booking column it is written from, by the statements that book (the
    booking's one atom as a one-element list)."""

    atoms: tuple[str, ...]
    start: datetime
    end: datetime | None = None
    tenant_id: str | None = None
    pool_id: str | None = None
    cls: str | None = payload_key("class", None)
    gpu_id: str | None = None
    """The GPU of the booked atom (None in events written before it was recorded): a GPU is booked
    whole or in parts, never both at once (`domain.ledger.ledger.family_excludes`)."""


@dataclass(frozen=True, slots=True)
class LedgerReleased(Event):
    """An allocation's live bookings were cut at `at`; those not yet started were cancelled."""

    TYPE: ClassVar[str] = "ledger.released"
    at: datetime


@dataclass(frozen=True, slots=True)
class LedgerExtended(Event):
    """An allocation's live bookings were extended: they now end at `end` (`subject`: the allocation)."""

    TYPE: ClassVar[str] = "ledger.extended"
    end: datetime


@dataclass(frozen=True, slots=True)
class LedgerRebound(Event):
    """An allocation's bookings moved to other atoms of the same kind on the same node, windows
    kept (`subject`: the allocation): a Slurm cluster ran its holding job on cards other than those
    admission had booked, and the ledger follows Slurm (domain.fleet.slurm_holds). `moves` are
    (from atom, to atom, to atom's GPU)."""

    TYPE: ClassVar[str] = "ledger.rebound"
    moves: tuple[tuple[str, str, str], ...]
    at: datetime


@dataclass(frozen=True, slots=True)
class LedgerCancelled(Event):
    """An allocation's live bookings were cancelled before they started."""

    TYPE: ClassVar[str] = "ledger.cancelled"
    at: datetime


@dataclass(frozen=True, slots=True)
class PartitionBooked(Event):
    """A GPU's whole family of atoms was booked for a MIG layout change (`subject`: the GPU)."""

    TYPE: ClassVar[str] = "gpu.partition.booked"
    booking_id: str
    atoms: tuple[str, ...]
    start: datetime


@dataclass(frozen=True, slots=True)
class PartitionReleased(Event):
    """A partition change ended (`subject`: its allocation)."""

    TYPE: ClassVar[str] = "gpu.partition.released"
    at: datetime


@dataclass(frozen=True, slots=True)
class ReservationCreated(Event):
    TYPE: ClassVar[str] = "reservation.created"
    tenant_id: str
    pool_id: str
    atoms: tuple[str, ...]
    ends_at: datetime | None = None
    """The end it was admitted with (a release or a preemption moves the record's end, not this),
    so that a replay of the log asks for the same window; None: open-ended, or logged before it
    was recorded."""


@dataclass(frozen=True, slots=True)
class ReservationCancelled(Event):
    TYPE: ClassVar[str] = "reservation.cancelled"
    at: datetime


@dataclass(frozen=True, slots=True)
class ReservationReleased(Event):
    TYPE: ClassVar[str] = "reservation.released"
    at: datetime


@dataclass(frozen=True, slots=True)
class ReservationExtended(Event):
    """A reservation's end moved later (`reservations.extend`); `end` is its new end."""

    TYPE: ClassVar[str] = "reservation.extended"
    end: datetime
