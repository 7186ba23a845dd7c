"""What every route module answers with: a page of wire models, and a model's JSON written directly.

Each route module converts its own records to its wire models, field by field (so a renamed column or
record field breaks there, and in mypy, never silently on the wire); what they all share is here.

FastAPI validates what a route returns against its `response_model` once more before it serialises
it. For an answer that a route module has just built, field by field, as that very model, the second
pass only costs time: for a workload's answer with a verdict per cluster of a hundred, more than
placing the workload. Such routes return `json_answer(...)`, and keep `response_model` for the
OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Response

from better_compute.service.kernel.paging import Listing
from better_compute.wire.common import Page, WireAnswer

R = TypeVar("R")
M = TypeVar("M")


def json_answer(model: WireAnswer, status_code: int = 200) -> Response:
    """The model's JSON (camelCase, as every answer) with the status given."""
    return Response(content=model.model_dump_json(), status_code=status_code, media_type="application/json")


def paged(listing: Listing[R], convert: Callable[[R], M]) -> Page[M]:
    """A use case's listing as a wire page, each item converted by the route module's own `convert`."""
    return Page[Any](items=[convert(r) for r in listing.items], next_cursor=listing.next_cursor)


__all__ = ["json_answer", "paged"]
