"""Credentials: `credentials.create` (admin) answers the new bearer token, shown this once;
`credentials.list` shows credentials without their tokens (a tenant sees its own);
`credentials.revoke` (admin) stops a token at once; `credentials.whoami` says who a token is."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.answers import paged
from better_compute.api.auth import PrincipalDep
from better_compute.api.deps import IdsDep, NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.tenancy.credentials import Principal
from better_compute.domain.tenancy.records import Credential
from better_compute.service.tenancy import credentials
from better_compute.service.tenancy.credentials import Issued
from better_compute.wire.common import Page
from better_compute.wire.tenants import (
    CredentialCreate,
    CredentialCreated,
    CredentialListQuery,
    CredentialPublic,
    WhoAmI,
    WhoAmIQuery,
)

router = APIRouter(prefix="/v1", tags=["credentials"], route_class=StrictQueryRoute)


@router.post("/credentials", response_model=CredentialCreated, status_code=201)
def create_credential(
    body: CredentialCreate, principal: PrincipalDep, store: StoreDep, now: NowDep, ids: IdsDep
) -> CredentialCreated:
    issued = credentials.create(store, principal, body.tenant_id, body.name, now, new_id=ids.credential)
    return credential_created(issued)


@router.get("/credentials", response_model=Page[CredentialPublic])
def list_credentials(
    q: Annotated[CredentialListQuery, Query()], principal: PrincipalDep, store: StoreDep
) -> Page[CredentialPublic]:
    listing = credentials.list_credentials(store, principal, limit=q.limit, after=q.cursor)
    return paged(listing, credential_public)


@router.post("/credentials/{id}/revoke", response_model=CredentialPublic)
def revoke_credential(id: str, principal: PrincipalDep, store: StoreDep, now: NowDep) -> CredentialPublic:
    return credential_public(credentials.revoke(store, principal, id, now))


@router.get("/whoami", response_model=WhoAmI)
def get_whoami(q: Annotated[WhoAmIQuery, Query()], principal: PrincipalDep) -> WhoAmI:
    return whoami(principal)


def credential_public(c: Credential) -> CredentialPublic:
    return CredentialPublic(
        id=c.id, tenant_id=c.tenant_id, name=c.name, created_at=c.created_at, revoked_at=c.revoked_at
    )


def credential_created(issued: Issued) -> CredentialCreated:
    c = issued.credential
    return CredentialCreated(
        id=c.id,
        tenant_id=c.tenant_id,
        name=c.name or None,
        created_at=c.created_at,
        revoked_at=c.revoked_at,
        token=issued.token,
    )


def whoami(p: Principal) -> WhoAmI:
    return WhoAmI(credential_id=p.credential_id, tenant_id=p.tenant_id, is_admin=p.is_admin)
