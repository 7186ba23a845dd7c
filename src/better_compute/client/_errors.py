"""Exceptions raised by the client: one per error code the API can answer.

The tree::

    ComputeError                     .code                  HTTP
    ├── InvalidInputError            INVALID_INPUT          400
    ├── UnauthenticatedError         UNAUTHENTICATED        401
    ├── ForbiddenError               FORBIDDEN              403
    ├── NotFoundError                NOT_FOUND              404
    ├── MethodNotAllowedError        METHOD_NOT_ALLOWED     405
    ├── InvalidStateError            INVALID_STATE          409
    ├── ConflictError                CONFLICT               409
    ├── QuotaExceededError           QUOTA_EXCEEDED         409
    ├── InsufficientCapacityError    INSUFFICIENT_CAPACITY  409
    ├── InternalError                INTERNAL               500
    ├── UnavailableError             UNAVAILABLE            503 (the server's database is down: retry later)
    └── TransportError               TRANSPORT              (no answer: connection refused, reset...)

An answer with a code this client does not know raises `ComputeError` itself, with that code.
Every error has `.code`, `.message`, `.details` (a dict), `.reason` (`details.reason`: which refusal
of its code it is, such as `generation_mismatch` for a CONFLICT; see `wire/codes.py`) and
`.status_code` (None without an answer).
"""

from __future__ import annotations

from typing import Any, ClassVar

from better_compute.wire import codes


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

    @property
    def reason(self) -> str | None:
        """`details.reason`: which refusal of its code this is (`wire.codes`), when the server said."""
        reason = self.details.get("reason")
        return reason if isinstance(reason, str) else None

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """The error in the API's own shape: `{"error": {"code", "message", "details"}}`."""
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}


class InvalidInputError(ComputeError):
    code_name = codes.INVALID_INPUT


class UnauthenticatedError(ComputeError):
    code_name = codes.UNAUTHENTICATED


class ForbiddenError(ComputeError):
    code_name = codes.FORBIDDEN


class NotFoundError(ComputeError):
    code_name = codes.NOT_FOUND


class MethodNotAllowedError(ComputeError):
    """The path exists but does not take this verb; `Allow` in the answer's headers lists those it does."""

    code_name = codes.METHOD_NOT_ALLOWED


class InvalidStateError(ComputeError):
    code_name = codes.INVALID_STATE


class ConflictError(ComputeError):
    code_name = codes.CONFLICT


class QuotaExceededError(ComputeError):
    code_name = codes.QUOTA_EXCEEDED


class InsufficientCapacityError(ComputeError):
    code_name = codes.INSUFFICIENT_CAPACITY


class InternalError(ComputeError):
    """The server failed unexpectedly; the request was not applied."""

    code_name = codes.INTERNAL


class UnavailableError(ComputeError):
    """The server's database cannot be reached or written now; the request was not applied. The
    answer's `Retry-After` says how many seconds to wait before sending it again."""

    code_name = codes.UNAVAILABLE


class TransportError(ComputeError):
    """The call got no answer: the server could not be reached or the connection broke."""

    code_name = codes.TRANSPORT


ERRORS_BY_CODE: dict[str, type[ComputeError]] = {
    cls.code_name: cls
    for cls in (
        InvalidInputError,
        UnauthenticatedError,
        ForbiddenError,
        NotFoundError,
        MethodNotAllowedError,
        InvalidStateError,
        ConflictError,
        QuotaExceededError,
        InsufficientCapacityError,
        InternalError,
        UnavailableError,
    )
}
"""The exception of every code a server answers with (`wire.codes.SERVER_CODES`)."""

_CODES_BY_STATUS = {
    400: codes.INVALID_INPUT,
    401: codes.UNAUTHENTICATED,
    403: codes.FORBIDDEN,
    404: codes.NOT_FOUND,
    405: codes.METHOD_NOT_ALLOWED,
    422: codes.INVALID_INPUT,
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
