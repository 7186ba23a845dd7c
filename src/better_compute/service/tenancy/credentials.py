"""Credentials: issuing bearer tokens (shown once), authenticating them, and revoking them.

Only a token's hash is stored (see `domain.tenancy.credentials`), so a token can never be shown again: the
answer to `create` is the only place it appears. Revoking keeps the row, so an audit can still name
the credential behind past calls.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime

from better_compute.domain.kernel.errors import AlreadyExists, NotFound, Unauthenticated
from better_compute.domain.tenancy.credentials import (
    TOKEN_PREFIX,
    Caller,
    Principal,
    RecalledPrincipal,
    confirmed,
    credential_to_confirm,
    hash_token,
    require_admin,
    token_revoked,
)
from better_compute.domain.tenancy.events import CredentialCreated, CredentialRevoked
from better_compute.domain.tenancy.records import Credential
from better_compute.domain.tenancy.tenancy import check_name, check_ref, tenant_not_found, tenant_scope
from better_compute.service.kernel.paging import Listing, page
from better_compute.service.kernel.ports import StorePort
from better_compute.service.tenancy.ports import TenancyTx


@dataclass(frozen=True, slots=True)
class Issued:
    """A credential just issued, with its token: the only time the token is ever shown."""

    credential: Credential
    token: str


def new_token() -> str:
    """A fresh bearer token: the prefix makes it recognisable to people and secret scanners."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def _issue(
    tx: TenancyTx, tenant_id: str | None, name: str | None, now: datetime, credential_id: str
) -> Issued:
    token = new_token()
    credential = Credential(
        id=credential_id,
        tenant_id=tenant_id,
        name="" if name is None else check_name(name, "name"),
        token_hash=hash_token(token),
        is_admin=tenant_id is None,
        created_at=now,
    )
    if not tx.credentials.add(credential):
        raise AlreadyExists("a credential with that id already exists; try again")
    tx.events.append(CredentialCreated(credential.id, tenant_id, credential.is_admin), now)
    return Issued(credential, token)


def create(
    store: StorePort[TenancyTx],
    principal: Principal,
    tenant_id: str | None,
    name: str | None,
    now: datetime,
    *,
    new_id: Callable[[], str],
) -> Issued:
    """Issue a credential for `tenant_id`, or a fleet-admin one when it is None (admin only), named
    by `new_id()` (`Ids.credential`).

    The answer carries `token`, the only time it is ever shown.
    """
    require_admin(principal, "credentials.create")
    if tenant_id is not None:
        check_ref(tenant_id, "tenantId")
    with store.begin() as tx:
        if tenant_id is not None and tx.tenants.hold(tenant_id) is None:
            raise tenant_not_found(tenant_id)
        return _issue(tx, tenant_id, name, now, new_id())


def live_admins(store: StorePort[TenancyTx]) -> int:
    """How many fleet-admin credentials are not revoked."""
    with store.read() as tx:
        return len(tx.credentials.live_admins())


def bootstrap_admin(
    store: StorePort[TenancyTx],
    now: datetime,
    *,
    new_id: Callable[[], str],
    force: bool = False,
    name: str = "bootstrap",
) -> Issued:
    """The first fleet-admin credential, made without a token (there is none yet).

    A second bootstrap is refused while a live admin credential exists, so a stray rerun cannot mint
    an extra all-powerful token unnoticed; `force` asks for one anyway.
    """
    with store.begin() as tx:
        admins = tx.credentials.live_admins()
        if admins and not force:
            raise AlreadyExists(
                f"{len(admins)} fleet-admin credential(s) already exist; "
                "use --force to add another admin token",
                {"adminCredentials": len(admins)},
            )
        return _issue(tx, None, name, now, new_id())


def authenticate(store: StorePort[TenancyTx], token: str) -> Principal:
    """The principal a well-formed token stands for; unknown or revoked tokens are UNAUTHENTICATED."""
    with store.read() as tx:
        owner = tx.credentials.owner_of(hash_token(token))
    if owner is None:
        raise Unauthenticated("unknown token", {"reason": "unknown"})
    if not owner.live:
        raise token_revoked()
    return Principal(
        tenant_id=None if owner.is_admin else owner.tenant_id,
        is_admin=owner.is_admin,
        credential_id=owner.credential_id,
    )


def confirm_live(tx: TenancyTx, caller: Caller) -> Principal:
    """`caller` as a `Principal` for the rest of `tx`: a recalled one once `tx` reads that its
    credential is not revoked (a use case whose own read brings the credential uses `confirmed`)."""
    credential_id = credential_to_confirm(caller)
    if credential_id is None:
        return confirmed(caller, None)
    found = tx.credentials.get(credential_id)
    return confirmed(caller, found is not None and found.live)


class TokenMemory:
    """Whom the tokens this process has seen belong to, so a busy route need not look each one up.

    A token's owner (its credential, tenant, admin or not) never changes; only revocation does. So a
    remembered owner is handed out as a `RecalledPrincipal`, which is no `Principal`: the use case
    confirms the credential is still live inside its own transaction (reservations.create does, in
    the read it makes anyway) before it has a principal to decide on. A revoked token is refused at
    once, by every process, as with a fresh look-up.
    """

    def __init__(self, capacity: int = 10_000) -> None:
        self._owners: dict[str, RecalledPrincipal] = {}
        self._capacity = capacity
        self._lock = threading.Lock()

    def recall(self, token_hash: str) -> RecalledPrincipal | None:
        with self._lock:
            return self._owners.get(token_hash)

    def remember(self, token_hash: str, principal: Principal) -> None:
        with self._lock:
            if len(self._owners) >= self._capacity:
                self._owners.pop(next(iter(self._owners)))  # the oldest: tokens in use come back
            self._owners[token_hash] = principal.remembered()

    def forget(self, token_hash: str) -> None:
        with self._lock:
            self._owners.pop(token_hash, None)


def identify(store: StorePort[TenancyTx], memory: TokenMemory, token: str) -> Caller:
    """The token's caller: remembered (a `RecalledPrincipal`, for the caller's transaction to
    confirm) or looked up now, as `authenticate` does, and remembered for next time."""
    token_hash = hash_token(token)
    found = memory.recall(token_hash)
    if found is not None:
        return found
    principal = authenticate(store, token)
    memory.remember(token_hash, principal)
    return principal


@contextmanager
def acting_as(store: StorePort[TenancyTx], memory: TokenMemory, token: str) -> Iterator[Caller]:
    """`identify` for the length of a use case that confirms a recalled principal itself.

    Whatever refuses the request inside, a recalled token is confirmed first, so that a revoked
    token is answered UNAUTHENTICATED as it would be after a fresh look-up; a token found revoked
    is forgotten.
    """
    caller = identify(store, memory, token)
    try:
        yield caller
    except Unauthenticated:
        memory.forget(hash_token(token))
        raise
    except Exception:
        if isinstance(caller, RecalledPrincipal):
            try:
                authenticate(store, token)
            except Unauthenticated:
                memory.forget(hash_token(token))
                raise
        raise


def revoke(
    store: StorePort[TenancyTx], principal: Principal, credential_id: str, now: datetime
) -> Credential:
    """Revoke a credential (admin only); its token stops working at once. Revoking twice is harmless."""
    require_admin(principal, "credentials.revoke")
    with store.begin() as tx:
        found = tx.credentials.get(credential_id)
        if found is None:
            raise NotFound(f"credential {credential_id} not found", {"credentialId": credential_id})
        if found.live and tx.credentials.revoke(credential_id, now):
            tx.events.append(CredentialRevoked(credential_id, found.tenant_id), now)
            found = replace(found, revoked_at=now)
        return found


def list_credentials(
    store: StorePort[TenancyTx], principal: Principal, *, limit: int | None = None, after: str | None = None
) -> Listing[Credential]:
    """Credentials (the API never shows their hashes); a tenant sees only its own (`tenant_scope`)."""
    scope = tenant_scope(principal, None)
    with store.read() as tx:
        found = tx.credentials.of_tenant(scope)
    return page(found, lambda c: c.id, limit, after)
