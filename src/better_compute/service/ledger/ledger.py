"""Ledger use cases: book atoms, end or cancel bookings, and the atom rule's partition changes.

A refusal from the store (an overlap the database caught) is turned here into a `BookingConflict` that
names the atom and the earliest time it is free; the write transaction has already rolled back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from better_compute.domain.kernel.errors import BookingConflict, InvalidInput, InvalidState, NotFound
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.events import LedgerReleased, PartitionBooked, PartitionReleased
from better_compute.domain.ledger.ledger import (
    Booking,
    earliest_free,
    is_partition_change,
    partition_allocation_id,
)
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ledger.ports import LedgerTx, NotBookable, Overlap


@dataclass(frozen=True)
class PartitionChange:
    """A held partition change: `booking_id` is the handle to release it with."""

    booking_id: str
    gpu_id: str
    span: Window
    atom_ids: tuple[str, ...]
    status: str = "booked"


@dataclass(frozen=True)
class PartitionConflict:
    """Something of the GPU is booked in the window; the whole family is free from `free_from`."""

    gpu_id: str
    free_from: datetime | None
    status: str = "conflict"
    span: Window | None = None
    """The window asked for."""


def _conflict(
    store: StorePort[LedgerTx], atom_ids: Sequence[str], span: Window, hint: str | None
) -> BookingConflict:
    with store.read() as tx:
        candidates = [hint] if hint else list(atom_ids)
        for atom_id in candidates:
            busy = tx.ledger.taking_spans([atom_id], span.start)  # its own, and its GPU family's
            if any(b.overlaps(span) for b in busy):
                return BookingConflict(atom_id, earliest_free(busy, span))
    # The clash was with a booking that has since gone: report the first atom, free now.
    return BookingConflict(candidates[0], span.start)


def book(
    store: StorePort[LedgerTx],
    atom_ids: Sequence[str],
    span: Window,
    allocation_id: str,
    tenant_id: str | None,
    now: datetime,
) -> int:
    """All-or-nothing: every atom is booked for the window, or none is."""
    if not atom_ids:
        raise InvalidInput("book at least one atom", {"field": "atomIds"})
    try:
        with store.begin(single_statement=True) as tx:
            return tx.ledger.book(atom_ids, span, allocation_id, tenant_id, now)
    except Overlap as clash:
        raise _conflict(store, atom_ids, span, clash.atom_id) from None
    except NotBookable as refused:
        raise InvalidState(
            f"atom {refused.atom_ids[0]} cannot be booked (unknown, a parent of split GPU, unhealthy, "
            "missing from its node, or its GPU is changing MIG mode)",
            {"atomIds": refused.atom_ids},
        ) from None


def release(store: StorePort[LedgerTx], allocation_id: str, now: datetime) -> int:
    """End the allocation now: the remaining window frees; bookings not yet started are cancelled."""
    with store.begin() as tx:
        if not tx.ledger.allocation_bookings(allocation_id):
            raise NotFound(f"no bookings for allocation {allocation_id}", {"allocationId": allocation_id})
        return tx.ledger.end_allocation(allocation_id, now, LedgerReleased(allocation_id, now))


def cancel(store: StorePort[LedgerTx], allocation_id: str, now: datetime) -> int:
    """Cancel before the start; a started allocation must be released instead."""
    with store.begin() as tx:
        found = tx.ledger.allocation_bookings(allocation_id)
        if not found:
            raise NotFound(f"no bookings for allocation {allocation_id}", {"allocationId": allocation_id})
        live = [b for b in found if b.state == "live"]
        if any(b.span.start <= now for b in live):
            raise InvalidState(
                f"allocation {allocation_id} has started; release it instead of cancelling",
                {"allocationId": allocation_id},
            )
        return tx.ledger.cancel_allocation(allocation_id, now)


def book_partition_change(
    store: StorePort[LedgerTx], gpu_id: str, during: Window, now: datetime
) -> PartitionChange | PartitionConflict:
    """The atom rule: book every atom of the GPU, parent included, or say when the family is free."""
    allocation_id = partition_allocation_id(gpu_id, during.start)
    with store.read() as tx:
        if tx.gpus.get(gpu_id) is None:
            raise NotFound(f"GPU {gpu_id} not found", {"gpuId": gpu_id})
        family = tx.ledger.family_atom_ids(gpu_id)
    try:
        with store.begin() as tx:
            tx.ledger.book(family, during, allocation_id, None, now, require_bookable=False)
            tx.events.append(PartitionBooked(gpu_id, allocation_id, tuple(family), during.start), now)
    except Overlap:
        with store.read() as tx:
            busy = tx.ledger.busy_spans(family, during.start)
        return PartitionConflict(gpu_id, earliest_free(busy, during), span=during)
    return PartitionChange(allocation_id, gpu_id, during, tuple(family))


@dataclass(frozen=True)
class PartitionEnded:
    """A partition change released: its handle, its GPU and how many of its bookings changed (none
    when it had ended already, so releasing twice is harmless)."""

    booking_id: str
    gpu_id: str
    ended: int


def release_partition_change(store: StorePort[LedgerTx], booking_id: str, now: datetime) -> int:
    """End a partition change; accepts its handle or the id of any one of its bookings."""
    return release_partition(store, booking_id, now).ended


def release_partition(store: StorePort[LedgerTx], booking_id: str, now: datetime) -> PartitionEnded:
    """End a partition change made by `book_partition_change`, given its handle or the id of one of
    its bookings: bookings that have started end now, later ones are cancelled.

    Refused (INVALID_INPUT) for a booking or allocation that is not a partition change (a tenant's is
    ended through its reservation or workload), and (INVALID_STATE) for the layout gate's own hold of
    a GPU under a layout change: the gate releases that one when the change is applied or undone,
    and ending it early would let tenants book atoms about to disappear.
    """
    with store.begin() as tx:
        allocation_id = (
            booking_id if is_partition_change(booking_id) else tx.ledger.booking_allocation(booking_id)
        )
        if allocation_id is None and tx.ledger.allocation_bookings(booking_id):
            allocation_id = booking_id  # an allocation's id (a reservation's), refused below
        if allocation_id is None:
            raise NotFound(f"no partition change {booking_id}", {"bookingId": booking_id})
        if not is_partition_change(allocation_id):
            raise InvalidInput(
                f"{booking_id} is not a partition change: it belongs to allocation {allocation_id};"
                " a reservation is ended with reservations.release, a workload with workloads.delete",
                {"field": "bookingId", "bookingId": booking_id, "allocationId": allocation_id},
            )
        found: list[Booking] = tx.ledger.allocation_bookings(allocation_id)
        if not found:
            raise NotFound(f"no partition change {booking_id}", {"bookingId": booking_id})
        gpu_id = found[0].gpu_id
        gpu = tx.gpus.get(gpu_id)
        gate = None if gpu is None else tx.mig_layouts.of_nodes([gpu.node_id]).get(gpu.node_id)
        if (
            gpu is not None
            and gate is not None
            and gate.scheduled_from is not None
            and partition_allocation_id(gpu_id, gate.scheduled_from) == allocation_id
        ):
            raise InvalidState(
                f"{allocation_id} is the hold of node {gpu.node_id}'s MIG layout change; it ends when"
                " the change is applied or undone (docs/layouts.md)",
                {"bookingId": allocation_id, "node": gpu.node_id},
            )
        ended = tx.ledger.end_allocation(allocation_id, now, PartitionReleased(allocation_id, now))
        return PartitionEnded(allocation_id, gpu_id, ended)
