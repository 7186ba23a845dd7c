"""Policies: limits per reservation on whole GPUs (`gpuCount`) and on fractions (`gpuSlices`), and
placement constraints (`allowedRegions`, `allowedResidencies`, `allowedDeviceClasses`,
`allowedClusters`, `deniedClusters`, `costCeiling`), attached to a subject: a tenant, an endpoint, a
workload or a cluster. A policy carries limits, constraints or both.

Requests take the seed's snake_case names (`allowed_regions`, `subject_type`, `subject_id`,
`cost_ceiling`, ...) as well as camelCase; answers are camelCase.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AliasChoices, Field

from better_compute.wire.common import PageCursor, PageLimit, WireAnswer, WireRequest

SubjectType = Literal["tenant", "endpoint", "workload", "cluster"]
"""What a policy is attached to. Limits are a tenant's only; constraints may be on any subject."""

MAX_CONSTRAINT_ITEMS = 64
"""The most entries a constraint list holds (the server's `constraints.MAX_ITEMS`). Declared in
OpenAPI only: the server's own check names the field it refuses."""

CONSTRAINT_FIELDS = frozenset(
    {
        "allowed_regions",
        "allowed_residencies",
        "allowed_device_classes",
        "allowed_clusters",
        "denied_clusters",
        "cost_ceiling",
    }
)
"""The constraint fields of `PolicyCreate` and `PolicyUpdate`, by their Python names."""


def _names(wire: str, seed: str, what: str) -> Any:
    return Field(
        default=None,
        validation_alias=AliasChoices(wire, seed),
        description=what,
        json_schema_extra={"maxItems": MAX_CONSTRAINT_ITEMS},
    )


class PolicyLimitsPublic(WireAnswer):
    """A policy's limits as the policy shows them (the request carries `PolicyLimits`)."""

    gpu_count: int | None = Field(default=None, ge=0)
    gpu_slices: int | None = Field(default=None, ge=0)


class PolicyLimits(PolicyLimitsPublic, WireRequest):
    """`gpuCount` counts whole GPUs only; `gpuSlices` counts MIG instances and shared slots."""


class PolicyConstraints(WireRequest):
    """Placement constraints (each optional; an empty list constrains nothing). A cluster must pass
    every constraint of every policy that applies to a placement."""

    allowed_regions: list[str] | None = _names(
        "allowedRegions", "allowed_regions", "Clusters must be in one of these regions."
    )
    allowed_residencies: list[str] | None = _names(
        "allowedResidencies", "allowed_residencies", "Clusters must have one of these residency labels."
    )
    allowed_device_classes: list[str] | None = _names(
        "allowedDeviceClasses", "allowed_device_classes", "Only devices of these classes may be used."
    )
    allowed_clusters: list[str] | None = _names(
        "allowedClusters", "allowed_clusters", "Only these clusters (by id) may be used."
    )
    denied_clusters: list[str] | None = _names(
        "deniedClusters", "denied_clusters", "These clusters (by id) may not be used."
    )
    cost_ceiling: str | None = Field(
        default=None,
        validation_alias=AliasChoices("costCeiling", "cost_ceiling"),
        description=(
            "Most a workload may cost per hour, a decimal string such as 12.50:"
            " placement refuses a dearer cluster."
        ),
        json_schema_extra={"maxLength": 32},
    )


class PolicyCreate(PolicyConstraints):
    """`policies.create`: limits, constraints or both, attached to `subjectType` (default `tenant`)
    and `subjectId`. A tenant's policy needs only `tenantId` (its subject); a workload's or an
    endpoint's names its subject and the subject's tenant (`tenantId`); a cluster's names the
    cluster and no tenant. Without `poolId` a tenant's limits apply in every pool."""

    name: str = Field(min_length=1)
    tenant_id: str | None = Field(default=None, validation_alias=AliasChoices("tenantId", "tenant_id"))
    pool_id: str | None = Field(default=None, validation_alias=AliasChoices("poolId", "pool_id"))
    subject_type: SubjectType | None = Field(
        default=None, validation_alias=AliasChoices("subjectType", "subject_type")
    )
    subject_id: str | None = Field(default=None, validation_alias=AliasChoices("subjectId", "subject_id"))
    limits: PolicyLimits | None = None


class PolicyUpdate(PolicyConstraints):
    """`policies.update`: `limits` replaces every limit (null removes them); a constraint given
    replaces that one (null or [] removes it); what is not given is kept. Name and subject are fixed.
    `generation`, when given, must equal the policy's current one (compare-and-swap), else CONFLICT.
    `id` is the path's: it may be left out, and one that differs is refused (INVALID_INPUT)."""

    id: str | None = Field(default=None, description="The path's policy id; may be left out.")
    limits: PolicyLimits | None = None
    generation: int | None = None


class PolicyPublic(WireAnswer):
    """A policy. `tenantId` is null for a cluster's policy (it applies to every tenant)."""

    id: str
    name: str
    tenant_id: str | None
    pool_id: str | None
    subject_type: SubjectType = "tenant"
    subject_id: str = ""
    limits: PolicyLimitsPublic
    allowed_regions: list[str] = Field(default_factory=list)
    allowed_residencies: list[str] = Field(default_factory=list)
    allowed_device_classes: list[str] = Field(default_factory=list)
    allowed_clusters: list[str] = Field(default_factory=list)
    denied_clusters: list[str] = Field(default_factory=list)
    cost_ceiling: str | None = None
    generation: int = 1
    created_at: datetime


class PolicyListQuery(WireRequest):
    """`policies.list` filters (query parameters, camelCase or snake_case): `subject` is a subject
    id, `GET /v1/policies?subject_type=workload&subject=<workload>`."""

    tenant_id: str | None = Field(default=None, validation_alias=AliasChoices("tenantId", "tenant_id"))
    pool_id: str | None = Field(default=None, validation_alias=AliasChoices("poolId", "pool_id"))
    subject_type: SubjectType | None = Field(
        default=None, validation_alias=AliasChoices("subjectType", "subject_type")
    )
    subject: str | None = None
    limit: PageLimit = None
    cursor: PageCursor = None
