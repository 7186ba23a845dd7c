"""Service rows (snake_case dicts) as wire models: the one place a row becomes an answer.

Only the model's own fields are taken, so a row may carry more than the wire shows (a credential's
hash never leaves), and a field named like a Python keyword (`class`) is found by its alias.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from better_compute.service.paging import Listing
from better_compute.wire.common import Page, WireModel

M = TypeVar("M", bound=WireModel)


def public(model: type[M], row: Mapping[str, Any]) -> M:
    data: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if name in row:
            data[name] = row[name]
        elif info.alias is not None and info.alias in row:
            data[name] = row[info.alias]
    return model.model_validate(data)


def paged(model: type[M], listing: Listing) -> Page[M]:
    return Page[model](  # type: ignore[valid-type]
        items=[public(model, r) for r in listing.items], next_cursor=listing.next_cursor
    )
