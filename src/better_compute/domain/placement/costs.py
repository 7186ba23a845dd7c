"""What a workload's replica costs per hour in a cluster, against a policy's cost ceiling
(docs/scheduling.md#cost-ceilings).

A device bills its share of a GPU (`domain.fleet.shares.share`: 1 for a whole GPU, 3/7 for a 3g.40gb
on an H100, 1/slots for a slot) times its meter's price per hour, as a bill does. A replica of N
devices costs N times that. A cluster may hold the tenant's devices of the class in several pools,
on different meters; a replica may land in any of them, so the cluster's figure is the dearest one.
A pool whose meter has no price leaves the cost unknown, and a ceiling that cannot be checked
refuses (a ceiling is there to keep cost down; an unknown cost does not pass it silently).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from better_compute.domain.metering.billing import Price


@dataclass(frozen=True, slots=True)
class Cost:
    """What one replica costs per hour in a cluster, against the ceiling the policies set there.

    `per_replica` is None when one of the cluster's pools' meters has no price (`unpriced` names
    it): the ceiling cannot be checked there."""

    ceiling: Decimal
    per_replica: Decimal | None
    currency: str | None = None
    unpriced: str | None = None


def replica_cost(
    ceiling: Decimal, device_count: int, offers: Iterable[tuple[str, Fraction, Price | None]]
) -> Cost:
    """The cluster's `Cost` for replicas of `device_count` devices; `offers` are its pools' (meter,
    the largest share of a GPU one of its devices of the class bills, the meter's price or None).
    A pool with no device of the class (share 0) takes no replica and is left out."""
    dearest = Decimal(0)
    currency: str | None = None
    for meter, gpu_share, price in offers:
        if not gpu_share:
            continue
        if price is None:
            return Cost(ceiling, None, unpriced=meter)
        each = Decimal(device_count) * Decimal(gpu_share.numerator) / Decimal(gpu_share.denominator)
        cost = each * Decimal(price.per_hour)
        currency = currency or price.currency
        dearest = max(dearest, cost)
    return Cost(ceiling, dearest, currency)


def money(value: Decimal) -> str:
    """A cost as a plain decimal with at least two places (`12.5` -> `12.50`, `1E+2` -> `100.00`)."""
    text = format(value.normalize(), "f")
    whole, _, cents = text.partition(".")
    return f"{whole}.{cents.ljust(2, '0')}"


__all__ = ["Cost", "money", "replica_cost"]
