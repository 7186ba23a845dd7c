"""IAM policies on reservations: limits on whole GPUs (`gpuCount`) and on fractions (`gpuSlices`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from better_compute.wire.common import WireModel


class PolicyLimits(WireModel):
    """`gpuCount` counts whole GPUs only; `gpuSlices` counts MIG instances and shared slots."""

    gpu_count: int | None = Field(default=None, ge=0)
    gpu_slices: int | None = Field(default=None, ge=0)


class PolicyCreate(WireModel):
    """`policies.create`: without `poolId` the policy applies to the tenant in every pool."""

    name: str = Field(min_length=1)
    tenant_id: str
    pool_id: str | None = None
    limits: PolicyLimits


class PolicyPublic(WireModel):
    id: str
    name: str
    tenant_id: str
    pool_id: str | None
    limits: PolicyLimits
    created_at: datetime


class PolicyListQuery(WireModel):
    """`policies.list` filters (query parameters)."""

    tenant_id: str | None = None
    pool_id: str | None = None
    limit: int | None = Field(default=None, ge=1, le=1000)
    cursor: str | None = None
