"""`openapi.json` documents refusals as the API makes them: `400` and a `default` `ErrorBody`,
never FastAPI's `422` (regression: generated clients expected 422 HTTPValidationError, and got 400)."""

from __future__ import annotations

from typing import Any

import jsonschema_rs

from better_compute.storage.store import Store
from tests import openapi_document
from tests.builders import admin_token, api_client, tenant_token

DOCUMENT = openapi_document.document()


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


def _responses(operation_id: str) -> dict[str, Any]:
    found = [op for _, _, op in _operations() if op.get("operationId") == operation_id]
    assert len(found) == 1, operation_id
    return dict(found[0]["responses"])


def test_each_refusal_the_api_makes_is_listed_under_its_own_status(store: Store) -> None:
    """Regression: every operation listed 400 and a `default` only, so a generated client or API
    tester could not tell which statuses an operation answers."""
    http = api_client(store, max_body_bytes=4096)
    admin = {"Authorization": f"Bearer {admin_token(store)}"}
    assert http.post("/v1/tenants", json={"id": "acme", "name": "Acme"}, headers=admin).status_code == 201
    tenant = {"Authorization": f"Bearer {tenant_token(store, 'acme')}"}
    observed = {
        ("credentials.whoami", http.get("/v1/whoami").status_code),
        (
            "tenants.create",
            http.post("/v1/tenants", json={"id": "b", "name": "B"}, headers=tenant).status_code,
        ),
        ("pools.get", http.get("/v1/pools/nope", headers=admin).status_code),
        (
            "tenants.create",
            http.post("/v1/tenants", json={"id": "acme", "name": "A"}, headers=admin).status_code,
        ),
        ("tenants.create", http.post("/v1/tenants", content=b"x" * 5000, headers=admin).status_code),
        (
            "tenants.create",
            http.post(
                "/v1/tenants", content=b"{}", headers={**admin, "Content-Encoding": "gzip"}
            ).status_code,
        ),
        ("atoms.list", http.get("/v1/atoms", params={"nope": "1"}, headers=admin).status_code),
    }
    assert {status for _, status in observed} == {400, 401, 403, 404, 409, 413, 415}
    for operation_id, status in observed:
        assert str(status) in _responses(operation_id), (operation_id, status)


def test_an_operation_lists_only_the_refusals_it_can_make() -> None:
    whoami = _responses("credentials.whoami")
    assert {"400", "401", "503"} <= whoami.keys()
    assert not {"403", "404", "409", "408", "413", "415", "429"} & whoami.keys()
    for _, _, op in _operations():
        if "requestBody" not in op:
            assert not {"408", "413", "415"} & op["responses"].keys(), op["operationId"]
    assert "409" not in _responses("placement.preview")  # a POST that writes nothing
    assert "409" in _responses("pools.update") and "413" in _responses("pools.update")
    assert "429" in _responses("endpoints.invoke")  # the model server's own, relayed
    assert all(
        "429" not in op["responses"] for _, _, op in _operations() if op["operationId"] != "endpoints.invoke"
    )


def test_a_refusal_raised_deep_in_a_use_case_is_found() -> None:
    """`nodes.report` is refused 403 by `service.fleet.node_reports._apply` (atoms on another node),
    reached through `services.reports.accept`, a method of an object handed to a thread pool."""
    assert "403" in _responses("nodes.report")
    assert "FORBIDDEN" in _responses("nodes.report")["403"]["description"]


def test_the_node_signing_headers_are_described() -> None:
    scheme = DOCUMENT["components"]["securitySchemes"]["nodeSignature"]
    assert (scheme["type"], scheme["in"], scheme["name"]) == ("apiKey", "header", "BC-Signature")
    assert "bc-node-v1" in scheme["description"] and "SHA-256" in scheme["description"]
    report = next(op for _, _, op in _operations() if op["operationId"] == "nodes.report")
    headers = {p["name"]: p for p in report["parameters"] if p["in"] == "header"}
    assert sorted(headers) == ["BC-Node", "BC-Sequence", "BC-Signature", "BC-Timestamp"]
    assert all(p["required"] for p in headers.values())
    assert report["security"] == [{"nodeSignature": []}]
    spec = next(op for _, _, op in _operations() if op["operationId"] == "nodes.spec")
    optional = {p["name"]: p["required"] for p in spec["parameters"] if p["in"] == "header"}
    assert optional == dict.fromkeys(headers, False)  # a node signs, or the admin sends a token
    assert spec["security"] == [{"nodeSignature": []}, {"bearer": []}]
