"""The OpenAPI document says how the API refuses: `400` and every other refusal as `ErrorBody`.

FastAPI documents a `422` with its own `HTTPValidationError` on every operation that takes input,
but this API answers bad input `400 INVALID_INPUT` in the one refusal shape (`api/errors.py`), and
a generated client or API tester reading `openapi.json` would expect what is written there. So the
`422` goes, and each operation documents `400` (when it takes input) and a `default` answer, both
`ErrorBody`, pointing to the error codes of docs/api.md.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from better_compute.wire.common import ErrorBody

_REF = "#/components/schemas/ErrorBody"
_BAD_INPUT = "INVALID_INPUT: a parameter or the body is malformed, unknown or out of its limits."
_REFUSED = (
    "A refusal: `{error: {code, message, details}}` with the code's status (UNAUTHENTICATED 401,"
    " FORBIDDEN 403, NOT_FOUND 404, CONFLICT / INVALID_STATE / QUOTA_EXCEEDED /"
    " INSUFFICIENT_CAPACITY 409, UNAVAILABLE 503 with `Retry-After` while the database cannot be"
    " reached, ...); docs/api.md#errors."
)
_FASTAPI_ONLY = ("HTTPValidationError", "ValidationError")


def _answer(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": _REF}}}}


def document_refusals(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with FastAPI's 422 replaced by this API's refusals, in place."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    error_schema = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in error_schema.pop("$defs", {}).items():
        schemas.setdefault(name, definition)
    schemas["ErrorBody"] = error_schema
    for path_item in document.get("paths", {}).values():
        for operation in path_item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            takes_input = responses.pop("422", None) is not None or bool(operation.get("parameters"))
            if takes_input:
                responses.setdefault("400", _answer(_BAD_INPUT))
            responses.setdefault("default", _answer(_REFUSED))
    text = str(document.get("paths", {}))
    for name in _FASTAPI_ONLY:
        if f"/{name}'" not in text:
            schemas.pop(name, None)
    return document


def install(app: FastAPI) -> None:
    """Make the app's OpenAPI document say how it refuses (FastAPI builds it once and keeps it)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_refusals(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
