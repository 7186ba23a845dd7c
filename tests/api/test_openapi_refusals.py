"""`openapi.json` documents refusals as the API makes them: `400` and a `default` `ErrorBody`,
never FastAPI's `422` (regression: generated clients expected 422 HTTPValidationError, and got 400)."""

from __future__ import annotations

from typing import Any

import jsonschema_rs

from better_compute.entrypoints import openapi
from better_compute.storage.store import Store
from tests.builders import api_client

DOCUMENT = openapi.document()


def _operations() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, op)
        for path, item in DOCUMENT["paths"].items()
        for method, op in item.items()
        if isinstance(op, dict) and "responses" in op
    ]


def test_openapi_documents_no_422_and_every_refusal_as_the_error_body() -> None:
    assert "HTTPValidationError" not in DOCUMENT["components"]["schemas"]
    for method, path, op in _operations():
        responses = op["responses"]
        assert "422" not in responses, (method, path)
        assert responses["default"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorBody"
        }, (method, path)
        if op.get("parameters") or op.get("requestBody"):
            assert "400" in responses, (method, path)


def test_openapi_a_bad_request_answers_what_the_document_says(store: Store) -> None:
    http = api_client(store)
    answer = http.get("/v1/atoms", params={"nope": "1"}, headers={"Authorization": "Bearer bc_x"})
    body = answer.json()
    schema = {"$ref": "#/components/schemas/ErrorBody", "components": DOCUMENT["components"]}
    assert answer.status_code in (400, 401)
    jsonschema_rs.validator_for(schema).validate(body)
