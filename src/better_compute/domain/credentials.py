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

from better_compute.domain.errors import Forbidden, Unauthenticated

TOKEN_PREFIX = "bc_"
_TOKEN = re.compile(r"bc_[A-Za-z0-9_-]{16,256}")


@dataclass(frozen=True)
class Principal:
    """The caller behind a token: one tenant, or the fleet admin (`tenant_id` None, `is_admin` True)."""

    tenant_id: str | None
    is_admin: bool
    credential_id: str
    recalled: bool = False
    """True when the token's owner was remembered from an earlier request rather than looked up now:
    whoever acts on it must confirm, in its own transaction, that the credential is not revoked."""

    def acts_for(self, tenant_id: str) -> bool:
        """Whether the caller may see and act on `tenant_id`'s own things (the admin acts for all)."""
        return self.is_admin or self.tenant_id == tenant_id


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
