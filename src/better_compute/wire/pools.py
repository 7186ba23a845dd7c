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
    `id` is the path's: it may be left out, and one that differs is refused (INVALID_INPUT).
    """

    id: str | None = Field(default=None, description="The path's pool id; may be left out.")
    policy: PoolPolicy | None = None
    nodes: list[str] | None = None
    generation: int | None = None
    dry_run: bool = False
    """Run the update's checks and steps and roll them back: the answer (200, `dryRun: true`) is the
    pool as it would be and the layout changes it would put under way (`layoutChanges`)."""


class NodeLayoutChangePublic(WireAnswer):
    """A node whose layout (or slot count) a pool update gates: `from` → `to`, re-cut once no
    tenant's booking holds it. `heldUntil`: the latest end of the tenants' bookings on it (null:
    none, it is cut at the gate's next step); `openEnded`: one never ends, so the change waits until
    it is released; `tenants`: whose bookings."""

    node: str
    from_: str | None = Field(alias="from")
    to: str
    held_until: datetime | None
    open_ended: bool
    tenants: list[str]


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
    dry_run: bool = Field(default=False, exclude_if=lambda v: not v)
    """True in the answer of `pools.update` with `dryRun`: nothing was changed."""
    layout_changes: list[NodeLayoutChangePublic] | None = Field(default=None, exclude_if=lambda v: v is None)
    """In the answer of a dry run: the pool's nodes whose layout change would be under way."""


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


class PoolLayoutPreviewRequest(WireRequest):
    """`pools.previewLayout`: what `migLayout` would do to the pool; nothing is written."""

    id: str
    mig_layout: str = Field(min_length=1, max_length=512)


class LayoutHolderPublic(WireAnswer):
    """A tenant's allocation holding a node back from a layout change; `endsAt` null: it never ends."""

    allocation_id: str
    tenant_id: str | None
    ends_at: datetime | None


class LayoutChangeHoldPublic(WireAnswer):
    """A partition change's own hold on a GPU (allocation `partition:<gpuId>:<start>`, no tenant)."""

    allocation_id: str
    gpu_id: str
    starts_at: datetime
    ends_at: datetime | None


class AppearingInstancePublic(WireAnswer):
    """A MIG instance the node would create. It has no atom id yet: atom ids derive from the GI and CI
    ids the driver gives the instance when it creates it."""

    gpu_id: str
    mig_profile: str
    placement_start: int
    placement_size: int


class LayoutCapacityPublic(WireAnswer):
    """Instances per MIG profile (a GPU that is not split counts under `gpu`), before and after."""

    before: dict[str, int]
    after: dict[str, int]


class NodeLayoutPreviewPublic(WireAnswer):
    """One node of a layout preview. `grantableAt`: when the gate could grant the layout (now, or the
    end of the node's last live booking); null with `heldOpenEnded` when a booking never ends."""

    node: str
    carries_pool_layout: bool
    layout: str | None
    """The layout the node is told now: its frozen one while a change of it waits."""
    change_state: str | None
    """`pending`, `scheduled` or `granted` while a layout change of the node is under way; else null."""
    grantable_at: datetime | None
    held_open_ended: bool
    held_by: list[LayoutHolderPublic]
    change_holds: list[LayoutChangeHoldPublic]
    disappear: list[str]
    appear: list[AppearingInstancePublic]
    capacity: LayoutCapacityPublic


class PoolLayoutPreview(WireAnswer):
    """The answer to `pools.previewLayout`: per node and for the whole pool, at `at`."""

    pool_id: str
    from_: str = Field(alias="from")
    to: str
    at: datetime
    nodes: list[NodeLayoutPreviewPublic]
    capacity: LayoutCapacityPublic
