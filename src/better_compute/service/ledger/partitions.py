"""`partitions.book` and `partitions.release` (admin): the atom rule as a public primitive.

An operator books a GPU's whole family of atoms, parent included, for a maintenance window, as a
layout change does (docs/concepts.md#the-atom-rule): while it holds, nothing new lands on the GPU.
The ledger's `book_partition_change` decides; this module checks the caller and the window.
"""

from __future__ import annotations

from datetime import datetime

from better_compute.domain.ledger.commands import BookPartition
from better_compute.domain.ledger.ledger import partition_window
from better_compute.domain.tenancy.credentials import Principal, require_admin
from better_compute.domain.tenancy.tenancy import check_ref
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ledger.ledger import (
    PartitionChange,
    PartitionConflict,
    PartitionEnded,
    book_partition_change,
    release_partition,
)
from better_compute.service.ledger.ports import LedgerTx


def book(
    store: StorePort[LedgerTx], principal: Principal, command: BookPartition, now: datetime
) -> PartitionChange | PartitionConflict:
    """Hold every atom of the GPU for the window, or say from when the whole family is free (a
    result, not an error: the seed's `{status: conflict, freeFrom}`). An unknown GPU is NOT_FOUND.
    Audited by `gpu.partition.booked`."""
    require_admin(principal, "partitions.book")
    gpu_id = check_ref(command.gpu_id, "gpuId")
    window = partition_window(command.start, command.end, command.duration, now)
    return book_partition_change(store, gpu_id, window, now)


def release(
    store: StorePort[LedgerTx], principal: Principal, booking_id: str, now: datetime
) -> PartitionEnded:
    """End a partition booking now (`service.ledger.ledger.release_partition` says what is refused).
    Audited by `gpu.partition.released`."""
    require_admin(principal, "partitions.release")
    return release_partition(store, check_ref(booking_id, "bookingId"), now)
