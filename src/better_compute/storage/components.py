"""The components repository: an endpoint's components (SPEC 9) and the partition each copy takes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, delete, select, update

from better_compute.domain.records import ComponentRecord, CopyRecord
from better_compute.storage import rows
from better_compute.storage.tables import component_copies, components


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

    def remove(self, names: Sequence[str]) -> None:
        if names:
            self.conn.execute(delete(component_copies).where(component_copies.c.component.in_(list(names))))
            self.conn.execute(delete(components).where(components.c.name.in_(list(names))))

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

    def place_copy(self, component: str, copy: int, atom_id: str | None, node_id: str | None) -> None:
        """Give a copy its partition (None: it waits again)."""
        self.conn.execute(
            update(component_copies)
            .where(and_(component_copies.c.component == component, component_copies.c.copy == copy))
            .values(atom_id=atom_id, node_id=node_id)
        )

    def drop_copies(self, component: str, copies: Sequence[int]) -> None:
        if copies:
            self.conn.execute(
                delete(component_copies).where(
                    component_copies.c.component == component, component_copies.c.copy.in_(list(copies))
                )
            )


__all__ = ["SqlComponents"]
