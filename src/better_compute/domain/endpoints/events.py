"""The endpoints' events: endpoints and their components.

Each is a frozen dataclass on `domain.kernel.events.Event`; `domain.ops.event_types` registers
every context's types, for reading the log back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from better_compute.domain.kernel.events import Event


@dataclass(frozen=True, slots=True)
class EndpointCreated(Event):
    """An endpoint was created (`subject`: its name): `Creating` with the nodes its variants took
    (`nodes`), whose GPUs are being cut to its layout, or `Failed` with the reason (nothing taken).
    `spec` is its request as stored (`domain.endpoints.endpoints.endpoint_json`): what a replay of
    the history creates again (docs/replay.md)."""

    TYPE: ClassVar[str] = "endpoint.created"
    tenant_id: str
    status: str
    instances: int
    reason: str = ""
    spec: Mapping[str, Any] = field(default_factory=dict)
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EndpointUpdated(Event):
    """A live relayout's progress (`subject`: the endpoint): `Updating` when it starts and as each
    instance (`node`) starts being re-cut to `layout`; `InService` once every instance has its
    variant's layout; `reason` when a step waits (a component would drop below its minCopies).
    `Creating` when a `Failed` endpoint, taken again as capacity freed, took its nodes (`nodes`)."""

    TYPE: ClassVar[str] = "endpoint.updated"
    tenant_id: str
    status: str
    node: str = ""
    layout: str = ""
    reason: str = ""
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EndpointDeleted(Event):
    """An endpoint was deleted (`subject`: its name): its nodes go back to their pool's layout
    through the layout gate and then take tenants' work again."""

    TYPE: ClassVar[str] = "endpoint.deleted"
    tenant_id: str
    instances: int


@dataclass(frozen=True, slots=True)
class ComponentChanged(Event):
    """A component was created, scaled or deleted (`change`; `subject`: its name): its copies, how
    many have a partition (`placed`) and how many wait for one."""

    TYPE: ClassVar[str] = "component.changed"
    tenant_id: str
    endpoint: str
    change: str
    copies: int
    placed: int
