"""Metering's events: prices set.

Each is a frozen dataclass on `domain.kernel.events.Event`; `domain.ops.event_types` registers
every context's types, for reading the log back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from better_compute.domain.kernel.events import Event


@dataclass(frozen=True, slots=True)
class PriceSet(Event):
    """A meter's price was set (`subject`: the meter); it prices every bill read from now on."""

    TYPE: ClassVar[str] = "price.set"
    per_hour: str
    currency: str
