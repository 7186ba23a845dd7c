"""The typed Python client of the better-compute API.

from better_compute.client import Compute

with Compute("http://127.0.0.1:8000", token) as compute:
    booked = compute.reservations.create(
        pool_id="h100-a", devices=[{"class": "gpu", "count": 2}], duration="4h"
    )
"""

from better_compute.client._client import Compute
from better_compute.client._errors import (
    ComputeError,
    ConflictError,
    ForbiddenError,
    InsufficientCapacityError,
    InternalError,
    InvalidInputError,
    InvalidStateError,
    MethodNotAllowedError,
    NotFoundError,
    QuotaExceededError,
    TransportError,
    UnauthenticatedError,
    UnavailableError,
)

__all__ = [
    "Compute",
    "ComputeError",
    "ConflictError",
    "ForbiddenError",
    "InsufficientCapacityError",
    "InternalError",
    "InvalidInputError",
    "InvalidStateError",
    "MethodNotAllowedError",
    "NotFoundError",
    "QuotaExceededError",
    "TransportError",
    "UnauthenticatedError",
    "UnavailableError",
]
