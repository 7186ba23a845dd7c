"""Unknown query parameters are refused on every GET of /v1, naming the parameter and what to use."""

from __future__ import annotations

import re
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from tests.builders import T0, admin_token, bearer, real_app, small_fleet

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


@pytest.fixture
def store(tmp_path: Path, sqlite_template: Path) -> Iterator[Store]:
    """Two MIG pools, `p1` on node n-1 and `p2` on node n-2, on a copy of the run's migrated SQLite
    (tests/conftest.py's `sqlite_template`: a copy, not the migrations again, for each of the 93 tests)."""
    fleet: dict[str, Any] = small_fleet(nodes=2)
    first = fleet["pools"][0]
    fleet["pools"] = [{**first, "name": "p1", "nodes": ["n-1"]}, {**first, "name": "p2", "nodes": ["n-2"]}]
    shutil.copyfile(sqlite_template, tmp_path / "bc.db")
    s = Store.open(f"sqlite:///{tmp_path / 'bc.db'}", migrate_schema=False)
    load_fleet(s, parse_fleet(fleet), T0)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def http(store: Store) -> TestClient:
    client = TestClient(real_app(store))
    client.headers.update(bearer(admin_token(store)))
    return client


def served_openapi() -> dict[str, Any]:
    """The document a real app serves at /openapi.json. Read once per run of this module: building it
    takes seconds under coverage, and every app of this code serves the same one, so the per-route
    tests below look their route up here rather than have each of their 86 apps build it again."""
    store = Store.open("sqlite://")
    try:
        served = TestClient(real_app(store)).get("/openapi.json")
        assert served.status_code == 200, served.text
        document: dict[str, Any] = served.json()
    finally:
        store.close()
    return document


DOCUMENT = served_openapi()

V1_GETS = sorted(p for p, ops in DOCUMENT["paths"].items() if p.startswith("/v1/") and "get" in ops)
"""Every GET path of /v1, as the app documents them: a new route is checked without being listed."""


def documented_query_names(path: str) -> list[str]:
    operation = DOCUMENT["paths"][path]["get"]
    return [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]


def test_unknown_query_parameters_atoms_pool_id_is_refused_not_read_as_every_pool(http: TestClient) -> None:
    mine = http.get("/v1/atoms", params={"pool": "p1"})
    assert mine.status_code == 200 and {a["poolId"] for a in mine.json()["items"]} == {"p1"}
    typo = http.get("/v1/atoms", params={"poolId": "p1"})
    assert typo.status_code == 400
    assert typo.json()["error"] == {
        "code": "INVALID_INPUT",
        "message": "poolId: unknown query parameter; use pool, class, attr, bookable, limit or cursor",
        "details": {"field": "poolId", "accepted": ["pool", "class", "attr", "bookable", "limit", "cursor"]},
    }


def test_unknown_query_parameters_nodes_cluster_id_is_refused_not_read_as_every_node(
    http: TestClient,
) -> None:
    """`nodes.list` filters by `cluster`: `clusterId` (the pools' name for it) once answered every node."""
    assert len(http.get("/v1/nodes", params={"cluster": "c1"}).json()["items"]) == 2
    assert http.get("/v1/nodes", params={"cluster": "x"}).json()["items"] == []
    refused = http.get("/v1/nodes", params={"clusterId": "x"})
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "code": "INVALID_INPUT",
        "message": "clusterId: unknown query parameter; use cluster, limit or cursor",
        "details": {"field": "clusterId", "accepted": ["cluster", "limit", "cursor"]},
    }


def test_unknown_query_parameters_reservations_list_takes_its_camel_case_names_only(http: TestClient) -> None:
    assert http.get("/v1/reservations", params={"poolId": "p1", "status": "active"}).status_code == 200
    for wrong in ("pool", "pool_id"):
        refused = http.get("/v1/reservations", params={wrong: "p1"})
        assert refused.status_code == 400
        assert refused.json()["error"]["message"] == (
            f"{wrong}: unknown query parameter; use tenantId, poolId, status, limit or cursor"
        )


def test_unknown_query_parameters_a_route_without_any_says_so(http: TestClient) -> None:
    refused = http.get("/v1/pools/p1", params={"verbose": "1"})
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (
        "verbose: unknown query parameter; GET /v1/pools/{id} takes no query parameters"
    )
    assert refused.json()["error"]["details"] == {"field": "verbose", "accepted": []}


def test_unknown_query_parameters_every_v1_get_is_checked() -> None:
    assert len(V1_GETS) == 43, V1_GETS  # the parametrised test below sees them all


@pytest.mark.parametrize("route", V1_GETS)
def test_unknown_query_parameters_are_refused_on_every_v1_get(http: TestClient, route: str) -> None:
    path = re.sub(r"\{[^}]+\}", "p1", route)
    documented = documented_query_names(route)
    refused = http.get(path, params={"nope": "1"})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "INVALID_INPUT"
    assert refused.json()["error"]["message"].startswith("nope: unknown query parameter; ")
    # What the refusal offers is what OpenAPI documents, and each of those is taken.
    assert refused.json()["error"]["details"]["accepted"] == documented
    for name in documented:
        taken = http.get(path, params={name: "1"})
        assert "unknown query parameter" not in taken.text, taken.text


def test_a_repeated_query_parameter_is_400_not_its_last_value(http: TestClient) -> None:
    """`limit=1&limit=1000` once answered 1,000 items: the last value won and the first was dropped."""
    refused = http.get("/v1/atoms?pool=p1&limit=1&limit=1000")
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"] == {
        "code": "INVALID_INPUT",
        "message": "limit: repeated query parameter; give it once",
        "details": {"field": "limit"},
    }
    assert http.get("/v1/atoms?pool=p1&pool=p2").json()["error"]["details"] == {"field": "pool"}
    # A list parameter repeats: that is how a list is sent.
    listed = http.get("/v1/atoms?attr=migProfile=1g.10gb&attr=healthy=true&pool=p1")
    assert listed.status_code == 200, listed.text
    # Two spellings of one field are the field twice.
    both = http.get("/v1/policies?tenantId=acme&tenant_id=acme")
    assert both.status_code == 400 and both.json()["error"]["details"] == {"field": "tenantId"}


def test_a_repeated_query_parameter_is_400_on_other_verbs_too(http: TestClient) -> None:
    body = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"}
    for path in ("/v1/reservations?x=1&x=2", "/v1/tenants?x=1&x=2"):
        refused = http.post(path, json=body)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["details"] == {"field": "x"}


def _is_list(parameter: dict[str, Any]) -> bool:
    schema = parameter.get("schema", {})
    return schema.get("type") == "array" or any(s.get("type") == "array" for s in schema.get("anyOf", []))


@pytest.mark.parametrize("route", V1_GETS)
def test_a_repeated_query_parameter_is_400_on_every_v1_get(http: TestClient, route: str) -> None:
    path = re.sub(r"\{[^}]+\}", "p1", route)
    operation = DOCUMENT["paths"][route]["get"]
    for parameter in operation.get("parameters", []):
        if parameter["in"] != "query" or _is_list(parameter):
            continue
        name = parameter["name"]
        refused = http.get(f"{path}?{name}=1&{name}=1")
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["details"] == {"field": name}, refused.text
