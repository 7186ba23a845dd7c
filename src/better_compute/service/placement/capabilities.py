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

import json
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.shares import share
from better_compute.domain.kernel.errors import NotFound
from better_compute.domain.kernel.selectors import document
from better_compute.domain.metering.billing import Price
from better_compute.domain.placement.capability import (
    Kind,
    Offer,
    Resolution,
    floor_denial,
    gives,
    implicit_class,
    kind_of,
    named_by_class,
    others_floors,
    parse_capability,
    price_text,
    resolve,
)
from better_compute.domain.placement.device_classes import DeviceClass, belongs_to
from better_compute.domain.tenancy.quota import effective_limit
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.ledger.ports import LedgerTx
from better_compute.service.placement.placement_stock import Stock
from better_compute.service.placement.ports import PlacementTx


@dataclass
class _Gathered:
    sample: Atom
    share: Fraction
    price: Decimal | None = None
    currency: str | None = None
    unpriced: str | None = None
    free: int = 0
    pools: set[str] = field(default_factory=set)
    covers: tuple[str, ...] = ()
    clusters: set[str] = field(default_factory=set)


def offers_in(
    tx: PlacementTx, index: BookingIndex, stock: Stock, tenant_id: str, now: datetime
) -> list[Offer]:
    """Every kind of device the tenant may use now, with what it gives and costs (module docstring)."""
    catalog = stock.catalog(tx, index)
    offered: dict[str, dict[str, int]] = {}
    for q in stock.rules(tx, index, tenant_id, "").quotas:
        offered.setdefault(q.pool_id, {})[str(q.cls)] = q.limit
    kinds: dict[Kind, _Gathered] = {}
    named = tx.device_classes.all()
    for pool in catalog.seats.values():
        limits = offered.get(pool.id, {})
        if pool.owner_tenant_id != tenant_id and not limits:
            continue
        price = catalog.prices.get(pool.meter)
        _gather(
            kinds,
            tx,
            index,
            pool.id,
            pool.meter,
            price,
            tenant_id,
            pool.owner_tenant_id,
            limits,
            now,
            named,
            catalog.cordoned,
            pool.cluster_id,
        )
    return [_offer(kind, g) for kind, g in kinds.items()]


def pool_offers(
    tx: LedgerTx,
    index: BookingIndex,
    pool_id: str,
    tenant_id: str,
    owner: str,
    limits: Mapping[str, int],
    now: datetime,
) -> list[Offer]:
    """The kinds of device of one pool the tenant may book (a reservation's request by capability:
    a reservation is in one pool), with what each gives and costs there."""
    pool = tx.pools.get(pool_id)
    meter = pool.meter if pool is not None else ""
    price = next((p for p in tx.prices.all() if p.meter == meter), None)
    kinds: dict[Kind, _Gathered] = {}
    cluster = pool.cluster_id if pool is not None else None
    _gather(
        kinds,
        tx,
        index,
        pool_id,
        meter,
        price,
        tenant_id,
        owner,
        limits,
        now,
        tx.device_classes.all(),
        (),
        cluster,
    )
    return [_offer(kind, g) for kind, g in kinds.items()]


def _gather(
    kinds: dict[Kind, _Gathered],
    tx: LedgerTx,
    index: BookingIndex,
    pool_id: str,
    meter: str,
    price: Price | None,
    tenant_id: str,
    owner: str,
    limits: Mapping[str, int],
    now: datetime,
    named: Sequence[DeviceClass],
    cordoned: Collection[str] = frozenset(),
    cluster_id: str | None = None,
) -> None:
    """Add one pool's bookable atoms the tenant may book to `kinds`: each kind's devices, the
    named classes they belong to, its price there (the dearest of its pools'), and those free now."""
    pool_atoms = index.pool_atoms(tx, pool_id).atoms
    atoms = [a for a in pool_atoms.values() if a.bookable]
    busy, _ = index.busy_from([a.id for a in atoms], now, pool_atoms)
    claimed = index.claimed()
    for atom in atoms:
        kind = kind_of(atom)
        if kind is None or effective_limit(atom.cls, tenant_id, owner, limits) == 0:
            continue
        found = kinds.get(kind)
        if found is None:
            found = kinds[kind] = _Gathered(atom, share(atom))
            found.covers = tuple(sorted(c.name for c in named if belongs_to(atom, c)))
        if cluster_id is not None:
            found.clusters.add(cluster_id)
        if pool_id not in found.pools:
            found.pools.add(pool_id)
            if price is None:
                found.unpriced = found.unpriced or meter
            else:
                each = Decimal(found.share.numerator) / Decimal(found.share.denominator)
                cost = each * Decimal(price.per_hour)
                found.price = cost if found.price is None else max(found.price, cost)
                found.currency = found.currency or price.currency
        if atom.id not in busy and atom.id not in claimed and atom.node not in cordoned:
            found.free += 1


def _offer(kind: Kind, g: _Gathered) -> Offer:
    memory, slices = gives(kind, g.sample)
    return Offer(
        kind=kind,
        memory_gib=memory,
        compute_slices=slices,
        share=g.share,
        price_per_hour=g.price,
        currency=g.currency,
        free=g.free,
        unpriced=g.unpriced,
        covers=g.covers,
        clusters=tuple(sorted(g.clusters)),
    )


def refusal(
    tx: PlacementTx, index: BookingIndex, stock: Stock, tenant_id: str
) -> Callable[[Offer], str | None]:
    """The rows and policies a kind must not slip past, read for the tenant, as the check
    `domain.placement.capability.named_by_class` makes of them."""
    return named_by_class(
        tenant_id,
        stock.standing_rows(tx, index),
        [p for p in stock.rules(tx, index, tenant_id, "").policies if p.constraints.allowed_device_classes],
    )


def floor_denials(
    tx: PlacementTx,
    index: BookingIndex,
    stock: Stock,
    tenant_id: str,
    class_name: str,
    pool_ids: Sequence[str],
    clusters: Collection[str],
) -> dict[str, str]:
    """The clusters a kind asked by capability (`class_name`, an implicit class) keeps out of: those
    where another project's floor holds a named class its devices belong to (`others_floors`;
    every cluster for a fleet-wide floor). Read only when some other project has a floor."""
    rows = stock.standing_rows(tx, index)
    if not any(r.tenant_id != tenant_id and r.floor_devices > 0 for r in rows):
        return {}
    sample = next(
        (
            atom
            for pool_id in pool_ids
            for atom in index.pool_atoms(tx, pool_id).atoms.values()
            if (kind := kind_of(atom)) is not None and kind.class_name == class_name
        ),
        None,
    )
    if sample is None:
        return {}
    covers = [c.name for c in tx.device_classes.all() if belongs_to(sample, c)]
    floors = others_floors(tenant_id, rows, covers)
    out: dict[str, str] = {}
    for cluster_id in clusters:
        name = floors.get(cluster_id) or floors.get(None)
        if name is not None:
            out[cluster_id] = floor_denial(name, cluster_id)
    return out


def device_lines(
    lines: Sequence[Mapping[str, Any]], offers: Sequence[Offer]
) -> tuple[list[dict[str, Any]], list[Resolution]]:
    """A reservation's `devices` with each line asked by capability replaced by the class and the
    selector of the cheapest kind of the pool that gives it (NOT_FOUND when none does), and the
    resolutions, line by line."""
    out: list[dict[str, Any]] = []
    resolutions: list[Resolution] = []
    for i, line in enumerate(lines):
        if line.get("capability") is None:
            out.append(dict(line))
            continue
        asked = parse_capability(line.get("capability"), f"devices[{i}].capability")
        count = line.get("count", 1)
        found = resolve(asked, offers, count if isinstance(count, int) and not isinstance(count, bool) else 1)
        if found.chosen is None:
            raise nothing_gives(found)
        resolutions.append(found)
        chosen = implicit_class(found.chosen.kind.class_name)
        resolved = {"class": chosen.cls, "count": count, "selector": document(chosen.selector)}
        if line.get("sharing") is not None:
            resolved["sharing"] = line["sharing"]
        out.append(resolved)
    return out, resolutions


def nothing_gives(resolution: Resolution) -> NotFound:
    reasons = Counter(r.reason for r in resolution.refused)
    said = "; ".join(f"{n} kind(s): {why}" for why, n in reasons.most_common(3)) or "it may use no device"
    return NotFound(
        f"no kind of device the project may use gives {json.dumps(resolution.capability.document())}"
        f" ({said})"[:500],
        {
            "capability": resolution.capability.document(),
            "refused": [
                {"deviceClass": r.offer.kind.class_name, "kind": r.offer.kind.name, "reason": r.reason}
                for r in resolution.refused[:20]
            ],
        },
    )


__all__ = [
    "device_lines",
    "floor_denials",
    "nothing_gives",
    "offers_in",
    "pool_offers",
    "price_text",
    "refusal",
]
