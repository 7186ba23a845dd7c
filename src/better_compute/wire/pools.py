"""Pools: GPUs of one cluster under one owner tenant and one sharing mode, fixed at creation."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from better_compute.wire.common import PageCursor, PageLimit, WireAnswer, WireRequest
from better_compute.wire.quotas import ClassQuota, QuotaPublic

SharingMode = Literal["exclusive", "mig", "timeslice", "mps"]


class PoolPolicyPublic(WireAnswer):
    """A pool's policy as the pool shows it (requests carry `PoolPolicy`)."""

    mig_layout: str | None = None
    replicas: int | None = Field(default=None, ge=1, le=48)
    max_duration: str | None = Field(default=None, json_schema_extra={"maxLength": 64})
    scrub: str | None = None
    """What a node does to an atom one tenant released before another may have it: `none` (the
    default), `reset` (a GPU reset; exclusive pools) or `zero` (a zeroing pass over the atom's
    memory; exclusive and mig pools)."""


class PoolPolicy(PoolPolicyPublic, WireRequest):
    """`migLayout` for mig pools (e.g. `all-1g.10gb`); `replicas` (1-48) for timeslice and mps pools;
    `maxDuration` (e.g. `8h`), in any pool, the longest a reservation there may be (extensions
    included); `scrub` (`none`, `reset`, `zero`) between tenants, where the mode allows it."""

    scrub: Literal["none", "reset", "zero"] | None = None


class PoolCreate(WireRequest):
    """`pools.create`. `ownerQuota` sets the owner's rows per class (default: `gpu` only)."""

    name: str = Field(min_length=1)
    cluster_id: str
    mode: SharingMode
    policy: PoolPolicy = Field(default_factory=PoolPolicy)
    owner_tenant_id: str
    nodes: list[str] = Field(default_factory=list)
    owner_quota: ClassQuota | None = None
    meter: str | None = None


class PoolUpdate(WireRequest):
    """`pools.update`: a new `policy.migLayout` goes through the MIG layout gate.

    `generation`, when given, must equal the pool's current one (compare-and-swap), else CONFLICT.
    """

    id: str
    policy: PoolPolicy | None = None
    nodes: list[str] | None = None
    generation: int | None = None


class PoolPublic(WireAnswer):
    id: str
    name: str
    cluster_id: str
    mode: SharingMode
    policy: PoolPolicyPublic
    owner_tenant_id: str
    nodes: list[str]
    meter: str
    generation: int
    created_at: datetime


class PoolListQuery(WireRequest):
    """`pools.list` filters (query parameters)."""

    cluster_id: str | None = None
    owner_tenant_id: str | None = None
    mode: SharingMode | None = None
    limit: PageLimit = None
    cursor: PageCursor = None


class PoolOffer(WireRequest):
    """`pools.offer`: give another tenant quota rows in the pool (timeslice/mps pools: owner only)."""

    pool_id: str
    tenant_id: str
    quota: ClassQuota


class PoolOfferPublic(WireAnswer):
    """The answer to `pools.offer`: the quota rows the tenant now has in the pool."""

    pool_id: str
    tenant_id: str
    quotas: list[QuotaPublic]
