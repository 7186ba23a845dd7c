"""Endpoints' records: endpoints, the nodes their variants took, components and copies."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class EndpointRecord:
    """An inference endpoint as stored (docs/endpoints.md): its checked request
    (`domain.endpoints.endpoints.endpoint_json`), its stored status (Creating, Failed or Deleting;
    InService is derived) and why it failed."""

    name: str
    tenant_id: str
    spec: Mapping[str, Any]
    status: str
    reason: str | None
    created_at: datetime
    updated_at: datetime
    generation: int = 1


@dataclass(frozen=True, slots=True)
class EndpointInstance:
    """A node an endpoint's variant took, and the layout it cuts the node's GPUs to."""

    node_id: str
    endpoint: str
    variant: str
    layout: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ComponentRecord:
    """A component as stored: its checked request (`domain.endpoints.endpoints.component_json`)."""

    name: str
    endpoint: str
    spec: Mapping[str, Any]
    created_at: datetime
    updated_at: datetime
    generation: int = 1


@dataclass(frozen=True, slots=True)
class CopyRecord:
    """One copy of a component and the partition (a `gpu.mig` atom) it takes; None: it waits."""

    component: str
    copy: int
    atom_id: str | None
    node_id: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class RoutingRead:
    """A component as `endpoints.invoke` reads it on every request: the component, its endpoint's
    tenant, its copies in copy order, and the last contact of each node a copy is placed on."""

    component: ComponentRecord
    tenant_id: str
    copies: tuple[CopyRecord, ...]
    contacts: Mapping[str, datetime | None]


@dataclass(frozen=True, slots=True)
class PlacedCopyRow:
    """A placed copy as its node's spec reads it: the copy, its component's stored spec
    (`component_json`) and the endpoint's tenant."""

    copy: CopyRecord
    spec: Mapping[str, Any]
    tenant_id: str
