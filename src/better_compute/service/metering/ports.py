"""Metering's ports: what tenants held in a period, and prices."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.billing import Price
from better_compute.domain.metering.metering import HeldShape, HeldTotal, MeteredBooking
from better_compute.domain.metering.showback import CopyTotal
from better_compute.service.ledger.ports import LedgerTx


class UsageRepo(Protocol):
    """What tenants held in a period, read from the ledger (`domain.metering.metering.held`'s rule)."""

    def totals(
        self, period: Window, now: datetime, tenant_id: str | None, pool_id: str | None
    ) -> list[HeldTotal]:
        """Held time per (tenant, pool, share), summed by the database: a bill's input."""
        ...

    def bookings(
        self,
        period: Window,
        now: datetime,
        tenant_id: str | None,
        pool_id: str | None,
        after: str | None,
        limit: int,
    ) -> list[MeteredBooking]:
        """Bookings with time held in the period, in id order after the booking id `after`."""
        ...

    def held_shapes(
        self, period: Window, now: datetime, allocations: Sequence[str] | None = None
    ) -> list[HeldShape]:
        """The sizes of what tenants' bookings held in the period, per pool, counted by the database:
        each reservation's or replica's atoms grouped per GPU (whole GPUs: per node); only those of
        `allocations` when given (each allocation's holdings are its own: the counts of a set of
        allocations add up to those of all)."""
        ...

    def copy_totals(self, period: Window, now: datetime, tenant_id: str) -> list[CopyTotal]:
        """Time the tenant's component copies held partitions in the period, summed by the database
        per (endpoint, component, share, price per GPU-hour): showback's input."""
        ...


class PriceRepo(Protocol):
    def all(self) -> list[Price]:
        """Every meter's price, by meter."""
        ...

    def put(self, price: Price) -> None:
        """Create or replace the meter's price."""
        ...


class MeteringTx(LedgerTx, Protocol):
    """The slice of a transaction metering's use cases use: the ledger's, usage and prices."""

    @property
    def usage(self) -> UsageRepo: ...

    @property
    def prices(self) -> PriceRepo: ...
