"""Bearer tokens: every /v1 route needs one; health and the API docs stay open."""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.domain.kernel.errors import Forbidden, Unauthenticated
from better_compute.domain.tenancy.credentials import Principal, bearer_token, hash_token
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.tenancy import credentials
from better_compute.storage.store import Store
from tests.builders import T0, admin_token, api_client, at, bearer, fleet_spec, ids, tenant_token

V1_READS = ["/v1/clusters", "/v1/nodes", "/v1/gpus", "/v1/atoms", "/v1/pools", "/v1/pools/p1"]
V1_READS += ["/v1/tenants", "/v1/quotas", "/v1/policies"]


@pytest.fixture
def fleet(store: Store) -> Store:
    load_fleet(store, fleet_spec(nodes=1, layout="all-1g.10gb"), T0)
    return store


def error(response: Any) -> dict[str, Any]:
    body: dict[str, Any] = response.json()["error"]
    return body


@pytest.mark.parametrize("path", V1_READS)
def test_every_v1_read_needs_a_token(fleet: Store, path: str) -> None:
    client = api_client(fleet)
    response = client.get(path)
    assert response.status_code == 401
    assert error(response)["code"] == "UNAUTHENTICATED"
    assert response.headers["www-authenticate"] == "Bearer"
    assert client.get(path, headers=bearer(admin_token(fleet))).status_code == 200


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        pytest.param("", "missing", id="no Authorization header"),
        pytest.param("Basic dXNlcjpwYXNz", "scheme", id="a Basic credential instead of a bearer token"),
        pytest.param("Bearer", "malformed", id="Bearer without a token"),
        pytest.param("Bearer not-a-token", "malformed", id="a token without the bc_ prefix"),
        pytest.param("Bearer bc_short", "malformed", id="a token too short to be one"),
        pytest.param("Bearer bc_" + "A" * 257, "malformed", id="a token far longer than any"),
        pytest.param("Bearer bc_" + "A" * 43, "unknown", id="a well-formed token nobody issued"),
    ],
)
def test_missing_garbled_and_unknown_tokens_are_401(fleet: Store, header: str, reason: str) -> None:
    response = api_client(fleet).get("/v1/pools", headers={"Authorization": header} if header else {})
    assert response.status_code == 401
    assert error(response)["code"] == "UNAUTHENTICATED"
    assert error(response)["details"]["reason"] == reason


def test_health_and_docs_stay_open(fleet: Store) -> None:
    client = api_client(fleet)
    assert client.get("/healthz").status_code == 200
    assert client.get("/openapi.json").status_code == 200
    assert client.get("/docs").status_code == 200
    schemes = client.get("/openapi.json").json()["components"]["securitySchemes"]
    assert schemes["bearer"]["scheme"] == "bearer"


def test_a_revoked_token_stops_working_at_once(fleet: Store) -> None:
    client = api_client(fleet)
    admin = admin_token(fleet)
    created = client.post("/v1/credentials", headers=bearer(admin), json={"tenantId": "acme", "name": "ci"})
    assert created.status_code == 201
    token = created.json()["token"]
    assert token.startswith("bc_") and created.json()["tenantId"] == "acme"
    assert client.get("/v1/clusters", headers=bearer(token)).status_code == 200
    root = credentials.authenticate(fleet, admin)
    credentials.revoke(fleet, root, created.json()["id"], at(1))
    response = client.get("/v1/clusters", headers=bearer(token))
    assert response.status_code == 401
    assert error(response)["details"]["reason"] == "revoked"
    # Revoking twice is harmless; other tokens keep working.
    credentials.revoke(fleet, root, created.json()["id"], at(2))
    assert client.get("/v1/clusters", headers=bearer(admin)).status_code == 200


def test_only_the_token_hash_is_stored(fleet: Store) -> None:
    token = tenant_token(fleet, "acme")
    with fleet.read() as tx:
        rows = tx.credentials.of_tenant(None)
    assert [r.token_hash for r in rows] == [hash_token(token)]
    assert token not in str(rows)
    listed = credentials.list_credentials(fleet, credentials.authenticate(fleet, token))
    assert len(listed.items) == 1


def test_tenant_and_admin_principals(fleet: Store) -> None:
    tenant = credentials.authenticate(fleet, tenant_token(fleet, "acme"))
    admin = credentials.authenticate(fleet, admin_token(fleet))
    assert (tenant.tenant_id, tenant.is_admin) == ("acme", False)
    assert (admin.tenant_id, admin.is_admin) == (None, True)
    with pytest.raises(Forbidden):
        credentials.create(fleet, tenant, "acme", None, T0, new_id=ids().credential)


def test_only_the_admin_issues_credentials(fleet: Store) -> None:
    client = api_client(fleet)
    tenant = bearer(tenant_token(fleet, "acme"))
    admin = bearer(admin_token(fleet))
    refused = client.post("/v1/credentials", headers=tenant, json={"tenantId": "acme"})
    assert refused.status_code == 403 and error(refused)["code"] == "FORBIDDEN"
    unknown = client.post("/v1/credentials", headers=admin, json={"tenantId": "nobody"})
    assert unknown.status_code == 404 and error(unknown)["code"] == "NOT_FOUND"
    # tenantId must be given: null makes an admin credential, so leaving it out is a mistake.
    assert client.post("/v1/credentials", headers=admin, json={}).status_code == 400
    root = client.post("/v1/credentials", headers=admin, json={"tenantId": None})
    assert root.status_code == 201 and root.json()["tenantId"] is None
    assert (
        client.post(
            "/v1/tenants", headers=bearer(root.json()["token"]), json={"id": "z", "name": "Z"}
        ).status_code
        == 201
    )


def test_bearer_token_parsing() -> None:
    token = "bc_" + "x" * 43
    assert bearer_token(f"Bearer {token}") == token
    assert bearer_token(f"bearer   {token} ") == token
    for bad in (None, " ", "Token abc", f"Bearer {token}\x00", "Bearer bc_***"):
        with pytest.raises(Unauthenticated):
            bearer_token(bad)
    assert Principal("acme", False, "c").acts_for("acme")
    assert not Principal("acme", False, "c").acts_for("beta")
    assert Principal(None, True, "c").acts_for("beta")


def test_credentials_are_listed_without_tokens_and_revoked_over_http(fleet: Store) -> None:
    client = api_client(fleet)
    admin = bearer(admin_token(fleet))
    made = client.post("/v1/credentials", headers=admin, json={"tenantId": "acme", "name": "ci"}).json()
    token = made["token"]
    tenant = bearer(token)
    listed = client.get("/v1/credentials", headers=admin).json()
    assert {c["tenantId"] for c in listed["items"]} == {None, "acme"}
    assert all(set(c) == {"id", "tenantId", "name", "createdAt", "revokedAt"} for c in listed["items"])
    assert token not in str(listed) and hash_token(token) not in str(listed)
    # A tenant sees its own credentials only, and may not revoke (not even its own).
    own = client.get("/v1/credentials", headers=tenant).json()["items"]
    assert [(c["id"], c["tenantId"]) for c in own] == [(made["id"], "acme")]
    refused = client.post(f"/v1/credentials/{made['id']}/revoke", headers=tenant)
    assert refused.status_code == 403 and error(refused)["code"] == "FORBIDDEN"
    assert client.get("/v1/clusters", headers=tenant).status_code == 200
    # Admission remembers whose a token is; revoking must still stop it there at once.
    reserve = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"}
    assert client.post("/v1/reservations", headers=tenant, json=reserve).status_code != 401

    revoked = client.post(f"/v1/credentials/{made['id']}/revoke", headers=admin)
    assert revoked.status_code == 200 and revoked.json()["revokedAt"] is not None
    for response in (
        client.get("/v1/clusters", headers=tenant),
        client.post("/v1/reservations", headers=tenant, json=reserve),
    ):
        assert response.status_code == 401 and error(response)["details"]["reason"] == "revoked"
    again = client.post(f"/v1/credentials/{made['id']}/revoke", headers=admin)
    assert again.status_code == 200 and again.json()["revokedAt"] == revoked.json()["revokedAt"]
    missing = client.post("/v1/credentials/cred-nope/revoke", headers=admin)
    assert missing.status_code == 404 and error(missing)["code"] == "NOT_FOUND"
