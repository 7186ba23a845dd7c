"""The endpoints' ports: endpoints, their instances, components and copies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Protocol

from better_compute.domain.endpoints.records import (
    ComponentRecord,
    CopyRecord,
    EndpointInstance,
    EndpointRecord,
    PlacedCopyRow,
    RoutingRead,
)
from better_compute.service.placement.ports import PlacementTx


class EndpointRepo(Protocol):
    """Endpoints and the nodes their variants took (storage.endpoints.endpoints)."""

    def get(self, name: str, *, lock: bool = False) -> EndpointRecord | None: ...

    def page(self, tenant_id: str | None, limit: int | None, after: str | None) -> list[EndpointRecord]: ...

    def by_status(self, statuses: Sequence[str], limit: int) -> list[EndpointRecord]:
        """Up to `limit` endpoints stored in one of `statuses`, oldest first."""
        ...

    def add(self, item: EndpointRecord) -> bool: ...

    def set_status(self, name: str, status: str, reason: str | None, at: datetime) -> None: ...

    def set_spec(self, name: str, spec: Mapping[str, object], status: str, at: datetime) -> None: ...

    def set_instance_layout(self, node_id: str, layout: str) -> None: ...

    def remove(self, name: str) -> None: ...

    def add_instances(self, items: Sequence[EndpointInstance]) -> None: ...

    def instances(self, name: str) -> list[EndpointInstance]: ...

    def instances_of_nodes(self, node_ids: Sequence[str]) -> dict[str, EndpointInstance]: ...

    def instances_of_endpoints(self, names: Sequence[str]) -> dict[str, list[EndpointInstance]]: ...


class ComponentRepo(Protocol):
    """An endpoint's components and each copy's partition (storage.endpoints.components)."""

    def get(self, name: str) -> ComponentRecord | None: ...

    def page(
        self, endpoints: Sequence[str] | None, limit: int | None, after: str | None
    ) -> list[ComponentRecord]: ...

    def of_endpoint(self, endpoint: str) -> list[ComponentRecord]: ...

    def add(self, item: ComponentRecord) -> bool: ...

    def set_spec(self, name: str, spec: Mapping[str, object], at: datetime) -> None: ...

    def remove(self, names: Sequence[str], at: datetime) -> None:
        """Remove the components and their copies, closing each placed copy's span at `at`."""
        ...

    def copies(self, names: Sequence[str]) -> dict[str, list[CopyRecord]]: ...

    def routing(self, name: str) -> RoutingRead | None:
        """The component, its endpoint's tenant, its copies and their nodes' last contact, in one read."""
        ...

    def placed_on(self, atom_ids: Sequence[str]) -> list[PlacedCopyRow]:
        """The copies placed on these atoms, with their component's stored spec and endpoint's tenant."""
        ...

    def add_copies(self, items: Sequence[CopyRecord]) -> None: ...

    def place_copy(
        self,
        component: str,
        copy: int,
        atom_id: str | None,
        node_id: str | None,
        at: datetime,
        gpu_share: Fraction | None = None,
        gpu_hour_price: Decimal | None = None,
    ) -> None:
        """Give a copy its partition (None: it waits again): its open span closes at `at`, and a new
        one opens on the partition at `gpu_share` of its GPU and `gpu_hour_price` (showback)."""
        ...

    def drop_copies(self, component: str, copies: Sequence[int], at: datetime) -> None: ...


class EndpointsTx(PlacementTx, Protocol):
    """The slice of a transaction endpoints' use cases use: placement's, and the endpoints' own
    repositories."""

    @property
    def endpoints(self) -> EndpointRepo: ...

    @property
    def components(self) -> ComponentRepo: ...
