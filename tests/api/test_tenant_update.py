"""`tenants.update` (`PATCH /v1/tenants/{id}`) through the real app, on SQLite and PostgreSQL: the admin
renames a tenant, `tenant.updated` is logged with both names, the id never changes; a tenant token, a
deleted tenant, a body naming another tenant and a bad name are refused. On PostgreSQL a rename racing
a delete waits for it and finds the tenant gone."""

from __future__ import annotations

import threading

import pytest

from better_compute.domain.kernel.errors import NotFound
from better_compute.domain.tenancy.credentials import Principal
from better_compute.service.tenancy import tenants
from better_compute.storage.store import Store
from tests.api.test_reservations import World, error
from tests.builders import T0, stored_events


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


@pytest.mark.both_stores
def test_the_admin_renames_a_tenant_and_the_change_is_logged(world: World, store: Store) -> None:
    r = world.http.patch("/v1/tenants/acme", json={"name": "Acme Research"}, headers=world.admin)
    assert r.status_code == 200, r.text
    assert r.json()["id"] == "acme" and r.json()["name"] == "Acme Research"
    listed = world.http.get("/v1/tenants", headers=world.acme).json()["items"]
    assert [(t["id"], t["name"]) for t in listed] == [("acme", "Acme Research")]
    (logged,) = stored_events(store, "tenant.updated")
    assert logged["subject"] == "acme"
    assert logged["payload"] == {"name": "Acme Research", "previousName": "acme"}
    # The tenant reads its own change in its events.
    seen = world.http.get("/v1/events", params={"type": "tenant.updated"}, headers=world.acme).json()
    assert [e["subject"] for e in seen["items"]] == ["acme"]

    again = world.http.patch(
        "/v1/tenants/acme", json={"id": "acme", "name": "Acme Research"}, headers=world.admin
    )
    assert again.status_code == 200
    assert len(stored_events(store, "tenant.updated")) == 1  # the same name changes nothing


@pytest.mark.parametrize(
    ("who", "path", "body", "status", "code"),
    [
        ("acme", "/v1/tenants/acme", {"name": "x"}, 403, "FORBIDDEN"),
        ("admin", "/v1/tenants/nobody", {"name": "x"}, 404, "NOT_FOUND"),
        ("admin", "/v1/tenants/acme", {"id": "beta", "name": "x"}, 400, "INVALID_INPUT"),
        ("admin", "/v1/tenants/acme", {"name": ""}, 400, "INVALID_INPUT"),
        ("admin", "/v1/tenants/acme", {"name": "two\nlines"}, 400, "INVALID_INPUT"),
        ("admin", "/v1/tenants/acme", {"name": "x" * 201}, 400, "INVALID_INPUT"),
        ("admin", "/v1/tenants/acme", {"name": "x", "weight": 2}, 400, "INVALID_INPUT"),
        ("admin", "/v1/tenants/acme", {}, 400, "INVALID_INPUT"),
    ],
)
def test_a_rename_is_refused_with_the_right_code(
    world: World, store: Store, who: str, path: str, body: dict[str, object], status: int, code: str
) -> None:
    headers = world.admin if who == "admin" else world.acme
    r = world.http.patch(path, json=body, headers=headers)
    assert r.status_code == status, r.text
    assert error(r)["code"] == code
    assert stored_events(store, "tenant.updated") == []


@pytest.mark.both_stores
def test_a_deleted_tenant_is_not_renamed(world: World) -> None:
    assert world.http.delete("/v1/tenants/acme", headers=world.admin).status_code == 200
    r = world.http.patch("/v1/tenants/acme", json={"name": "Back"}, headers=world.admin)
    assert r.status_code == 404 and error(r)["code"] == "NOT_FOUND"


@pytest.mark.postgres_only  # SQLite serialises writers: there is no race to lose
def test_a_rename_racing_a_delete_waits_and_finds_the_tenant_gone(world: World, store: Store) -> None:
    admin = Principal(credential_id="admin", tenant_id=None, is_admin=True)
    outcome: list[object] = []
    with store.begin() as tx:
        # A delete under way holds the tenant's row (tenants.delete's lock) ...
        assert tx.tenants.lock("acme") is not None

        def rename() -> None:
            try:
                outcome.append(tenants.update(store, admin, "acme", "Late", T0))
            except NotFound as exc:
                outcome.append(exc)

        racer = threading.Thread(target=rename)
        racer.start()
        racer.join(0.5)
        assert racer.is_alive()  # ... so the rename waits for it
        tx.tenants.mark_deleted("acme", T0)
    racer.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], NotFound)
    assert stored_events(store, "tenant.updated") == []
