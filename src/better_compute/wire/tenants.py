"""Tenants and the credentials that act for them (or for the whole fleet)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from better_compute.wire.common import PageQuery, WireAnswer, WireRequest


class TenantCreate(WireRequest):
    """`tenants.create`: a tenant's id is chosen by the operator and never changes."""

    id: str = Field(min_length=1, max_length=63)
    name: str = Field(min_length=1)


class TenantUpdate(WireRequest):
    """`tenants.update` (admin): a new display `name` (the only field of a tenant that changes; its
    id never does). `id` is the path's; given in the body too, it must be the same."""

    id: str | None = Field(default=None, description="The path's tenant id; may be left out.")
    name: str = Field(min_length=1, max_length=200)


class TenantPublic(WireAnswer):
    id: str
    name: str
    created_at: datetime
    deleted_at: datetime | None = None


class TenantListQuery(PageQuery):
    """`tenants.list` filters (query parameters)."""


class CredentialCreate(WireRequest):
    """`credentials.create`: a null `tenantId` makes a fleet-admin credential, so it must be explicit."""

    tenant_id: str | None
    name: str | None = None


class CredentialPublic(WireAnswer):
    """A credential as it may be shown: never its token or the token's hash. A null `tenantId` is a
    fleet-admin credential; `revokedAt` is set once it is revoked (its token no longer works)."""

    id: str
    tenant_id: str | None
    name: str | None
    created_at: datetime
    revoked_at: datetime | None = None


class CredentialListQuery(PageQuery):
    """`credentials.list` filters (query parameters)."""


class CredentialCreated(CredentialPublic):
    """The answer to `credentials.create`: the bearer `token` is shown here once and never again."""

    token: str


class WhoAmIQuery(WireRequest):
    """`credentials.whoami` takes nothing: the token says who."""


class WhoAmI(WireAnswer):
    """Who the token is: its credential, and the tenant it acts for (None with `isAdmin`: the fleet)."""

    credential_id: str
    tenant_id: str | None
    is_admin: bool
