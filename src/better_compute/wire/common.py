"""Shapes every endpoint shares: the error body and the list envelope."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

T = TypeVar("T")


class WireModel(BaseModel):
    """Base of every wire model: camelCase on the wire, snake_case in Python, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", serialize_by_alias=True
    )


class ErrorDetail(WireModel):
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class ErrorBody(WireModel):
    """`{"error": {"code", "message", "details"}}`: the one shape of every refusal."""

    error: ErrorDetail


class PageQuery(WireModel):
    """The paging of a list method (query parameters): `limit` items (1 to 1000) after `cursor`."""

    limit: int | None = Field(default=None, ge=1, le=1000)
    cursor: str | None = None


class Page(WireModel, Generic[T]):
    """A list response: items under `items`, and a cursor for the next page when there is one."""

    items: list[T]
    next_cursor: str | None = None
