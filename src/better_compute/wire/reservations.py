"""Reservations: atoms of a pool booked for a time window."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from better_compute.wire.common import PageCursor, PageLimit, WireAnswer, WireRequest
from better_compute.wire.pools import SharingMode
from better_compute.wire.quotas import AtomClass
from better_compute.wire.workloads import Capability

SelectorOp = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
"""Kubernetes label-selector operators."""

ReservationStatus = Literal["scheduled", "active", "ended", "cancelled", "released"]
"""`scheduled` before its start, `active` inside its window, `ended` after it; `cancelled` when cancelled
before its start, `released` when released early inside its window."""


# The server's limits on a reservation request, as its domain checks them (admission, selectors,
# timewin). The models below declare them in the OpenAPI document only, without enforcing them: the
# server's own check refuses past them with a message naming the field and the limit, which a
# validation error here would replace. A test keeps these numbers equal to the domain's.
MAX_DEVICE_REQUESTS = 16
MAX_COUNT = 65_536
MAX_EXPRESSIONS = 32
MAX_VALUES = 256
MAX_VALUE_LENGTH = 256
MAX_DURATION_TEXT = 64

SelectorValue = Annotated[str, Field(json_schema_extra={"maxLength": MAX_VALUE_LENGTH})] | int | float


class MatchExpressionPublic(WireAnswer):
    """A selector's expression as a reservation echoes it (the request carries `MatchExpression`)."""

    key: str
    op: SelectorOp
    values: Annotated[list[SelectorValue], Field(json_schema_extra={"maxItems": MAX_VALUES})] | None = None


class MatchExpression(MatchExpressionPublic, WireRequest):
    """`values` is required by `In`, `NotIn`, `Gt` and `Lt` (one number), and absent for the others.

    At most 256 values, each at most 256 characters; at most 1,024 values in one reservation, all its
    device requests together.
    """


class SelectorPublic(WireAnswer):
    """A selector as a reservation echoes it (the request carries `Selector`)."""

    match_expressions: list[MatchExpressionPublic] = Field(
        default_factory=list, json_schema_extra={"maxItems": MAX_EXPRESSIONS}
    )


class Selector(SelectorPublic, WireRequest):
    """At most 32 expressions."""

    # Narrowed to request expressions, so that they refuse unknown fields too. A list, not a Sequence
    # (which would type-check without the ignore): pydantic serialises a Sequence by inference, which
    # turns a NaN into null before the domain can refuse it by name.
    match_expressions: list[MatchExpression] = Field(  # type: ignore[assignment]
        default_factory=list, json_schema_extra={"maxItems": MAX_EXPRESSIONS}
    )


class DeviceRequestPublic(WireAnswer):
    """A device request as its reservation echoes it (the request carries `DeviceRequest`)."""

    cls: AtomClass = Field(alias="class")
    count: int = Field(ge=1, strict=True, json_schema_extra={"maximum": MAX_COUNT})  # `true` is not a count
    sharing: SharingMode | None = None
    selector: SelectorPublic | None = None
    same_gpu: bool = Field(default=False, strict=True)
    """`true`: all `count` slots on one GPU (a `gpu.slot` line only); `false`: they may split across
    GPUs, as the choice rules keep them together where they can."""


class DeviceRequest(DeviceRequestPublic, WireRequest):
    """One line of `devices`: `count` atoms (1 to 65,536) of one class, optionally narrowed by a
    selector; or, instead of `class` and `selector`, `capability`: what each device must give (the
    pool's cheapest kind of device that gives it is booked, and the reservation shows its class and
    selector). `sameGpu: true` on a `gpu.slot` line books its `count` slots all on one GPU (refused
    with INVALID_INPUT on any other class, and by capacity when no GPU of the pool has that many)."""

    cls: AtomClass | None = Field(default=None, alias="class")  # type: ignore[assignment]
    selector: Selector | None = None
    capability: Capability | None = None
    # Sent only when asked: a line without it is the line it was before the field existed (a server
    # that does not know it takes it; the same idempotency fingerprint, the same stored line).
    same_gpu: bool = Field(default=False, strict=True, exclude_if=lambda v: v is False)

    @model_validator(mode="after")
    def _class_or_capability(self) -> DeviceRequest:
        if self.cls is None and self.capability is None:
            raise ValueError("class is required (or capability instead of class and selector)")
        return self


class ReservationCreate(WireRequest):
    """`reservations.create`.

    `tenantId` may be omitted with a tenant's credential (the server takes the credential's tenant);
    a fleet-admin credential must name it. `start` defaults to now; `duration` is like `30m`, `4h`, `2d`.
    The same `idempotencyKey` with the same request returns the first reservation; with a different
    request it is refused.
    """

    tenant_id: str | None = None
    pool_id: str
    devices: list[DeviceRequest] = Field(min_length=1, json_schema_extra={"maxItems": MAX_DEVICE_REQUESTS})
    start: datetime | None = None
    duration: str = Field(json_schema_extra={"maxLength": MAX_DURATION_TEXT})
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    preemptible: bool | None = None
    """`true`: a workload that placement cannot fit may end it early, as it evicts preemptible
    replicas (docs/scheduling.md); without it a reservation is never preempted."""


class ReservationExtend(WireRequest):
    """`reservations.extend`: move a scheduled or active reservation's end later by `duration` (like
    `30m`, `4h`), on the atoms it holds. Refused with CONFLICT when another booking holds one of them
    in the added time (the answer names the atom and when it is free), and like a new reservation
    when the tenant's quota would not cover the added time."""

    id: str
    duration: str = Field(json_schema_extra={"maxLength": MAX_DURATION_TEXT})


class ReservationAtom(WireAnswer):
    """An atom a reservation holds, with the attributes selectors match on."""

    id: str
    cls: AtomClass = Field(alias="class")
    gpu_id: str
    node: str
    attributes: dict[str, Any] = Field(default_factory=dict)


class SlurmJobPublic(WireAnswer):
    """A reservation's holding job on a Slurm cluster, as the Slurm follower last read it: Slurm's
    job id, the node, its state (`PENDING`, `RUNNING`, ...) and Slurm's reason (`Resources`,
    `BeginTime`, ...)."""

    job_id: int
    node: str
    state: str
    reason: str


class ReservationPublic(WireAnswer):
    """A reservation. `devices` echoes the request; `gpuCount` counts whole GPUs, `gpuSlices` fractions."""

    id: str
    tenant_id: str
    pool_id: str
    status: ReservationStatus
    start: datetime
    end: datetime
    devices: list[DeviceRequestPublic]
    atoms: list[ReservationAtom]
    gpu_count: int
    gpu_slices: int
    idempotency_key: str | None
    created_at: datetime
    binding: str = "pending"
    """Whether the nodes handed its atoms over: `pending` (no node said yet), `bound`,
    `device-missing`, `refused` or `released`; or `stranded` while a booking of it holds an atom it
    cannot have: one gone from its node, not bookable, or in another pool (docs/node-auth.md#binding)."""
    binding_detail: str | None = None
    """Why the binding is `stranded`, naming the atoms; null otherwise."""
    slurm_jobs: list[SlurmJobPublic] = Field(default_factory=list)
    """On a Slurm cluster, its holding jobs (docs/slurm.md): while one is not `RUNNING` the
    reservation reads `scheduled`, whatever its start. Empty elsewhere."""
    preemptible: bool = False
    """Whether a workload may end it early to be placed (it is then `released`)."""
    replayed: bool = False
    """True in the answer of a `reservations.create` that reused an `idempotencyKey` (HTTP 200): the
    first reservation made with the key, as it stands now, which may be `released`, `cancelled` or
    `ended`, not a new booking. False everywhere else."""


class ReservationListQuery(WireRequest):
    """`reservations.list` filters (query parameters)."""

    tenant_id: str | None = None
    pool_id: str | None = None
    status: ReservationStatus | None = None
    limit: PageLimit = None
    cursor: PageCursor = None


class IdRequest(WireRequest):
    """The body of methods that name one object: `pools.get`, `reservations.get|cancel|release`."""

    id: str = Field(min_length=1)
