"""Device-class quotas: how many devices of one device class a tenant (the seed's "project") may hold,
in one cluster or across the fleet (docs/placement.md#quotas; seed 001 "Quotas").

They live in the same quotas resource as the pool rows of `domain.tenancy.quota`, told apart by `scope`: a
pool row (`scope: pool`) limits atoms of an atom class inside one pool and is enforced by
reservations; a device-class row (`scope: cluster` with a `cluster_id`, or `scope: fleet`) limits
devices of a device class and is what placement across clusters asks before it admits a deployment
(`admit`, below). Each kind is checked on its own: a booking the tenant holds counts as held for
the pool row of its pool and for every device-class row whose class the atom belongs to.

The rule, exactly as the seed states it:

- a row's ceiling is `guaranteed_devices`: held + asked above it is refused (`insufficient_quota`);
- in a cluster with a cluster row for the class, that row decides, whatever the fleet row says;
- the fleet row applies only in a cluster that has no cluster row, and counts what the tenant holds
  of the class in every cluster;
- with no row for the class at all, nothing limits the tenant by device-class quota (the seed is
  silent; capacity, pool rows and policies still apply). Writing a row with `guaranteed_devices: 0`
  is how an operator says "none".

`floor_devices` and `over_quota_weight` act in placement (`domain.placement.fairness`): a cluster
row's floor is kept from other projects' non-preemptible work, and capacity above the floors is
shared by weight.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.placement.device_classes import DeviceClass, belongs_to
from better_compute.domain.tenancy.quota import MAX_LIMIT
from better_compute.domain.tenancy.tenancy import check_class_name, check_ref

Scope = Literal["cluster", "fleet"]
SCOPES: tuple[Scope, ...] = ("cluster", "fleet")

MAX_DEVICES = MAX_LIMIT
"""The largest `guaranteed_devices` or `floor_devices` (a 32-bit integer column, like pool rows)."""

DEFAULT_WEIGHT = 1.0
MAX_WEIGHT = 1000.0
"""`over_quota_weight` is a positive number up to MAX_WEIGHT: a ratio between tenants, for which three
orders of magnitude is ample, while the bound keeps sums of weights far from float trouble."""

INSUFFICIENT_QUOTA = "insufficient_quota"
"""The reason placement reports for a deployment a quota row refuses (seed 001's word)."""


@dataclass(frozen=True, slots=True)
class ClassQuota:
    """One device-class row: the key is (tenant, device class, scope, cluster)."""

    tenant_id: str
    device_class: str
    scope: Scope
    cluster_id: str | None
    guaranteed_devices: int
    floor_devices: int
    over_quota_weight: float
    updated_at: datetime


POOL_ROW_FIELDS = ("poolId", "class", "limit")
CLASS_ROW_FIELDS = (
    "deviceClass",
    "scope",
    "clusterId",
    "guaranteedDevices",
    "floorDevices",
    "overQuotaWeight",
)


def is_class_row(given: Iterable[str], scope: str | None) -> bool:
    """Whether a `quotas.set` request is a device-class row: it names any device-class field (other
    than `scope: pool`). Anything else is a pool row, read exactly as before device classes."""
    named = set(given)
    if scope == "pool":
        named.discard("scope")
    return bool(named & set(CLASS_ROW_FIELDS))


def check_pool_row(given: Iterable[str], pool_id: str | None, cls: str | None, limit: int | None) -> None:
    """A pool row names `poolId`, `class` and `limit`; a field of device-class rows beside them is a
    mix-up the caller must hear about, not a field silently dropped."""
    named = set(given)
    for field, value in (("poolId", pool_id), ("class", cls), ("limit", limit)):
        if value is None:
            raise InvalidInput(
                f"{field} is required for a pool row (poolId, class, limit); a device-class row takes"
                " deviceClass, scope and guaranteedDevices instead",
                {"field": field},
            )
    stray = [f for f in CLASS_ROW_FIELDS if f in named and f != "scope"]
    if stray:
        raise InvalidInput(f"{stray[0]} belongs to device-class rows, not to a pool row", {"field": stray[0]})


def parse_class_quota(
    tenant_id: object,
    device_class: object,
    scope: object,
    cluster_id: object,
    guaranteed_devices: object,
    floor_devices: object,
    over_quota_weight: object,
    updated_at: datetime,
    *,
    given: Iterable[str] = (),
) -> ClassQuota:
    """A device-class row from a request; each refusal is INVALID_INPUT naming its field.

    `given` is the fields the request named: a pool row's field beside device-class ones is refused.
    `floor_devices` defaults to 0 and `over_quota_weight` to DEFAULT_WEIGHT."""
    stray = [f for f in POOL_ROW_FIELDS if f in set(given)]
    if stray:
        raise InvalidInput(
            f"{stray[0]} belongs to pool rows; a device-class row takes deviceClass, scope, clusterId,"
            " guaranteedDevices, floorDevices and overQuotaWeight",
            {"field": stray[0]},
        )
    tenant = check_ref(tenant_id, "tenantId")
    if device_class is None:
        raise InvalidInput("deviceClass is required for a device-class row", {"field": "deviceClass"})
    name = check_class_name(device_class, "deviceClass")
    if scope not in SCOPES:
        raise InvalidInput(
            f"scope must be cluster or fleet for a device-class row, not {scope!r}"[:200],
            {"field": "scope", "accepted": list(SCOPES)},
        )
    cluster: str | None = None
    if scope == "cluster":
        if cluster_id is None:
            raise InvalidInput("clusterId is required for scope cluster", {"field": "clusterId"})
        cluster = check_ref(cluster_id, "clusterId")
    elif cluster_id is not None:
        raise InvalidInput(
            "clusterId is only for scope cluster; a fleet row applies in every cluster",
            {"field": "clusterId"},
        )
    if guaranteed_devices is None:
        raise InvalidInput(
            "guaranteedDevices is required for a device-class row", {"field": "guaranteedDevices"}
        )
    guaranteed = _devices(guaranteed_devices, "guaranteedDevices")
    floor = 0 if floor_devices is None else _devices(floor_devices, "floorDevices")
    if floor > guaranteed:
        raise InvalidInput(
            f"floorDevices ({floor}) must not exceed guaranteedDevices ({guaranteed})",
            {"field": "floorDevices", "max": guaranteed},
        )
    weight = DEFAULT_WEIGHT if over_quota_weight is None else check_weight(over_quota_weight)
    return ClassQuota(tenant, name, scope, cluster, guaranteed, floor, weight, updated_at)


def _devices(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DEVICES:
        raise InvalidInput(
            f"{field} must be an integer from 0 to {MAX_DEVICES}, not {value!r}"[:200],
            {"field": field, "min": 0, "max": MAX_DEVICES},
        )
    return value


def check_weight(value: object, field: str = "overQuotaWeight") -> float:
    """A positive finite number up to MAX_WEIGHT; `true` is not one."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(float(value)) or not 0 < float(value) <= MAX_WEIGHT:  # type: ignore[arg-type]
        raise InvalidInput(
            f"{field} must be a number greater than 0 and at most {MAX_WEIGHT:g}, not {value!r}"[:200],
            {"field": field, "max": MAX_WEIGHT},
        )
    return float(value)  # type: ignore[arg-type]


# -- Enforcement ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QuotaVerdict:
    """Whether `asked` more devices of a class may go to a cluster, and the figures that decided.

    `scope` and `limit` are those of the deciding row (None when no row applies: not limited);
    `held` is what that row counts (the tenant's devices in the cluster for a cluster row, in every
    cluster for the fleet row). `reason` is `insufficient_quota` when refused, else None."""

    admitted: bool
    cluster_id: str
    asked: int
    held: int
    scope: Scope | None = None
    limit: int | None = None
    reason: str | None = None


def admit(rows: Sequence[ClassQuota], held: Mapping[str, int], cluster_id: str, asked: int) -> QuotaVerdict:
    """May the tenant take `asked` more devices of one device class in `cluster_id`?

    `rows` are the tenant's device-class rows for that one class (of any scope and cluster); `held`
    is how many devices of the class it holds now per cluster. A cluster row for `cluster_id` wins;
    otherwise the fleet row counts the sum over every cluster; with neither, the answer is admitted
    and unlimited. Returns a value, never raises, so that placement can report a verdict per cluster.
    """
    if asked < 0:
        raise ValueError("asked must be >= 0")
    if len({r.device_class for r in rows}) > 1 or len({r.tenant_id for r in rows}) > 1:
        raise ValueError("admit takes one tenant's rows for one device class")
    cluster_row = next((r for r in rows if r.scope == "cluster" and r.cluster_id == cluster_id), None)
    fleet_row = next((r for r in rows if r.scope == "fleet"), None)
    if cluster_row is not None:
        row, counted = cluster_row, held.get(cluster_id, 0)
    elif fleet_row is not None:
        row, counted = fleet_row, sum(held.values())
    else:
        return QuotaVerdict(True, cluster_id, asked, held.get(cluster_id, 0))
    fits = counted + asked <= row.guaranteed_devices
    return QuotaVerdict(
        admitted=fits,
        cluster_id=cluster_id,
        asked=asked,
        held=counted,
        scope=row.scope,
        limit=row.guaranteed_devices,
        reason=None if fits else INSUFFICIENT_QUOTA,
    )


@dataclass(frozen=True, slots=True)
class HeldAtom:
    """An atom a tenant holds now (a live booking of it covers the instant), and its node's cluster."""

    tenant_id: str
    cluster_id: str
    atom: Atom


def held_per_cluster(held: Iterable[HeldAtom], device_class: DeviceClass) -> dict[str, int]:
    """How many devices of `device_class` one tenant holds per cluster, from the atoms it holds now.
    Every booking holds one atom, so this counts the held atoms that belong to the class."""
    counts: dict[str, int] = {}
    for h in held:
        if belongs_to(h.atom, device_class):
            counts[h.cluster_id] = counts.get(h.cluster_id, 0) + 1
    return counts


def used_by(row: ClassQuota, held: Mapping[str, int]) -> int:
    """What a row counts as used: the tenant's devices of its class in its cluster, or everywhere."""
    if row.scope == "cluster":
        return held.get(row.cluster_id or "", 0)
    return sum(held.values())
