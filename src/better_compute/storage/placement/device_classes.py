"""The device classes repository: one row per class, its selector kept as `selectors.document`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, select

from better_compute.domain.kernel.atom_classes import check_atom_class
from better_compute.domain.kernel.selectors import document, parse_selector
from better_compute.domain.placement.device_classes import DeviceClass
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import device_classes


def _device_class(r: Mapping[str, Any]) -> DeviceClass:
    return DeviceClass(
        name=r["name"],
        cls=check_atom_class(r["class"], "class"),
        selector=parse_selector(r["selector"]),
        created_at=r["created_at"],
    )


class SqlDeviceClasses:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def get(self, name: str) -> DeviceClass | None:
        found = rows.rows(self.conn, select(device_classes).where(device_classes.c.name == name))
        return _device_class(found[0]) if found else None

    def all(self) -> list[DeviceClass]:
        return [_device_class(r) for r in rows.page(self.conn, device_classes)]

    def add(self, item: DeviceClass) -> bool:
        row = {
            "name": item.name,
            "class": item.cls,
            "selector": document(item.selector),
            "created_at": item.created_at,
        }
        return rows.insert_new(self.conn, device_classes, [row]) == 1
