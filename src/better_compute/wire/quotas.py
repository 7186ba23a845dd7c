"""Quota rows: how many atoms of one class a tenant may hold at once in one pool."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AliasChoices, Field

from better_compute.wire.common import PageCursor, PageLimit, WireAnswer, WireRequest

AtomClass = Literal["gpu", "gpu.mig", "gpu.slot"]
"""What a device request asks for and what quota is kept in: whole GPUs, MIG instances, shared slots."""

ClassQuota = dict[AtomClass, int]
"""A limit per atom class, e.g. `{"gpu": 8, "gpu.mig": 14}` (`ownerQuota`, `pools.offer`)."""


QuotaScope = Literal["pool", "cluster", "fleet"]
"""What a quota row limits: atoms of an atom class in one pool (`pool`), or devices of a device class
in one cluster (`cluster`) or across the fleet (`fleet`)."""

MAX_WEIGHT = 1000.0
"""The largest `overQuotaWeight` (the server's `class_quotas.MAX_WEIGHT`). Declared in OpenAPI only:
the server's own check names the rule it breaks."""

_TENANT = AliasChoices("tenantId", "tenant_id", "project")


class QuotaSet(WireRequest):
    """`quotas.set`: create or replace one quota row, of either kind.

    A pool row is `{tenantId, poolId, class, limit}`, keyed by (tenant, pool, class). A device-class
    row is `{tenantId, deviceClass, scope: cluster|fleet, clusterId (scope cluster only),
    guaranteedDevices, floorDevices (default 0, at most guaranteedDevices), overQuotaWeight (greater
    than 0, at most 1000, default 1)}`, keyed by (tenant, device class, scope, cluster), admin only.
    A request that names any device-class field is a device-class row. Fields may be spelt as the
    seed does (`project` for `tenantId`, `device_class`, `cluster_id`, `guaranteed_devices`, ...)."""

    tenant_id: str = Field(validation_alias=_TENANT)
    pool_id: str | None = None
    cls: AtomClass | None = Field(default=None, alias="class")
    limit: int | None = Field(default=None, ge=0)
    device_class: str | None = Field(default=None, json_schema_extra={"maxLength": 63})
    scope: QuotaScope | None = None
    cluster_id: str | None = None
    guaranteed_devices: int | None = Field(default=None, json_schema_extra={"minimum": 0})
    floor_devices: int | None = Field(default=None, json_schema_extra={"minimum": 0})
    over_quota_weight: float | None = Field(
        default=None, json_schema_extra={"exclusiveMinimum": 0, "maximum": MAX_WEIGHT}
    )

    def named(self) -> set[str]:
        """The wire names of the fields the request gave a value (null counts as not given)."""
        fields = type(self).model_fields
        return {
            fields[name].serialization_alias or fields[name].alias or name
            for name in self.model_fields_set
            if getattr(self, name) is not None
        }


class QuotaPublic(WireAnswer):
    """A quota row: `scope` says its kind. A pool row carries `poolId`, `class` and `limit`; a
    device-class row `deviceClass`, `clusterId` (scope cluster), `guaranteedDevices`, `floorDevices`
    and `overQuotaWeight`. Fields of the other kind are left out, not null."""

    tenant_id: str
    pool_id: str | None = Field(default=None, exclude_if=lambda v: v is None)
    cls: AtomClass | None = Field(default=None, alias="class", exclude_if=lambda v: v is None)
    limit: int | None = Field(default=None, exclude_if=lambda v: v is None)
    scope: QuotaScope = "pool"
    device_class: str | None = Field(default=None, exclude_if=lambda v: v is None)
    cluster_id: str | None = Field(default=None, exclude_if=lambda v: v is None)
    guaranteed_devices: int | None = Field(default=None, exclude_if=lambda v: v is None)
    floor_devices: int | None = Field(default=None, exclude_if=lambda v: v is None)
    over_quota_weight: float | None = Field(default=None, exclude_if=lambda v: v is None)
    # Only quotas.list knows it: the other answers that carry quota rows leave it out, not null.
    used: int | None = Field(default=None, exclude_if=lambda v: v is None)
    """What the tenant holds of the row now (`quotas.list`; absent elsewhere): of its class in its
    pool (pool row), or of its device class in its cluster or everywhere (device-class row)."""


class QuotaListQuery(WireRequest):
    """`quotas.list` filters (query parameters). Pool rows come first, then device-class rows; a
    filter only one kind has (`poolId`; `deviceClass`, `clusterId`) keeps to that kind, and `scope`
    picks one kind. With `from` (and `to`, default an hour later), a pool row's `used` is the most the
    tenant holds at once during that window instead of now (a device-class row's stays now)."""

    tenant_id: str | None = None
    pool_id: str | None = None
    device_class: str | None = None
    scope: QuotaScope | None = None
    cluster_id: str | None = None
    from_: datetime | None = Field(default=None, alias="from")
    to: datetime | None = None
    limit: PageLimit = None
    cursor: PageCursor = None
