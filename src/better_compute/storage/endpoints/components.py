"""The components repository: an endpoint's components (docs/endpoints.md#components) and the partition each
copy takes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, bindparam, delete, select, update

from better_compute.domain.endpoints.records import ComponentRecord, CopyRecord, PlacedCopyRow, RoutingRead
from better_compute.storage.fleet.nodes import last_contact
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import component_copies, components, copy_spans, endpoints, nodes


def _component(r: Mapping[str, Any]) -> ComponentRecord:
    return ComponentRecord(
        name=r["name"],
        endpoint=r["endpoint"],
        spec=r["spec"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        generation=int(r["generation"]),
    )


def _copy(r: Mapping[str, Any]) -> CopyRecord:
    return CopyRecord(r["component"], int(r["copy"]), r["atom_id"], r["node_id"], r["created_at"])


_ROUTING = (
    select(
        components,
        endpoints.c.tenant_id,
        component_copies.c.copy.label("copy_index"),
        component_copies.c.atom_id.label("copy_atom_id"),
        component_copies.c.node_id.label("copy_node_id"),
        component_copies.c.created_at.label("copy_created_at"),
        nodes.c.last_report_at,
        nodes.c.last_spec_read_at,
    )
    .join(endpoints, endpoints.c.name == components.c.endpoint)
    .outerjoin(component_copies, component_copies.c.component == components.c.name)
    .outerjoin(nodes, nodes.c.id == component_copies.c.node_id)
    .where(components.c.name == bindparam("component"))
    .order_by(component_copies.c.copy)
)
"""`SqlComponents.routing`'s one statement, built once: a component's row joined to its endpoint's
tenant, one row per copy with its node's contact columns (one row of NULL copy columns: no copies)."""


class SqlComponents:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def get(self, name: str) -> ComponentRecord | None:
        found = rows.rows(self.conn, select(components).where(components.c.name == name))
        return _component(found[0]) if found else None

    def page(
        self, endpoints: Sequence[str] | None, limit: int | None, after: str | None
    ) -> list[ComponentRecord]:
        """Components by name: of these endpoints (None: of every endpoint)."""
        where = [] if endpoints is None else [components.c.endpoint.in_(list(endpoints))]
        return [
            _component(r) for r in rows.page(self.conn, components, where=where, limit=limit, after=after)
        ]

    def of_endpoint(self, endpoint: str) -> list[ComponentRecord]:
        stmt = select(components).where(components.c.endpoint == endpoint).order_by(components.c.name)
        return [_component(r) for r in rows.rows(self.conn, stmt)]

    def add(self, item: ComponentRecord) -> bool:
        """False when the name is taken."""
        row = {
            "name": item.name,
            "endpoint": item.endpoint,
            "spec": dict(item.spec),
            "generation": item.generation,
            "created_at": item.created_at,
            "updated_at": item.updated_at,
        }
        return rows.insert_new(self.conn, components, [row]) == 1

    def set_spec(self, name: str, spec: Mapping[str, Any], at: datetime) -> None:
        self.conn.execute(
            update(components)
            .where(components.c.name == name)
            .values(spec=dict(spec), updated_at=at, generation=components.c.generation + 1)
        )

    def remove(self, names: Sequence[str], at: datetime) -> None:
        if names:
            self._close(copy_spans.c.component.in_(list(names)), at)
            self.conn.execute(delete(component_copies).where(component_copies.c.component.in_(list(names))))
            self.conn.execute(delete(components).where(components.c.name.in_(list(names))))

    def _close(self, where: ColumnElement[bool], at: datetime) -> None:
        """End the open spans `where` selects at `at`."""
        self.conn.execute(
            update(copy_spans).where(and_(copy_spans.c.ended_at.is_(None), where)).values(ended_at=at)
        )

    def copies(self, names: Sequence[str]) -> dict[str, list[CopyRecord]]:
        found: dict[str, list[CopyRecord]] = {n: [] for n in names}
        if names:
            stmt = (
                select(component_copies)
                .where(component_copies.c.component.in_(list(names)))
                .order_by(component_copies.c.component, component_copies.c.copy)
            )
            for r in rows.rows(self.conn, stmt):
                found[r["component"]].append(_copy(r))
        return found

    def routing(self, name: str) -> RoutingRead | None:
        """The component with its endpoint's tenant, its copies and their nodes' last contact, in one
        statement (`endpoints.invoke` reads this on every request)."""
        found = rows.rows(self.conn, _ROUTING.params(component=name))
        if not found:
            return None
        copies: list[CopyRecord] = []
        contacts: dict[str, datetime | None] = {}
        for r in found:
            if r["copy_index"] is None:
                continue
            copies.append(
                CopyRecord(
                    r["name"],
                    int(r["copy_index"]),
                    r["copy_atom_id"],
                    r["copy_node_id"],
                    r["copy_created_at"],
                )
            )
            if r["copy_node_id"] is not None:
                contacts[r["copy_node_id"]] = last_contact(r)
        return RoutingRead(_component(found[0]), found[0]["tenant_id"], tuple(copies), contacts)

    def placed_on(self, atom_ids: Sequence[str]) -> list[PlacedCopyRow]:
        """The copies placed on these atoms, each with its component's stored spec and its
        endpoint's tenant (by the copies' unique atom key: a node's spec reads this on every read)."""
        if not atom_ids:
            return []
        stmt = (
            select(component_copies, components.c.spec, endpoints.c.tenant_id)
            .join(components, components.c.name == component_copies.c.component)
            .join(endpoints, endpoints.c.name == components.c.endpoint)
            .where(component_copies.c.atom_id.in_(list(atom_ids)))
            .order_by(component_copies.c.component, component_copies.c.copy)
        )
        return [PlacedCopyRow(_copy(r), r["spec"], r["tenant_id"]) for r in rows.rows(self.conn, stmt)]

    def add_copies(self, items: Sequence[CopyRecord]) -> None:
        if items:
            self.conn.execute(
                component_copies.insert(),
                [
                    {
                        "component": c.component,
                        "copy": c.copy,
                        "atom_id": c.atom_id,
                        "node_id": c.node_id,
                        "created_at": c.created_at,
                    }
                    for c in items
                ],
            )

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
        """Give a copy its partition (None: it waits again), closing its open span at `at` and
        opening one on the new partition at `gpu_share` of its GPU and `gpu_hour_price`."""
        self._close(and_(copy_spans.c.component == component, copy_spans.c.copy == copy), at)
        self.conn.execute(
            update(component_copies)
            .where(and_(component_copies.c.component == component, component_copies.c.copy == copy))
            .values(atom_id=atom_id, node_id=node_id)
        )
        if atom_id is None or node_id is None:
            return
        if gpu_share is None:
            raise ValueError(f"copy {copy} of {component} is placed without its partition's share")
        owner = (
            select(endpoints.c.tenant_id, endpoints.c.name)
            .select_from(components.join(endpoints, endpoints.c.name == components.c.endpoint))
            .where(components.c.name == component)
        )
        tenant_id, endpoint = self.conn.execute(owner).one()
        self.conn.execute(
            copy_spans.insert().values(
                tenant_id=tenant_id,
                endpoint=endpoint,
                component=component,
                copy=copy,
                node_id=node_id,
                atom_id=atom_id,
                gpu_share=str(gpu_share),
                gpu_hour_price=None if gpu_hour_price is None else str(gpu_hour_price),
                started_at=at,
            )
        )

    def drop_copies(self, component: str, copies: Sequence[int], at: datetime) -> None:
        if copies:
            self._close(and_(copy_spans.c.component == component, copy_spans.c.copy.in_(list(copies))), at)
            self.conn.execute(
                delete(component_copies).where(
                    component_copies.c.component == component, component_copies.c.copy.in_(list(copies))
                )
            )


__all__ = ["SqlComponents"]
