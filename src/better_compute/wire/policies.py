"""IAM policies on reservations: limits on whole GPUs (`gpuCount`) and on fractions (`gpuSlices`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from better_compute.wire.common import PageCursor, PageLimit, WireAnswer, WireRequest


class PolicyLimitsPublic(WireAnswer):
    """A policy's limits as the policy shows them (the request carries `PolicyLimits`)."""

    gpu_count: int | None = Field(default=None, ge=0)
    gpu_slices: int | None = Field(default=None, ge=0)


class PolicyLimits(PolicyLimitsPublic, WireRequest):
    """`gpuCount` counts whole GPUs only; `gpuSlices` counts MIG instances and shared slots."""


class PolicyCreate(WireRequest):
    """`policies.create`: without `poolId` the policy applies to the tenant in every pool."""

    name: str = Field(min_length=1)
    tenant_id: str
    pool_id: str | None = None
    limits: PolicyLimits


class PolicyPublic(WireAnswer):
    id: str
    name: str
    tenant_id: str
    pool_id: str | None
    limits: PolicyLimitsPublic
    created_at: datetime


class PolicyListQuery(WireRequest):
    """`policies.list` filters (query parameters)."""

    tenant_id: str | None = None
    pool_id: str | None = None
    limit: PageLimit = None
    cursor: PageCursor = None
