"""Showback for inference endpoints (docs/billing.md#showback-endpoints-cost-per-component; seed 003): what
each component's copies cost.

An endpoint is paid for by the instance, whatever its partitions hold (the seed: "you are billed
for the whole GPU instance"). Showback splits that cost over the models on it: each copy costs, for
the time it held its partition, the partition's share of its GPU (`domain.fleet.shares.share`: 3g.40gb
on an H100 is 3/7) times the endpoint's price per GPU-hour (the variant's `pricePerInstanceHour`
over the instance's GPUs, as the copy was placed). A component's line adds its copies' GPU-hours
and cost. Hours are exact fractions until shown; money is rounded once per line, as a bill's is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from better_compute.domain.metering.metering import hours as held_hours
from better_compute.domain.metering.metering import rounded

__all__ = ["SHOWBACK_PLACES", "CopyTotal", "ShowbackLine", "gpu_hour_price", "showback"]

SHOWBACK_PLACES = 2
"""Decimal places a showback amount is rounded to: the endpoint's price carries no currency, so the
cent is assumed."""


@dataclass(frozen=True, slots=True)
class CopyTotal:
    """Microseconds a component's copies held partitions of one share at one price, in a period."""

    endpoint: str
    component: str
    share: Fraction
    gpu_hour_price: Decimal | None
    held_microseconds: int


@dataclass(frozen=True, slots=True)
class ShowbackLine:
    """One component's part of its endpoint's cost in a period; `amount` None when some of its
    time was on an endpoint with no price."""

    endpoint: str
    component: str
    gpu_hours: Fraction
    amount: Decimal | None


def gpu_hour_price(price_per_instance_hour: Decimal | None, gpus: int) -> Decimal | None:
    """An instance's price per GPU-hour: its hourly price over its GPUs (None: unpriced)."""
    if price_per_instance_hour is None or gpus < 1:
        return None
    return price_per_instance_hour / gpus


def showback(totals: Iterable[CopyTotal]) -> tuple[ShowbackLine, ...]:
    """One line per (endpoint, component), in that order."""
    hours: dict[tuple[str, str], Fraction] = {}
    cost: dict[tuple[str, str], Fraction | None] = {}
    for t in totals:
        key = (t.endpoint, t.component)
        gpu_hours = held_hours(t.share, t.held_microseconds)
        hours[key] = hours.get(key, Fraction(0)) + gpu_hours
        before = cost.get(key, Fraction(0))
        if before is None or t.gpu_hour_price is None:
            cost[key] = None
        else:
            cost[key] = before + gpu_hours * Fraction(t.gpu_hour_price)
    return tuple(
        ShowbackLine(
            endpoint,
            component,
            hours[(endpoint, component)],
            None if (c := cost[(endpoint, component)]) is None else rounded(c, SHOWBACK_PLACES),
        )
        for endpoint, component in sorted(hours)
    )
