"""The priority classes repository: one row per class; `standard` is written by the migration that
made the table (and by `add_standard`, for a store emptied in place)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from better_compute.domain.placement.priority_classes import PriorityClass, standard
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import priority_classes


def _priority_class(r: Mapping[str, Any]) -> PriorityClass:
    return PriorityClass(
        name=r["name"],
        priority=int(r["priority"]),
        preemptible=bool(r["preemptible"]),
        created_at=r["created_at"],
    )


def _row(item: PriorityClass) -> dict[str, Any]:
    return {
        "name": item.name,
        "priority": item.priority,
        "preemptible": item.preemptible,
        "created_at": item.created_at,
    }


def add_standard(conn: Connection, at: datetime) -> None:
    """Create the `standard` class unless it is there: what a freshly migrated store holds."""
    rows.insert_missing(conn, priority_classes, [_row(standard(at))])


class SqlPriorityClasses:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def get(self, name: str) -> PriorityClass | None:
        found = rows.rows(self.conn, select(priority_classes).where(priority_classes.c.name == name))
        return _priority_class(found[0]) if found else None

    def all(self) -> list[PriorityClass]:
        return [_priority_class(r) for r in rows.page(self.conn, priority_classes)]

    def add(self, item: PriorityClass) -> bool:
        return rows.insert_new(self.conn, priority_classes, [_row(item)]) == 1
