"""Shapes every endpoint shares: the bases of requests and answers, the error body, the list envelope.

A request refuses a field it does not know: a typo (`poolID`, `idempotencyKy`) is an INVALID_INPUT
naming it, never a silently dropped option. An answer ignores a field it does not know: a server that
adds one must not break the clients and node daemons already deployed against it. Every model of the
wire is one or the other (`WireRequest`, `WireAnswer`); tests/tripwires holds them to it.
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

T = TypeVar("T")


class WireModel(BaseModel):
    """Base of every wire model: camelCase on the wire, snake_case in Python.

    Not used directly: a model is a `WireRequest` or a `WireAnswer`, which decide its unknown fields.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True)


class WireAnswer(WireModel):
    """What the server answers: unknown fields are ignored, so that the server may add fields."""

    model_config = ConfigDict(extra="ignore")


class WireRequest(WireModel):
    """What a caller sends: unknown fields are refused, so that a misspelt field is an error.

    A shape that travels both ways (a device request, echoed in its reservation) is an answer model
    `XPublic` with its request model `X(XPublic, WireRequest)` beside it: the server can echo a
    validated request in its answer as it is, and a client reading the answer ignores what it does
    not know.
    """

    model_config = ConfigDict(extra="forbid")


class ErrorDetail(WireAnswer):
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class ErrorBody(WireAnswer):
    """`{"error": {"code", "message", "details"}}`: the one shape of every refusal."""

    error: ErrorDetail


PageLimit = Annotated[int | None, Field(ge=1, le=1000)]
"""`limit`, the page size of every list method: 1 to 1000 items; left out, the server's default (100)."""

PageCursor = str | None
"""`cursor`, the `nextCursor` of the previous page of a list method."""


class PageQuery(WireRequest):
    """The paging of a list method (query parameters): `limit` items (1 to 1000) after `cursor`.

    A list method with filters has its own query model, with the filters first and then `limit:
    PageLimit = None` and `cursor: PageCursor = None`, declared last rather than inherited: Pydantic
    puts inherited fields first, and the order is what OpenAPI and a refused parameter list.
    """

    limit: PageLimit = None
    cursor: PageCursor = None


class Page(WireAnswer, Generic[T]):
    """A list response: items under `items`, and a cursor for the next page when there is one."""

    items: list[T]
    next_cursor: str | None = None
