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
    ├── Conflict                     CONFLICT               409
    │   └── BookingConflict          CONFLICT  (names the atom and when it is free)
    ├── QuotaExceeded                QUOTA_EXCEEDED         409
    └── InsufficientCapacity         INSUFFICIENT_CAPACITY  409

Each error carries a stable ``code``, a human ``message`` (some are quoted in docs/concepts.md and
docs/api.md#errors and are part of the interface) and JSON-able ``details``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar


class DomainError(Exception):
    """Base of every refusal the system can explain to a user."""

    code: ClassVar[str] = "INTERNAL"

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details or {}

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


class Conflict(DomainError):
    code = "CONFLICT"


class QuotaExceeded(DomainError):
    code = "QUOTA_EXCEEDED"


class InsufficientCapacity(DomainError):
    code = "INSUFFICIENT_CAPACITY"


class BookingConflict(Conflict):
    """Another booking holds the atom in the window; ``free_from`` is when it is next free (None: never)."""

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


ALL_CODES: tuple[str, ...] = (
    InvalidInput.code,
    Unauthenticated.code,
    Forbidden.code,
    NotFound.code,
    InvalidState.code,
    Conflict.code,
    QuotaExceeded.code,
    InsufficientCapacity.code,
)
