"""Credentials: `credentials.create` (admin) answers the new bearer token, shown this once."""

from __future__ import annotations

from fastapi import APIRouter

from better_compute.api.auth import PrincipalDep
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.shapes import public
from better_compute.service import credentials
from better_compute.wire.tenants import CredentialCreate, CredentialCreated

router = APIRouter(prefix="/v1", tags=["credentials"])


@router.post("/credentials", response_model=CredentialCreated, status_code=201)
def create_credential(
    body: CredentialCreate, principal: PrincipalDep, store: StoreDep, now: NowDep
) -> CredentialCreated:
    row = credentials.create(store, principal, body.tenant_id, body.name, now)
    return public(CredentialCreated, {**row, "name": row["name"] or None})
