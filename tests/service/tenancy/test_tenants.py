"""Tenant use cases that no route serves yet hold to the visibility rule all the same
(docs/api.md#conventions): another tenant is NOT_FOUND to a tenant token, as a missing one is."""

from __future__ import annotations

import pytest

from better_compute.domain.kernel.errors import NotFound
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.tenancy import tenants
from better_compute.storage.store import Store
from tests.builders import T0, small_fleet

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="admin")
ACME = Principal(tenant_id="acme", is_admin=False, credential_id="acme")


def test_tenants_get_answers_another_tenant_like_a_missing_one(store: Store) -> None:
    load_fleet(store, parse_fleet(small_fleet()), T0)  # tenants platform and acme
    assert tenants.get(store, ACME, "acme").id == "acme"
    assert tenants.get(store, ADMIN, "platform").id == "platform"
    refusals = []
    for other in ("platform", "no-such-tenant"):
        with pytest.raises(NotFound) as refused:
            tenants.get(store, ACME, other)
        refusals.append(refused.value.to_dict())
    assert refusals == [
        {"code": "NOT_FOUND", "message": f"tenant {t} not found", "details": {"tenantId": t}}
        for t in ("platform", "no-such-tenant")
    ]
    with pytest.raises(NotFound, match="tenant no-such-tenant not found"):
        tenants.get(store, ADMIN, "no-such-tenant")
