"""Who is calling: bearer tokens, the principal a token stands for, and what only the admin may do.

A token is `bc_` followed by 43 url-safe characters (32 random bytes). That is far too much entropy to
guess, so the store keeps only its SHA-256: a leaked credentials table yields no usable token, and
looking a token up by its hash needs no constant-time comparison (the hash is not the secret). Making a
token needs randomness, so it happens outside the domain; everything here is a pure check.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from better_compute.domain.kernel.errors import Forbidden, Unauthenticated

TOKEN_PREFIX = "bc_"
_TOKEN = re.compile(r"bc_[A-Za-z0-9_-]{16,256}")


@dataclass(frozen=True)
class Principal:
    """The caller behind a token whose credential is known to be live in this request: one tenant, or
    the fleet admin (`tenant_id` None, `is_admin` True).

    Two steps make one for a request: a fresh look-up of the token
    (`service.tenancy.credentials.authenticate`), and `RecalledPrincipal.confirm` from what the use
    case's own transaction read. So whatever takes a `Principal` may rely on the revocation check
    having been made; it never makes one itself.
    """

    tenant_id: str | None
    is_admin: bool
    credential_id: str

    def acts_for(self, tenant_id: str) -> bool:
        """Whether the caller may see and act on `tenant_id`'s own things (the admin acts for all)."""
        return self.is_admin or self.tenant_id == tenant_id

    def remembered(self) -> RecalledPrincipal:
        """This principal as a process remembers it for the token's next request: its owner, which
        never changes, without the liveness, which may (a revocation)."""
        return RecalledPrincipal(self.tenant_id, self.is_admin, self.credential_id)


@dataclass(frozen=True)
class RecalledPrincipal:
    """Whom a remembered token belongs to, not yet known to be live: its credential may have been
    revoked since, by any process.

    It is not a `Principal`, nor a subclass of one, so a use case that takes a `Principal` cannot be
    given one (mypy refuses it). A use case that accepts a `Caller` turns it into a `Principal` with
    `confirm`, from its own transaction's read of the credential, before it decides anything on it.
    Until then only who the caller claims to be is known, which is enough to choose what to read.
    """

    tenant_id: str | None
    is_admin: bool
    credential_id: str

    def confirm(self, credential_live: bool) -> Principal:
        """The principal, once the caller's transaction read that the credential is live; a revoked
        (or vanished) credential is refused as a fresh look-up would refuse it."""
        if not credential_live:
            raise token_revoked()
        return Principal(self.tenant_id, self.is_admin, self.credential_id)


Caller = Principal | RecalledPrincipal
"""Who a use case that confirms remembered tokens itself may be called by."""


def credential_to_confirm(caller: Caller) -> str | None:
    """The credential whose liveness the caller's transaction must read; None for a `Principal`."""
    return caller.credential_id if isinstance(caller, RecalledPrincipal) else None


def confirmed(caller: Caller, credential_live: bool | None) -> Principal:
    """`caller` as a `Principal`: as it is when it is one, else confirmed from `credential_live`,
    what the transaction read of `credential_to_confirm(caller)` (None: nothing was read, refused)."""
    if isinstance(caller, Principal):
        return caller
    return caller.confirm(credential_live is True)


def hash_token(token: str) -> str:
    """What the store keeps of a token: its SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def bearer_token(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer <token>` header, refused with a reason a person can act on.

    The shape is checked before any lookup, so a garbled header never reaches the database.
    """
    if authorization is None or not authorization.strip():
        raise Unauthenticated(
            "this call needs a token: send 'Authorization: Bearer <token>'", {"reason": "missing"}
        )
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise Unauthenticated("the Authorization header must be 'Bearer <token>'", {"reason": "scheme"})
    token = token.strip()
    if not _TOKEN.fullmatch(token):
        raise Unauthenticated(
            f"malformed token: better-compute tokens are {TOKEN_PREFIX!r} and 16 to 256 letters, digits,"
            " '-' or '_'",
            {"reason": "malformed"},
        )
    return token


def require_admin(principal: Principal, action: str) -> None:
    """Refuse a fleet-admin action to a tenant token: FORBIDDEN, since the caller is known but not allowed."""
    if not principal.is_admin:
        raise Forbidden(f"{action} needs a fleet-admin token", {"action": action})


def token_revoked() -> Unauthenticated:
    """The refusal of a token whose credential was revoked, wherever that is found out."""
    return Unauthenticated("this token was revoked", {"reason": "revoked"})
