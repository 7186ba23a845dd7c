"""The MIG layout gate's events: a layout asked of a pool, and each node's change scheduled,
granted, applied.

Each is a frozen dataclass on `domain.kernel.events.Event`; `domain.ops.event_types` registers
every context's types, for reading the log back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

from better_compute.domain.kernel.events import Event, payload_key


@dataclass(frozen=True, slots=True)
class MigLayoutRequested(Event):
    """A mig pool's layout changed; the MIG layout gate repartitions its nodes' GPUs."""

    TYPE: ClassVar[str] = "pool.mig_layout.requested"
    from_layout: str = payload_key("from")
    to_layout: str = payload_key("to")
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeMigScheduled(Event):
    """The layout gate booked every GPU family of a node from `at` onward, when the node's last
    booking ends (`subject`: the node); the change is granted then."""

    TYPE: ClassVar[str] = "node.mig.scheduled"
    pool: str
    at: datetime
    layout: str


@dataclass(frozen=True, slots=True)
class NodeMigGranted(Event):
    """A node is told its pool's new layout (`subject`: the node); `released` when nothing will
    repartition it (it keeps its own layout), so its holds ended at once."""

    TYPE: ClassVar[str] = "node.mig.granted"
    pool: str
    layout: str
    released: bool = False


@dataclass(frozen=True, slots=True)
class NodeMigApplied(Event):
    """A node converged its new layout, or the change was undone (`undone`): its partition
    bookings are released and its atoms take work (`subject`: the node)."""

    TYPE: ClassVar[str] = "node.mig.applied"
    pool: str
    layout: str
    undone: bool = False
