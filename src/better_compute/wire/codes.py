"""Error codes and reasons: what a refusal's `code` and `details.reason` may say on the wire.

A caller branches on `code` (`{"error": {"code": "CONFLICT", ...}}`); within one code, `details.reason`
tells apart the refusals a caller handles differently (a stale generation is read again and retried, a
name already taken is not). The server's error mapping, the client's exceptions and the CLI all use
these constants, so a code is spelt once on this side of the wire; the domain's errors spell them for
the server side, and tests/tripwires keeps both lists equal.
"""

from __future__ import annotations

from typing import Final

# Codes the server answers with; each has a client exception (client/_errors.py).
INVALID_INPUT: Final = "INVALID_INPUT"
UNAUTHENTICATED: Final = "UNAUTHENTICATED"
FORBIDDEN: Final = "FORBIDDEN"
NOT_FOUND: Final = "NOT_FOUND"
METHOD_NOT_ALLOWED: Final = "METHOD_NOT_ALLOWED"
INVALID_STATE: Final = "INVALID_STATE"
CONFLICT: Final = "CONFLICT"
QUOTA_EXCEEDED: Final = "QUOTA_EXCEEDED"
INSUFFICIENT_CAPACITY: Final = "INSUFFICIENT_CAPACITY"
INTERNAL: Final = "INTERNAL"
UNAVAILABLE: Final = "UNAVAILABLE"
"""503: the server's database cannot be reached or written now; nothing was applied. Send the request
again after the answer's `Retry-After` seconds."""

SERVER_CODES: Final[tuple[str, ...]] = (
    INVALID_INPUT,
    UNAUTHENTICATED,
    FORBIDDEN,
    NOT_FOUND,
    METHOD_NOT_ALLOWED,
    INVALID_STATE,
    CONFLICT,
    QUOTA_EXCEEDED,
    INSUFFICIENT_CAPACITY,
    INTERNAL,
    UNAVAILABLE,
)
"""Every code a server answers with."""

# Codes only the client gives, for calls that got no answer of the API's.
TRANSPORT: Final = "TRANSPORT"
"""No answer came: the server could not be reached, or the connection broke."""
UNEXPECTED_RESPONSE: Final = "UNEXPECTED_RESPONSE"
"""An answer that is not the API's: not JSON, or not the shape the method answers."""

# `details.reason`, by code.
GENERATION_MISMATCH: Final = "generation_mismatch"
"""CONFLICT: the object is at another `generation` than the one the request named; read it again."""
ALREADY_EXISTS: Final = "already_exists"
"""CONFLICT: the id or name is taken; pick another rather than retrying as it is."""
ATOM_BOOKED: Final = "atom_booked"
"""CONFLICT: another booking holds the atom (`details.atomId`) until `details.freeFrom`."""
CONCURRENT_CHANGE: Final = "concurrent_change"
"""CONFLICT: requests running at once kept changing what this one decided on; sending it again may
succeed."""
GPU_OWNED_ELSEWHERE: Final = "GpuOwnedElsewhere"
"""CONFLICT: a node's inventory names a GPU (or MIG) uuid another node holds (`details.uuids`); the
report changed nothing. An admin lets a GPU that really moved go with `nodes.releaseGpu`."""
SINGLE_TENANT_POOL: Final = "single_tenant_pool"
"""INVALID_STATE: timeslice and mps pools serve their owner only."""
IDEMPOTENCY_KEY_REUSED: Final = "idempotency_key_reused"
"""INVALID_STATE: the idempotency key was used with a different request."""
NOWHERE_TO_GO: Final = "nowhere_to_go"
"""INVALID_STATE: a drain would take replicas away that no other cluster can take now
(`details.replicas` says how many); send it with `force: true` to drain anyway."""

ALL_BUSY: Final = "all_busy"
"""INSUFFICIENT_CAPACITY: what was asked for exists in the pool but is busy; `details.earliestStart`
says when it could be served (None: not within what is booked now)."""
NOT_IN_POOL: Final = "not_in_pool"
"""INSUFFICIENT_CAPACITY: the pool has not enough of what was asked for at all (a whole GPU where every
GPU is split, a selector nothing matches); the message says what the pool has. Waiting will not help."""

REASONS: Final[dict[str, tuple[str, ...]]] = {
    CONFLICT: (GENERATION_MISMATCH, ALREADY_EXISTS, ATOM_BOOKED, CONCURRENT_CHANGE, GPU_OWNED_ELSEWHERE),
    INVALID_STATE: (SINGLE_TENANT_POOL, IDEMPOTENCY_KEY_REUSED, NOWHERE_TO_GO),
    INSUFFICIENT_CAPACITY: (ALL_BUSY, NOT_IN_POOL),
}
"""The reasons each code may carry; every CONFLICT and every INSUFFICIENT_CAPACITY carries one."""
