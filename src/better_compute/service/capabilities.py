"""Capability requests: the offers a project may choose from, and the resolution of a workload's
shape asked by capability (the rules: `domain.placement.capability`).

The offers are read from the booking index: every bookable atom of the pools the project may use
(its own, and those offered to it with a row of the atom's class above 0), grouped by kind, with
what a device of the kind gives, its price (its share of a GPU times its pool's meter price, the
dearest pool's where several hold it) and how many are free now outside cordoned nodes. A
resolution reads them once, at the workload's creation or in a preview; a fleet's atoms are walked
then, not on every placement.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from better_compute.domain.atoms import Atom
from better_compute.domain.errors import NotFound
from better_compute.domain.metering import share
from better_compute.domain.placement.capability import (
    Kind,
    Offer,
    Resolution,
    gives,
    kind_of,
    price_text,
    resolve,
)
from better_compute.domain.quota import effective_limit
from better_compute.domain.workloads import WorkloadSpec
from better_compute.service.booking_index import BookingIndex
from better_compute.service.placement_stock import Stock
from better_compute.service.ports import Tx


@dataclass
class _Gathered:
    sample: Atom
    share: Fraction
    price: Decimal | None = None
    currency: str | None = None
    unpriced: str | None = None
    free: int = 0
    pools: set[str] = field(default_factory=set)


def offers_in(tx: Tx, index: BookingIndex, stock: Stock, tenant_id: str, now: datetime) -> list[Offer]:
    """Every kind of device the tenant may use now, with what it gives and costs (module docstring)."""
    catalog = stock.catalog(tx, index)
    rules = stock.rules(tx, index, tenant_id, "")
    offered: dict[str, dict[str, int]] = {}
    for q in rules.quotas:
        offered.setdefault(q.pool_id, {})[str(q.cls)] = q.limit
    claimed = index.claimed()
    kinds: dict[Kind, _Gathered] = {}
    for pool in catalog.seats.values():
        limits = offered.get(pool.id, {})
        if pool.owner_tenant_id != tenant_id and not limits:
            continue
        atoms = [a for a in index.pool_atoms(tx, pool.id).atoms.values() if a.bookable]
        busy, _ = index.busy_from([a.id for a in atoms], now)
        price = catalog.prices.get(pool.meter)
        for atom in atoms:
            limit = effective_limit(atom.cls, tenant_id, pool.owner_tenant_id, limits)
            kind = kind_of(atom)
            if kind is None or limit == 0:
                continue
            found = kinds.get(kind)
            if found is None:
                found = kinds[kind] = _Gathered(atom, share(atom))
            if pool.id not in found.pools:
                found.pools.add(pool.id)
                if price is None:
                    found.unpriced = found.unpriced or pool.meter
                else:
                    each = Decimal(found.share.numerator) / Decimal(found.share.denominator)
                    cost = each * Decimal(price.per_hour)
                    found.price = cost if found.price is None else max(found.price, cost)
                    found.currency = found.currency or price.currency
            if atom.id not in busy and atom.id not in claimed and atom.node not in catalog.cordoned:
                found.free += 1
    out = []
    for kind, g in kinds.items():
        memory, slices = gives(kind, g.sample)
        out.append(
            Offer(
                kind=kind,
                memory_gib=memory,
                compute_slices=slices,
                share=g.share,
                price_per_hour=None if g.unpriced else g.price,
                currency=g.currency,
                free=g.free,
                unpriced=g.unpriced,
            )
        )
    return out


def resolve_in(
    tx: Tx, index: BookingIndex, stock: Stock, spec: WorkloadSpec, now: datetime
) -> tuple[WorkloadSpec, Resolution | None]:
    """The spec with its capability resolved to an implicit device class, and the resolution
    (None for a spec that names its class). Nothing the tenant may use gives it: NOT_FOUND, with
    every offer and why it was refused."""
    if spec.capability is None or spec.device_class:
        return spec, None
    resolution = resolve(spec.capability, offers_in(tx, index, stock, spec.tenant_id, now), spec.device_count)
    if resolution.chosen is None:
        raise nothing_gives(resolution)
    return replace(spec, device_class=resolution.chosen.kind.class_name), resolution


def nothing_gives(resolution: Resolution) -> NotFound:
    reasons = Counter(r.reason for r in resolution.refused)
    said = "; ".join(f"{n} kind(s): {why}" for why, n in reasons.most_common(3)) or "it may use no device"
    return NotFound(
        f"no kind of device the project may use gives {resolution.capability.document()} ({said})"[:500],
        {
            "capability": resolution.capability.document(),
            "refused": [
                {"deviceClass": r.offer.kind.class_name, "kind": r.offer.kind.name, "reason": r.reason}
                for r in resolution.refused[:20]
            ],
        },
    )


__all__ = ["nothing_gives", "offers_in", "price_text", "resolve_in"]
