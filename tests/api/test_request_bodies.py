"""What the API reads as a body, for every route alike: UTF-8 JSON whose objects name each key once,
in no `Content-Encoding` but `identity`. Anything else is refused with a message saying what, never
read as something the caller did not mean (the last of two `poolId`s, a UTF-16 body, gzip bytes)."""

from __future__ import annotations

import gzip
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from tests.builders import T0, admin_token, bearer, fleet_spec, real_app, tenant_token

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

RESERVATION: dict[str, Any] = {
    "poolId": "p1",
    "devices": [{"class": "gpu.mig", "count": 1}],
    "duration": "1h",
}
TENANT: dict[str, Any] = {"id": "globex", "name": "Globex"}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'bc.db'}")
    load_fleet(s, fleet_spec(nodes=1, layout="all-1g.10gb"), T0)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def http(store: Store) -> TestClient:
    return TestClient(real_app(store))


@pytest.fixture
def admin(store: Store) -> dict[str, str]:
    return bearer(admin_token(store))


@pytest.fixture
def owner(http: TestClient, store: Store, admin: dict[str, str]) -> dict[str, str]:
    """The token of the pool's owner, with quota for its MIG instances."""
    quota = {"tenantId": "platform", "poolId": "p1", "class": "gpu.mig", "limit": 8}
    assert http.put("/v1/quotas", json=quota, headers=admin).status_code == 200
    return bearer(tenant_token(store, "platform"))


def tenants(http: TestClient, admin: dict[str, str]) -> set[str]:
    return {t["id"] for t in http.get("/v1/tenants", headers=admin).json()["items"]}


def post(http: TestClient, path: str, body: bytes, headers: dict[str, str], **more: str) -> Any:
    return http.post(path, content=body, headers={**headers, "content-type": "application/json", **more})


def test_a_body_with_a_duplicate_key_is_400(
    http: TestClient, admin: dict[str, str], owner: dict[str, str]
) -> None:
    twice = (
        b'{"poolId": "nope", "poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"}'
    )
    refused = post(http, "/v1/reservations", twice, owner)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "INVALID_INPUT"
    assert refused.json()["error"]["message"] == (
        'body: duplicate key "poolId" in a JSON object; each key may appear once'
    )
    deep = b'{"id": "globex", "name": "Globex", "labels": {"a": "1", "a": "2"}}'
    nested = post(http, "/v1/tenants", deep, admin)
    assert nested.status_code == 400 and 'duplicate key "a"' in nested.json()["error"]["message"]
    assert post(http, "/v1/tenants", b'{"id": "x", "id": "globex", "name": "G"}', admin).status_code == 400
    # Nothing was made.
    assert "globex" not in tenants(http, admin)
    assert http.get("/v1/reservations", headers=owner).json()["items"] == []


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-32-be", "latin-1"])
def test_a_body_that_is_not_utf8_json_is_400(
    http: TestClient, admin: dict[str, str], owner: dict[str, str], codec: str
) -> None:
    for path, body, who in (
        ("/v1/reservations", {**RESERVATION, "idempotencyKey": "caf\u00e9"}, owner),
        ("/v1/tenants", {**TENANT, "name": "Caf\u00e9"}, admin),
    ):
        refused = post(http, path, json.dumps(body, ensure_ascii=False).encode(codec), who)
        assert refused.status_code == 400, f"{path} {codec}: {refused.text}"
        assert refused.json()["error"]["code"] == "INVALID_INPUT"
        assert refused.json()["error"]["message"].startswith("body: not UTF-8"), refused.text
    assert "globex" not in tenants(http, admin)
    assert http.get("/v1/reservations", headers=owner).json()["items"] == []


def test_a_body_in_utf8_with_a_byte_order_mark_is_400(http: TestClient, admin: dict[str, str]) -> None:
    refused = post(http, "/v1/tenants", b"\xef\xbb\xbf" + json.dumps(TENANT).encode(), admin)
    assert refused.status_code == 400, refused.text
    assert "byte order mark" in refused.json()["error"]["message"]


def test_a_body_in_a_content_encoding_the_server_does_not_decode_is_415(
    http: TestClient, admin: dict[str, str], owner: dict[str, str]
) -> None:
    for path, body, who in (("/v1/reservations", RESERVATION, owner), ("/v1/tenants", TENANT, admin)):
        for coding in ("gzip", "br", "gzip, identity", "x-nope"):
            refused = post(
                http, path, gzip.compress(json.dumps(body).encode()), who, **{"content-encoding": coding}
            )
            assert refused.status_code == 415, f"{path} {coding}: {refused.text}"
            assert refused.json()["error"] == {
                "code": "INVALID_INPUT",
                "message": f"Content-Encoding {coding} is not decoded by this server; send the body"
                " unencoded (identity)",
                "details": {"contentEncoding": coding, "accepted": ["identity"]},
            }
            assert refused.headers["accept-encoding"] == "identity"
    # Unencoded, said or not, it is read.
    said = post(http, "/v1/tenants", json.dumps(TENANT).encode(), admin, **{"content-encoding": "identity"})
    assert said.status_code == 201, said.text
    booked = post(http, "/v1/reservations", json.dumps(RESERVATION).encode(), owner)
    assert booked.status_code == 201, booked.text
