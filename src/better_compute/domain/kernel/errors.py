"""Every error a user can see, named after the rule it enforces.

The tree::

    DomainError                      code                   HTTP (mapped once, in api/errors.py)
    ├── InvalidInput                 INVALID_INPUT          400
    │   ├── UnknownProfile           INVALID_INPUT
    │   └── LayoutRefused            INVALID_INPUT
    ├── Unauthenticated              UNAUTHENTICATED        401
    ├── Forbidden                    FORBIDDEN              403
    ├── NotFound                     NOT_FOUND              404
    ├── InvalidState                 INVALID_STATE          409
    │   ├── SingleTenantPool         INVALID_STATE  reason single_tenant_pool
    │   ├── IdempotencyKeyReused     INVALID_STATE  reason idempotency_key_reused
    │   └── NowhereToGo              INVALID_STATE  reason nowhere_to_go
    ├── Conflict                     CONFLICT               409 (never raised itself: one of below)
    │   ├── BookingConflict          CONFLICT  reason atom_booked (names the atom and when it is free)
    │   ├── GenerationMismatch       CONFLICT  reason generation_mismatch
    │   ├── AlreadyExists            CONFLICT  reason already_exists
    │   ├── ConcurrentChange         CONFLICT  reason concurrent_change
    │   └── GpuOwnedElsewhere        CONFLICT  reason GpuOwnedElsewhere (names the uuids)
    ├── QuotaExceeded                QUOTA_EXCEEDED         409
    ├── InsufficientCapacity         INSUFFICIENT_CAPACITY  409 (never raised itself: one of below)
    │   ├── AllBusy                  INSUFFICIENT_CAPACITY  reason all_busy (with the earliest start)
    │   └── NotInPool                INSUFFICIENT_CAPACITY  reason not_in_pool (says what the pool has)
    └── Unavailable                  UNAVAILABLE            503 (the store cannot be reached or written)

Each error carries a stable ``code``, a human ``message`` (some are quoted in docs/concepts.md and
docs/api.md#errors and are part of the interface) and JSON-able ``details``. A code is what a
caller branches on; where one code covers refusals a caller must still tell apart (a stale
generation is re-read and retried, a name already taken is not), the subclass sets ``reason`` and
every answer of it carries ``details.reason``. The codes and reasons are spelled once more in
``wire/codes.py`` (the domain imports nothing of ours); tests/tripwires keeps the two equal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar


class DomainError(Exception):
    """Base of every refusal the system can explain to a user."""

    code: ClassVar[str] = "INTERNAL"
    reason: ClassVar[str | None] = None
    """Set by the errors a caller tells apart within their code; it is sent as ``details.reason``."""

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details or {}
        if self.reason is not None:
            self.details = {**self.details, "reason": self.reason}

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}


class InvalidInput(DomainError):
    code = "INVALID_INPUT"


class UnknownProfile(InvalidInput):
    """A MIG profile the GPU model does not offer; ``details`` names the profile, model and reason."""


class LayoutRefused(InvalidInput):
    """A layout whose instances cannot all exist on the GPU at once.

    ``details`` carries ``profile`` (the instance that does not fit), ``reason`` (a stable code such as
    ``memory_slices_exceeded``) and ``model``.
    """


class Unauthenticated(DomainError):
    code = "UNAUTHENTICATED"


class Forbidden(DomainError):
    code = "FORBIDDEN"


class NotFound(DomainError):
    code = "NOT_FOUND"


class InvalidState(DomainError):
    code = "INVALID_STATE"


class SingleTenantPool(InvalidState):
    """timeslice and mps pools serve their owner only: they cannot be offered to another tenant."""

    reason = "single_tenant_pool"


class IdempotencyKeyReused(InvalidState):
    """An idempotency key names its first request: the same key with another request is refused."""

    reason = "idempotency_key_reused"


class NowhereToGo(InvalidState):
    """A drain that would take replicas away with no other cluster to hold them: they would end and
    wait as unplaced. Refused unless the caller says `force`, so that moving work out of a cluster
    never empties a workload by surprise; ``details.replicas`` is how many would have nowhere to go."""

    reason = "nowhere_to_go"


class Conflict(DomainError):
    """The request lost to the state of the fleet; a subclass says how (``details.reason``)."""

    code = "CONFLICT"


class GenerationMismatch(Conflict):
    """A write that named a ``generation`` finds the object at another: read it again, then decide."""

    reason = "generation_mismatch"


class AlreadyExists(Conflict):
    """The id or name is taken: a caller picks another rather than retrying as it is."""

    reason = "already_exists"


class ConcurrentChange(Conflict):
    """Requests running at once changed what this one decided on, more often than the server retries
    by itself; sending the same request again may succeed."""

    reason = "concurrent_change"


class GpuOwnedElsewhere(Conflict):
    """A node's inventory names a GPU uuid, or a MIG instance's `MIG-…` uuid, that another node
    holds (domain.fleet.gpu_owners): the report is refused whole and changes nothing. ``details.uuids``
    names them; the message says how a GPU that really moved is let go."""

    reason = "GpuOwnedElsewhere"

    def __init__(
        self, message: str, details: dict[str, Any] | None = None, owners: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message, details)
        self.owners: dict[str, str] = dict(owners or {})
        """Each uuid and the node holding it: for the admin (the refusal's event, `doctor`), never
        in the answer to the node."""


class QuotaExceeded(DomainError):
    code = "QUOTA_EXCEEDED"


class InsufficientCapacity(DomainError):
    code = "INSUFFICIENT_CAPACITY"


class AllBusy(InsufficientCapacity):
    """What was asked for exists in the pool, but not enough of it is free in the window; waiting
    (``details.earliestStart``) or a shorter window may serve it."""

    reason = "all_busy"


class NotInPool(InsufficientCapacity):
    """The pool never had enough of what was asked for (a whole GPU in a pool whose GPUs are all
    split, a selector no atom matches): waiting will not help, so the answer says what the pool has."""

    reason = "not_in_pool"


class Unavailable(DomainError):
    """The store cannot be reached (the database is down, restarting or out of connections) or cannot
    be written (a read-only file): nothing was applied, and the same request may succeed later.

    Raised by the storage layer alone, which tells these apart from faults of our own (a broken
    statement stays an internal error). `retry_after` is how many seconds a caller should wait before
    it sends the request again (HTTP's `Retry-After`). `read_only`: the store answers reads and refuses
    writes (it is not down; an operator must make it writable). `cause` is the database driver's own
    words, for the operator (a command's error line); it is never sent to a caller, whom it would tell
    where the database is."""

    code = "UNAVAILABLE"

    def __init__(self, message: str, *, retry_after: int, read_only: bool = False, cause: str = "") -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.read_only = read_only
        self.cause = cause


class BookingConflict(Conflict):
    """Another booking holds the atom in the window; ``free_from`` is when it is next free (None: never)."""

    reason = "atom_booked"

    def __init__(self, atom_id: str, free_from: datetime | None, message: str | None = None) -> None:
        self.atom_id = atom_id
        self.free_from = free_from
        text = message or (
            f"atom {atom_id} is already booked in that window"
            + (f"; it is free from {free_from.isoformat()}" if free_from else "; it is held open-ended")
        )
        super().__init__(
            text,
            {"atomId": atom_id, "freeFrom": free_from.isoformat() if free_from else None},
        )


def listed(ids: Sequence[str], shown: int = 5) -> str:
    """Ids a refusal names, the first `shown` of them: `a, b, c, ...`; the full list goes in details."""
    return ", ".join(ids[:shown]) + (", ..." if len(ids) > shown else "")
