"""The usage repository: what tenants held in a period, read from the ledger's bookings.

Usage is never stored: it is the ledger itself, read with `domain.metering.metering.held`'s rule (a live
booking from its start to its end, an open-ended one up to now, inside the period; a released one
was cut at its release, a cancelled one and a partition change bill nothing), so any period can be
read again and always agrees with the ledger.

Two reads. `totals` sums held time in the database, per tenant, pool and share (a month of a
million bookings arrives as a few rows), in whole microseconds so the sum is exact; `bookings` pages
through the bookings themselves, in id order, for `usage.list` and exports. A test holds both to
the domain rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from sqlalchemy import Connection, and_, bindparam, func, literal, select, text

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.shares import share
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.metering import (
    UNMETERED,
    HeldShape,
    HeldTotal,
    MeteredBooking,
    parse_share,
)
from better_compute.domain.metering.showback import CopyTotal
from better_compute.storage.kernel.db import UtcDateTime
from better_compute.storage.kernel.tables import atoms, bookings, pools
from better_compute.storage.ledger.ledger import booking_id, booking_key, sqlite_time

_BILLED = "b.state = 'live' AND b.tenant_id IS NOT NULL AND b.allocation_id NOT LIKE 'partition:%'"
"""Bookings that bill: live (a cancelled one never started), a tenant's, not a partition change."""

_IN_PERIOD = " AND b.starts_at < :until AND COALESCE(b.ends_at, :now) > :since AND b.starts_at < COALESCE(b.ends_at, :now)"
"""Bookings with some time held in [from, to): started before `to`, ending (or, open-ended, now)
after `from`, and an open-ended one started before now."""

_HELD_SQLITE = (
    "(CAST(strftime('%s', substr(hi, 1, 19)) AS INTEGER) - CAST(strftime('%s', substr(lo, 1, 19)) AS INTEGER))"
    " * 1000000 + CAST(substr(hi, 21, 6) AS INTEGER) - CAST(substr(lo, 21, 6) AS INTEGER)"
)
"""Microseconds from `lo` to `hi`, SQLite's stored times (`2030-01-01 10:00:00.000000`, always
to the microsecond): whole seconds from strftime over the text without its fraction (SQLite's date
functions keep milliseconds, so they would round `.999776` up to the next second), the rest from
the text, so nothing is a float."""

_CLIP_SQLITE = "MAX(b.starts_at, :since) AS lo, MIN(COALESCE(b.ends_at, :now), :until) AS hi"
_CLIP_PG = "GREATEST(b.starts_at, :since) AS lo, LEAST(COALESCE(b.ends_at, :now), :until) AS hi"
_HELD_PG = "(EXTRACT(EPOCH FROM hi - lo) * 1000000)::bigint"
"""PostgreSQL's EXTRACT answers numeric (exact) for an interval, which keeps microseconds."""


def _totals_sql(dialect: str, tenant: bool, pool: bool) -> str:
    clip, held = (_CLIP_PG, _HELD_PG) if dialect == "postgresql" else (_CLIP_SQLITE, _HELD_SQLITE)
    where = _BILLED + _IN_PERIOD
    if tenant:
        where += " AND b.tenant_id = :tenant"
    if pool:
        where += " AND b.pool_id = :pool"
    return (
        "SELECT tenant_id, pool_id, gpu_share, atom, SUM(" + held + ") AS held, COUNT(*) AS n FROM ("
        " SELECT b.tenant_id, b.pool_id, b.gpu_share,"
        " CASE WHEN b.gpu_share IS NULL THEN b.atom_id END AS atom, " + clip + " FROM bookings b"
        " WHERE " + where + ") clipped"
        " GROUP BY tenant_id, pool_id, gpu_share, atom"
    )


def _copy_totals_sql(dialect: str) -> str:
    """Held time of a tenant's copy spans in the period, per (endpoint, component, share, price):
    the bookings' clipping and exact microseconds, over `copy_spans` (an open span: up to now)."""
    clip, held = (_CLIP_PG, _HELD_PG) if dialect == "postgresql" else (_CLIP_SQLITE, _HELD_SQLITE)
    return (
        "SELECT endpoint, component, gpu_share, gpu_hour_price, SUM(" + held + ") AS held FROM ("
        " SELECT b.endpoint, b.component, b.gpu_share, b.gpu_hour_price, " + clip + " FROM ("
        " SELECT endpoint, component, gpu_share, gpu_hour_price, started_at AS starts_at,"
        " ended_at AS ends_at FROM copy_spans WHERE tenant_id = :tenant AND started_at < :until) b"
        " WHERE " + _IN_PERIOD.removeprefix(" AND ") + ") clipped"
        " GROUP BY endpoint, component, gpu_share, gpu_hour_price"
    )


_HELD_SHAPES_SQL = (
    "SELECT pool_id, cls, gpu_share, atom, n, COUNT(*) AS times FROM ("
    " SELECT b.pool_id, b.class AS cls, b.gpu_share,"
    " CASE WHEN b.gpu_share IS NULL THEN MIN(b.atom_id) END AS atom, COUNT(*) AS n FROM bookings b"
    " LEFT JOIN atoms a ON a.id = b.atom_id"
    " WHERE " + _BILLED + " AND b.starts_at < :until AND (b.ends_at IS NULL OR b.ends_at > :since)"
    " AND b.pool_id IS NOT NULL{allocations}"
    " GROUP BY b.pool_id, b.allocation_id, b.class, b.gpu_share,"
    " CASE WHEN b.class = 'gpu' THEN COALESCE(a.node_id, b.gpu_id) ELSE b.gpu_id END) held"
    " GROUP BY pool_id, cls, gpu_share, atom, n"
)
"""What one reservation or replica held on one GPU (on one node, for whole GPUs) in the period, as
(class, share, atoms), counted per pool: a month of bookings arrives as a few rows. A booking counts
when it started before the period's end and had not ended by its start (an open-ended one that
starts at the period's last instant too: a replica booked this instant is part of the record). A
booking written without its share (by hand) names an atom whose share is read as it is now."""


class SqlUsage:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def _times(self, period: Window, now: datetime) -> dict[str, Any]:
        times: dict[str, Any] = {"since": period.start, "until": period.end, "now": now}
        if self.conn.dialect.name != "postgresql":
            times = {k: sqlite_time(v) for k, v in times.items()}
        return times

    def totals(
        self, period: Window, now: datetime, tenant_id: str | None, pool_id: str | None
    ) -> list[HeldTotal]:
        """Held time per (tenant, pool, share) in the period, summed by the database."""
        sql = _totals_sql(self.conn.dialect.name, tenant_id is not None, pool_id is not None)
        params = {**self._times(period, now), "tenant": tenant_id, "pool": pool_id}
        found = list(self.conn.execute(text(sql), params))
        unshared = self._atom_shares([r[3] for r in found if r[2] is None])
        out: dict[tuple[str, str | None, Fraction], list[int]] = {}
        for tenant, pool, shared, atom, held, count in found:
            key = (tenant, pool, parse_share(shared) if shared is not None else unshared[atom])
            summed = out.setdefault(key, [0, 0])
            summed[0] += int(held)
            summed[1] += int(count)
        return [HeldTotal(t, p, s, held, n) for (t, p, s), (held, n) in out.items()]

    def held_shapes(
        self, period: Window, now: datetime, allocations: Sequence[str] | None = None
    ) -> list[HeldShape]:
        """What each pool's reservations and replicas held in the period, by size (`HeldShape`);
        only those of `allocations` when given."""
        if allocations is None:
            stmt = text(_HELD_SHAPES_SQL.format(allocations=""))
            params = self._times(period, now)
        else:
            stmt = text(_HELD_SHAPES_SQL.format(allocations=" AND b.allocation_id IN :allocations"))
            stmt = stmt.bindparams(bindparam("allocations", expanding=True))
            params = {**self._times(period, now), "allocations": list(allocations)}
        found = list(self.conn.execute(stmt, params))
        unshared = self._atom_shares([r[3] for r in found if r[2] is None])
        out: dict[tuple[str, str, Fraction, int], int] = {}
        for pool, cls, shared, atom, n, times in found:
            key = (pool, cls, parse_share(shared) if shared is not None else unshared[atom], int(n))
            out[key] = out.get(key, 0) + int(times)
        return [HeldShape(p, c, s, n, times) for (p, c, s, n), times in sorted(out.items())]

    def copy_totals(self, period: Window, now: datetime, tenant_id: str) -> list[CopyTotal]:
        """Held time of the tenant's component copies in the period, summed by the database."""
        sql = _copy_totals_sql(self.conn.dialect.name)
        found = self.conn.execute(text(sql), {**self._times(period, now), "tenant": tenant_id})
        return [
            CopyTotal(
                endpoint, component, parse_share(shared), None if price is None else Decimal(price), int(held)
            )
            for endpoint, component, shared, price, held in found
            if int(held) > 0
        ]

    def bookings(
        self,
        period: Window,
        now: datetime,
        tenant_id: str | None,
        pool_id: str | None,
        after: str | None,
        limit: int,
    ) -> list[MeteredBooking]:
        """Bookings with time held in the period, in id order, after the booking `after`."""
        ends = func.coalesce(bookings.c.ends_at, literal(now, UtcDateTime()))
        start, end = literal(period.start, UtcDateTime()), literal(period.end, UtcDateTime())
        where: list[Any] = [
            bookings.c.state == "live",
            bookings.c.tenant_id.is_not(None),
            bookings.c.allocation_id.not_like("partition:%"),
            bookings.c.starts_at < end,
            ends > start,
            bookings.c.starts_at < ends,
        ]
        if tenant_id is not None:
            where.append(bookings.c.tenant_id == tenant_id)
        if pool_id is not None:
            where.append(bookings.c.pool_id == pool_id)
        key = booking_key(after) if after is not None else None
        if key is not None:
            where.append(bookings.c.id > key)
        stmt = (
            select(
                bookings.c.id,
                bookings.c.allocation_id,
                bookings.c.tenant_id,
                bookings.c.pool_id,
                bookings.c.atom_id,
                bookings.c["class"],
                func.coalesce(bookings.c.gpu_share, atoms.c.gpu_share).label("share"),
                bookings.c.starts_at,
                bookings.c.ends_at,
                atoms.c.attributes,
                pools.c.meter,
            )
            .select_from(
                bookings.outerjoin(atoms, atoms.c.id == bookings.c.atom_id).outerjoin(
                    pools, pools.c.id == bookings.c.pool_id
                )
            )
            .where(and_(*where))
            .order_by(bookings.c.id)
            .limit(limit)
        )
        return [_metered(dict(r._mapping)) for r in self.conn.execute(stmt)]

    def _atom_shares(self, atom_ids: Sequence[str]) -> dict[str, Fraction]:
        """The share of each atom as it is now, for bookings written without theirs."""
        if not atom_ids:
            return {}
        stmt = select(atoms.c.id, atoms.c["class"], atoms.c.attributes, atoms.c.gpu_share).where(
            atoms.c.id.in_(sorted(set(atom_ids)))
        )
        found = {r[0]: _share_of(r[1], r[2], r[3]) for r in self.conn.execute(stmt)}
        return {a: found.get(a, Fraction(1)) for a in atom_ids}


def _share_of(cls: str | None, attributes: Mapping[str, Any] | None, stored: str | None) -> Fraction:
    if stored is not None:
        return parse_share(stored)
    probe = Atom(
        id="",
        gpu_id="",
        node="",
        cls="gpu.mig" if cls == "gpu.mig" else "gpu.slot" if cls == "gpu.slot" else "gpu",
        key="",
        bookable=False,
        partition_pending=False,
        pool_id=None,
        numa_node=None,
        nvlink_domain=None,
        attributes=dict(attributes or {}),
    )
    return share(probe)


def _metered(r: Mapping[str, Any]) -> MeteredBooking:
    attributes = r["attributes"] or {}
    model = attributes.get("gpuModel")
    shared = r["share"]
    return MeteredBooking(
        booking_id=booking_id(r["id"]),
        reservation_id=r["allocation_id"],
        tenant_id=r["tenant_id"],
        pool_id=r["pool_id"],
        atom_id=r["atom_id"],
        cls=r["class"],
        gpu_model=model if isinstance(model, str) else None,
        meter=r["meter"] or UNMETERED,
        share=parse_share(shared) if shared is not None else _share_of(r["class"], attributes, None),
        span=Window(r["starts_at"], r["ends_at"]),
    )


__all__ = ["SqlUsage"]
