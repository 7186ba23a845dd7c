"""Answers written as JSON straight from their wire model.

FastAPI validates what a route returns against its `response_model` once more before it serialises
it. For an answer that `api.convert` has just built, field by field, as that very model, the second
pass only costs time: for a workload's answer with a verdict per cluster of a hundred, more than
placing the workload. Such routes return `json_answer(...)`, and keep `response_model` for the
OpenAPI document.
"""

from __future__ import annotations

from fastapi import Response

from better_compute.wire.common import WireAnswer


def json_answer(model: WireAnswer, status_code: int = 200) -> Response:
    """The model's JSON (camelCase, as every answer) with the status given."""
    return Response(content=model.model_dump_json(), status_code=status_code, media_type="application/json")


__all__ = ["json_answer"]
