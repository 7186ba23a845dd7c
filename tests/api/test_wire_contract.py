"""The wire contract through the real app: the version header, unknown fields.

Each test is what a caller sees over HTTP: a header on every answer (refusals included), and a
misspelt field refused wherever it sits in the body.
"""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from better_compute.wire.methods import METHODS
from tests.builders import T0, admin_token, api_client, bearer, fleet_spec


class Api:
    """The app over a one-pool fleet, called as the method table renders each method."""

    def __init__(self, store: Store) -> None:
        load_fleet(store, fleet_spec(), T0)
        self.client = api_client(store)
        self.admin = bearer(admin_token(store))

    def call(self, name: str, body: dict[str, Any] | None = None) -> Any:
        http = METHODS[name].render(body or {})
        return self.client.request(
            http.verb, http.path, params=http.query, json=http.json, headers=self.admin
        )


@pytest.fixture
def api(store: Store) -> Api:
    return Api(store)


def error(response: Any) -> dict[str, Any]:
    found: dict[str, Any] = response.json()["error"]
    return found


def test_every_answer_names_the_api_version(api: Api) -> None:
    client, admin = api.client, api.admin
    answers = {
        "an answer": client.get("/v1/tenants", headers=admin),
        "a creation": client.post("/v1/tenants", json={"id": "gamma", "name": "Gamma"}, headers=admin),
        "the health check": client.get("/healthz"),
        "the OpenAPI document": client.get("/openapi.json"),
        "a refused token": client.get("/v1/tenants"),
        "a validation error": client.post("/v1/tenants", json={"id": "gamma"}, headers=admin),
        "a domain refusal": client.post("/v1/tenants", json={"id": "gamma", "name": "G"}, headers=admin),
        "an unknown path": client.get("/v1/nowhere", headers=admin),
        "a verb the path does not take": client.delete("/v1/tenants", headers=admin),
        "a NUL in the path": client.get("/v1/pools/a%00b", headers=admin),
        "a body over the cap": client.post(
            "/v1/tenants", content=b" " * 2_000_000, headers={**admin, "content-type": "application/json"}
        ),
    }
    assert {what: a.status_code for what, a in answers.items()} == {
        "an answer": 200,
        "a creation": 201,
        "the health check": 200,
        "the OpenAPI document": 200,
        "a refused token": 401,
        "a validation error": 400,
        "a domain refusal": 409,
        "an unknown path": 404,
        "a verb the path does not take": 405,
        "a NUL in the path": 400,
        "a body over the cap": 413,
    }
    for what, answer in answers.items():
        assert answer.headers.get_list("bc-api-version") == ["1"], what


def test_an_unexpected_error_answers_internal_with_the_version_too(api: Api) -> None:
    app = api.client.app

    def boom() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/v1/boom", boom)  # type: ignore[attr-defined]
    # The builders' TestClient class (importing it here would warn): one that answers 500s, not raises.
    with type(api.client)(app, raise_server_exceptions=False) as client:
        answer = client.get("/v1/boom", headers=api.admin)
    assert answer.status_code == 500
    assert error(answer) == {
        "code": "INTERNAL",
        "message": "internal error; the request was not applied",
        "details": {},
    }
    assert answer.headers.get_list("bc-api-version") == ["1"]


@pytest.mark.parametrize(
    ("name", "body", "where"),
    [
        pytest.param(
            "pools.create",
            {"name": "q", "clusterId": "c1", "mode": "mig", "ownerTenantId": "platform", "ownerTenant": "x"},
            "ownerTenant",
            id="a misspelt top-level field",
        ),
        pytest.param(
            "pools.update",
            {"id": "p1", "policy": {"migLayot": "all-7g.80gb"}},
            "policy.migLayot",
            id="a misspelt field of the pool's policy",
        ),
        pytest.param(
            "reservations.create",
            {
                "tenantId": "acme",
                "poolId": "p1",
                "duration": "1h",
                "devices": [
                    {
                        "class": "gpu.mig",
                        "count": 1,
                        "selector": {"matchExpressions": [{"key": "migProfile", "op": "Exists", "vals": []}]},
                    }
                ],
            },
            "devices[0].selector.matchExpressions[0].vals",
            id="a misspelt field deep in a device request",
        ),
    ],
)
def test_a_request_field_the_method_does_not_take_is_refused_wherever_it_is(
    api: Api, name: str, body: dict[str, Any], where: str
) -> None:
    refused = api.call(name, body)
    assert refused.status_code == 400
    assert error(refused)["code"] == "INVALID_INPUT"
    assert error(refused)["message"] == f"{where}: Extra inputs are not permitted"
