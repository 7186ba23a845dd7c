"""The wire contract through the real app: the version header, 405s, conflict reasons, unknown fields.

Each test is what a caller sees over HTTP: a header on every answer (refusals included), a verb the
path does not take told apart from a path that does not exist, a CONFLICT that says which one it is,
and a misspelt field refused wherever it sits in the body.
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
    ("verb", "path", "allowed"),
    [
        pytest.param("PUT", "/v1/pools/p1", "DELETE, GET, PATCH", id="a pool is not put"),
        pytest.param("PUT", "/v1/reservations", "GET, POST", id="reservations are not put"),
        pytest.param("GET", "/v1/reservations/r1/cancel", "POST", id="a cancel is a POST"),
        pytest.param("POST", "/healthz", "GET", id="the health check is read only"),
    ],
)
def test_a_verb_the_path_does_not_take_is_405_method_not_allowed(
    api: Api, verb: str, path: str, allowed: str
) -> None:
    answer = api.client.request(verb, path, headers=api.admin)
    assert answer.status_code == 405
    assert error(answer)["code"] == "METHOD_NOT_ALLOWED"
    assert sorted(answer.headers["allow"].split(", ")) == allowed.split(", ")
    # A path that does not exist at all is still NOT_FOUND.
    missing = api.client.request(verb, "/v1/nowhere", headers=api.admin)
    assert (missing.status_code, error(missing)["code"]) == (404, "NOT_FOUND")


def test_a_name_already_taken_is_a_conflict_with_reason_already_exists(api: Api) -> None:
    assert api.call("tenants.create", {"id": "gamma", "name": "Gamma"}).status_code == 201
    again = api.call("tenants.create", {"id": "gamma", "name": "Gamma"})
    assert again.status_code == 409
    assert error(again) == {
        "code": "CONFLICT",
        "message": "tenant gamma already exists",
        "details": {"tenantId": "gamma", "reason": "already_exists"},
    }
    policy = {"name": "small", "tenantId": "acme", "limits": {"gpuCount": 1}}
    assert api.call("policies.create", policy).status_code == 201
    assert error(api.call("policies.create", policy))["details"]["reason"] == "already_exists"
    pool = {"name": "p1", "clusterId": "c1", "mode": "exclusive", "ownerTenantId": "platform"}
    assert error(api.call("pools.create", pool))["details"] == {"poolId": "p1", "reason": "already_exists"}


def test_a_stale_generation_is_a_conflict_with_reason_generation_mismatch(api: Api) -> None:
    assert api.call("pools.update", {"id": "p1", "generation": 1}).json()["generation"] == 2
    stale = api.call("pools.update", {"id": "p1", "generation": 1})
    assert stale.status_code == 409
    assert error(stale) == {
        "code": "CONFLICT",
        "message": "pool p1 is at generation 2, not 1; read it again and retry",
        "details": {"poolId": "p1", "generation": 2, "expected": 1, "reason": "generation_mismatch"},
    }


def test_an_idempotency_key_reused_with_another_request_says_so(api: Api) -> None:
    quota = {"tenantId": "platform", "poolId": "p1", "class": "gpu.mig", "limit": 4}
    assert api.call("quotas.set", quota).status_code == 200
    body = {"tenantId": "platform", "poolId": "p1", "duration": "1h", "idempotencyKey": "k-1"}
    first = api.call("reservations.create", {**body, "devices": [{"class": "gpu.mig", "count": 1}]})
    assert first.status_code == 201, first.text
    other = api.call("reservations.create", {**body, "devices": [{"class": "gpu.mig", "count": 2}]})
    assert other.status_code == 409
    assert error(other)["code"] == "INVALID_STATE"
    assert error(other)["details"] == {"idempotencyKey": "k-1", "reason": "idempotency_key_reused"}


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
