"""The prices repository: one price per meter, its `perHour` kept as the exact text it was set to."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, select

from better_compute.domain.metering.billing import Price
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import prices


def _price(r: Mapping[str, Any]) -> Price:
    return Price(meter=r["meter"], per_hour=r["per_hour"], currency=r["currency"], updated_at=r["updated_at"])


class SqlPrices:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def all(self) -> list[Price]:
        return [_price(r) for r in rows.rows(self.conn, select(prices).order_by(prices.c.meter))]

    def put(self, price: Price) -> None:
        row = {
            "meter": price.meter,
            "per_hour": price.per_hour,
            "currency": price.currency,
            "updated_at": price.updated_at,
        }
        rows.upsert(self.conn, prices, [row], ["meter"])
