"""Exceptions raised by the client: one per error code the API can answer.

The tree::

    ComputeError                     .code                  HTTP
    ├── InvalidInputError            INVALID_INPUT          400
    ├── UnauthenticatedError         UNAUTHENTICATED        401
    ├── ForbiddenError               FORBIDDEN              403
    ├── NotFoundError                NOT_FOUND              404
    ├── InvalidStateError            INVALID_STATE          409
    ├── ConflictError                CONFLICT               409
    ├── QuotaExceededError           QUOTA_EXCEEDED         409
    ├── InsufficientCapacityError    INSUFFICIENT_CAPACITY  409
    └── TransportError               TRANSPORT              (no answer: connection refused, reset...)

An answer with a code this client does not know raises `ComputeError` itself, with that code.
Every error has `.code`, `.message`, `.details` (a dict) and `.status_code` (None without an answer).
"""

from __future__ import annotations

from typing import Any, ClassVar


class ComputeError(Exception):
    """Base of every error the client raises for a refused or failed call."""

    code_name: ClassVar[str] = "UNKNOWN"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: dict[str, Any] | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code: str = code or self.code_name
        self.message = message
        self.details: dict[str, Any] = details or {}
        self.status_code = status_code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """The error in the API's own shape: `{"error": {"code", "message", "details"}}`."""
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}


class InvalidInputError(ComputeError):
    code_name = "INVALID_INPUT"


class UnauthenticatedError(ComputeError):
    code_name = "UNAUTHENTICATED"


class ForbiddenError(ComputeError):
    code_name = "FORBIDDEN"


class NotFoundError(ComputeError):
    code_name = "NOT_FOUND"


class InvalidStateError(ComputeError):
    code_name = "INVALID_STATE"


class ConflictError(ComputeError):
    code_name = "CONFLICT"


class QuotaExceededError(ComputeError):
    code_name = "QUOTA_EXCEEDED"


class InsufficientCapacityError(ComputeError):
    code_name = "INSUFFICIENT_CAPACITY"


class TransportError(ComputeError):
    """The call got no answer: the server could not be reached or the connection broke."""

    code_name = "TRANSPORT"


ERRORS_BY_CODE: dict[str, type[ComputeError]] = {
    cls.code_name: cls
    for cls in (
        InvalidInputError,
        UnauthenticatedError,
        ForbiddenError,
        NotFoundError,
        InvalidStateError,
        ConflictError,
        QuotaExceededError,
        InsufficientCapacityError,
    )
}

_CODES_BY_STATUS = {
    400: "INVALID_INPUT",
    401: "UNAUTHENTICATED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    422: "INVALID_INPUT",
}


def error_from_answer(status_code: int, payload: Any, text: str) -> ComputeError:
    """The exception for a refused call, from its status and (when it has the API's shape) its body."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        code: str = error["code"]
        message = str(error.get("message") or code)
        details = error.get("details")
        cls = ERRORS_BY_CODE.get(code, ComputeError)
        return cls(
            message,
            code=code,
            details=details if isinstance(details, dict) else {},
            status_code=status_code,
        )
    code = _CODES_BY_STATUS.get(status_code, f"HTTP_{status_code}")
    cls = ERRORS_BY_CODE.get(code, ComputeError)
    body = payload if isinstance(payload, dict) else {"body": text[:2000]}
    return cls(f"HTTP {status_code} without an error body", code=code, details=body, status_code=status_code)
