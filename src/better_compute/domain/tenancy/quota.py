"""Quota: how many atoms of one class a tenant may hold at once in one pool.

The rule as users read it: docs/concepts.md#quotas-iam-policies-and-tenancy.

Quota is kept per (tenant, pool, atom class) because a MIG instance and a whole GPU are not the
same amount of hardware: a `gpu.mig` row limits MIG instances, a `gpu.slot` row limits slots, and
neither spends the other's. A pool's owner may use its whole GPUs without a row (the owner paid for
them), but fractions need an explicit row even for the owner, so that splitting a pool never lets
anyone take more pieces than an operator decided. Every other tenant needs rows, which `pools.offer`
or `quotas.set` create.

Which bookings count as "in use" (those of the tenant, of that class, in that pool, overlapping
the requested window) is the caller's query; `in_use` below takes their peak concurrent holding
over the window from plain values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, cast

from better_compute.domain.kernel.atom_classes import ATOM_CLASSES, AtomClass, check_atom_class
from better_compute.domain.kernel.errors import InvalidInput, QuotaExceeded
from better_compute.domain.kernel.timewin import Window


def parse_quota_limits(raw: object, field: str = "quota") -> dict[AtomClass, int]:
    """A quota map such as `{"gpu": 8, "gpu.mig": 14, "gpu.slot": 0}`: known classes, limits >= 0."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(
            f"{field} must be an object mapping atom classes to limits, such as {{'gpu': 8}}",
            {"field": field},
        )
    limits: dict[AtomClass, int] = {}
    for name, limit in raw.items():
        cls = check_atom_class(name, f"{field}.{name}")
        limits[cls] = check_limit(limit, f"{field}.{cls}")
    return limits


MAX_LIMIT = 2**31 - 1
"""The largest limit a quota row stores (a 32-bit integer column)."""


def check_limit(limit: object, field: str = "limit") -> int:
    """One quota limit: an integer from 0 (a row that allows nothing) to MAX_LIMIT."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= MAX_LIMIT:
        raise InvalidInput(
            f"{field} must be an integer from 0 to {MAX_LIMIT}, not {limit!r}", {"field": field}
        )
    return limit


def effective_limit(
    cls: AtomClass, tenant_id: str, owner_tenant_id: str, limits: Mapping[str, int]
) -> int | None:
    """The tenant's limit for `cls` in the pool, or None when unlimited.

    A row always wins. Without one, the owner's whole GPUs are unlimited; everything else is 0.
    """
    if cls in limits:
        return limits[cls]
    if cls == "gpu" and tenant_id == owner_tenant_id:
        return None
    return 0


def in_use(bookings: Iterable[tuple[str, Window]], window: Window) -> dict[AtomClass, int]:
    """The tenant's peak holding per class in the pool during `window`, from (class, window) pairs.

    A limit is on what a tenant may hold at once, so two bookings that follow each other inside the
    window count as one: the answer is the largest number of that class's bookings live at any one
    instant of the window. A new reservation holds its atoms over the whole window, so peak + wanted
    is exactly what the tenant would hold at the busiest instant. Windows are half-open: a booking
    that ends as another starts is never live beside it. Costs O(k log k) in the tenant's own k
    bookings, never in the pool.
    """
    return spans_in_use(((cls, b.start, b.end) for cls, b in bookings), window)


def spans_in_use(
    spans: Iterable[tuple[str, datetime, datetime | None]], window: Window
) -> dict[AtomClass, int]:
    """`in_use` from (class, start, end) triples, each a window already checked (start before end,
    both in UTC; end None never ends): admission counts a tenant's thousands of bookings on every
    reservation, and building a checked `Window` for each one was most of its time."""
    lo, hi = window.start, window.end
    edges: dict[str, list[tuple[datetime, int]]] = {}
    for cls, start, end in spans:
        if (end is not None and end <= lo) or (hi is not None and start >= hi) or cls not in ATOM_CLASSES:
            continue
        marks = edges.get(cls)
        if marks is None:
            marks = edges[cls] = []
        marks.append((max(lo, start), 1))
        until = end if hi is None or (end is not None and end < hi) else hi
        if until is not None:
            marks.append((until, -1))
    counts: dict[AtomClass, int] = {}
    for cls, marks in edges.items():
        marks.sort()  # at one instant an end (-1) sorts before a start (+1): half-open windows
        live = peak = 0
        for _, step in marks:
            live += step
            peak = max(peak, live)
        counts[cast(AtomClass, cls)] = peak
    return counts


def check_quota(
    tenant_id: str,
    owner_tenant_id: str,
    limits: Mapping[str, int],
    in_use: Mapping[str, int],
    requested: Mapping[str, int],
    *,
    pool_id: str | None = None,
) -> None:
    """Refuse a request that would take the tenant past its quota in the pool, class by class.

    `limits` are the tenant's rows in the pool, `in_use` what it already holds in the window,
    `requested` what this reservation adds. Classes are checked in the order gpu, gpu.mig, gpu.slot,
    so the first refusal is stable. A stranger to the pool (no rows, not the owner) gets
    QUOTA_EXCEEDED, not FORBIDDEN: access to a pool is quota, given by `pools.offer`.
    """
    in_pool = f" in pool {pool_id}" if pool_id is not None else ""
    for cls in ATOM_CLASSES:
        wanted = requested.get(cls, 0)
        if wanted <= 0:
            continue
        held = in_use.get(cls, 0)
        limit = effective_limit(cls, tenant_id, owner_tenant_id, limits)
        details: dict[str, Any] = {
            "class": cls,
            "limit": limit if cls in limits else None,
            "inUse": held,
            "requested": wanted,
            "tenantId": tenant_id,
        }
        if pool_id is not None:
            details["poolId"] = pool_id
        if limit is None:
            continue
        if cls not in limits:
            if not limits and tenant_id != owner_tenant_id:
                message = f"tenant {tenant_id} has no quota{in_pool}; the pool has to be offered to it"
            else:
                message = f"no {cls} quota{in_pool} for tenant {tenant_id}"
                if cls != "gpu":
                    message += f"; fractional atoms need an explicit {cls} row"
            raise QuotaExceeded(message, details)
        if held + wanted > limit:
            raise QuotaExceeded(
                f"quota exceeded for {cls}{in_pool}: {held} in use + {wanted} requested > limit {limit}",
                details,
            )


def held_at(
    bookings: Iterable[tuple[str | None, str | None, str, Window]], at: datetime
) -> dict[tuple[str, str, str], int]:
    """Atoms held at the instant `at`, per (tenant, pool, class), from (tenant, pool, class, window)
    of live bookings: what `quotas.list` shows as `used` beside each limit."""
    counts: dict[tuple[str, str, str], int] = {}
    for tenant_id, pool_id, cls, booked in bookings:
        if tenant_id is None or pool_id is None or not booked.contains(at):
            continue
        key = (tenant_id, pool_id, cls)
        counts[key] = counts.get(key, 0) + 1
    return counts
