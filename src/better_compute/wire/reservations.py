"""Reservations: atoms of a pool booked for a time window."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from better_compute.wire.common import WireModel
from better_compute.wire.pools import SharingMode
from better_compute.wire.quotas import AtomClass

SelectorOp = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
"""Kubernetes label-selector operators."""

ReservationStatus = Literal["scheduled", "active", "ended", "cancelled", "released"]
"""`scheduled` before its start, `active` inside its window, `ended` after it; `cancelled` when cancelled
before its start, `released` when released early inside its window."""


class MatchExpression(WireModel):
    """`values` is required by `In`, `NotIn`, `Gt` and `Lt` (one number), and absent for the others."""

    key: str
    op: SelectorOp
    values: list[str | int | float] | None = None


class Selector(WireModel):
    match_expressions: list[MatchExpression] = Field(default_factory=list)


class DeviceRequest(WireModel):
    """One line of `devices`: `count` atoms of one class, optionally narrowed by a selector."""

    cls: AtomClass = Field(alias="class")
    count: int = Field(ge=1, strict=True)  # `true` is not a count
    sharing: SharingMode | None = None
    selector: Selector | None = None


class ReservationCreate(WireModel):
    """`reservations.create`.

    `tenantId` may be omitted with a tenant's credential (the server takes the credential's tenant);
    a fleet-admin credential must name it. `start` defaults to now; `duration` is like `30m`, `4h`, `2d`.
    The same `idempotencyKey` with the same request returns the first reservation; with a different
    request it is refused.
    """

    tenant_id: str | None = None
    pool_id: str
    devices: list[DeviceRequest] = Field(min_length=1)
    start: datetime | None = None
    duration: str
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)


class ReservationAtom(WireModel):
    """An atom a reservation holds, with the attributes selectors match on."""

    id: str
    cls: AtomClass = Field(alias="class")
    gpu_id: str
    node: str
    attributes: dict[str, Any] = Field(default_factory=dict)


class ReservationPublic(WireModel):
    """A reservation. `devices` echoes the request; `gpuCount` counts whole GPUs, `gpuSlices` fractions."""

    id: str
    tenant_id: str
    pool_id: str
    status: ReservationStatus
    start: datetime
    end: datetime
    devices: list[DeviceRequest]
    atoms: list[ReservationAtom]
    gpu_count: int
    gpu_slices: int
    idempotency_key: str | None
    created_at: datetime


class ReservationListQuery(WireModel):
    """`reservations.list` filters (query parameters)."""

    tenant_id: str | None = None
    pool_id: str | None = None
    status: ReservationStatus | None = None
    limit: int | None = Field(default=None, ge=1, le=1000)
    cursor: str | None = None


class IdRequest(WireModel):
    """The body of methods that name one object: `pools.get`, `reservations.get|cancel|release`."""

    id: str = Field(min_length=1)
