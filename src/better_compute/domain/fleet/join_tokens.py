"""Join tokens: how an admin lets one node register its signing key, once.

A join token is `bcj_` and 43 url-safe characters (32 random bytes), made outside the domain (it needs
randomness) and kept only as its SHA-256, like a bearer token (`domain.tenancy.credentials.hash_token`). It
names one node, expires (an hour after it is made unless the admin asks for less) and is spent by
the first join that presents it: a token that leaks after use, or sits unused in a log, is worth
nothing. Everything here is a pure check of those rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from better_compute.domain.kernel.errors import InvalidInput, Unauthenticated

JOIN_TOKEN_PREFIX = "bcj_"
_JOIN_TOKEN = re.compile(r"bcj_[A-Za-z0-9_-]{16,256}")

JOIN_TOKEN_TTL = timedelta(hours=1)
"""How long a join token is valid when the admin does not say: long enough to provision a machine,
short enough that a forgotten token is soon worthless."""

MAX_JOIN_TOKEN_TTL = timedelta(hours=24)
"""The longest validity an admin may ask for (`nodes.joinToken`'s `ttlSeconds`)."""

MIN_JOIN_TOKEN_TTL = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class JoinToken:
    """A join token's record: its hash, the node it admits, and whether it can still be spent."""

    token_hash: str
    node_id: str
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None = None

    def usable(self, now: datetime) -> bool:
        return self.used_at is None and now < self.expires_at


def token_ttl(seconds: int | None) -> timedelta:
    """The validity a `nodes.joinToken` call asks for (None: the default hour), within the bounds."""
    if seconds is None:
        return JOIN_TOKEN_TTL
    ttl = timedelta(seconds=seconds)
    if not MIN_JOIN_TOKEN_TTL <= ttl <= MAX_JOIN_TOKEN_TTL:
        raise InvalidInput(
            f"ttlSeconds must be between {int(MIN_JOIN_TOKEN_TTL.total_seconds())} and"
            f" {int(MAX_JOIN_TOKEN_TTL.total_seconds())}, not {seconds}",
            {"field": "ttlSeconds"},
        )
    return ttl


def check_join_token(token: str) -> str:
    """A join token as presented, refused by its shape before any look-up."""
    if not _JOIN_TOKEN.fullmatch(token):
        raise join_refused("malformed", "a join token is 'bcj_' and 16 to 256 letters, digits, '-' or '_'")
    return token


def join_refused(reason: str, message: str | None = None) -> Unauthenticated:
    """The one refusal of a join: the same for an unknown, spent, expired or foreign token, so that
    a guesser learns nothing about which tokens exist (`details.reason` says only `join_token`, or
    `malformed` for a token that could never be one)."""
    text = message or "this join token is unknown, already used, expired, or for another node"
    return Unauthenticated(text, {"reason": "malformed" if reason == "malformed" else "join_token"})
