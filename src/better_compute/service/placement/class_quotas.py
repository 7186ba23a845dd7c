"""Device-class quota rows: `quotas.set` for a row with `scope: cluster|fleet` (admin only), what a
tenant holds of a class per cluster, and the admission check placement will call
(`domain.placement.class_quotas` holds the rule; this module reads its figures from the store).

Only the admin sets these rows: a pool owner gives out its own pool's atoms with pool rows, while a
device-class row limits a tenant across clusters and pools no single owner has."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from better_compute.domain.kernel.errors import NotFound
from better_compute.domain.placement.class_quotas import (
    ClassQuota,
    HeldAtom,
    QuotaVerdict,
    admit,
    held_per_cluster,
    parse_class_quota,
)
from better_compute.domain.placement.device_classes import DeviceClass, device_class_not_found
from better_compute.domain.tenancy.credentials import Principal, require_admin
from better_compute.domain.tenancy.events import QuotaSet
from better_compute.domain.tenancy.tenancy import check_class_name, check_ref, tenant_not_found
from better_compute.service.kernel.ports import StorePort
from better_compute.service.placement.ports import PlacementTx
from better_compute.service.tenancy.ports import TenancyTx


def set_class_quota(
    store: StorePort[PlacementTx],
    principal: Principal,
    *,
    tenant_id: object,
    device_class: object,
    scope: object,
    cluster_id: object,
    guaranteed_devices: object,
    floor_devices: object = None,
    over_quota_weight: object = None,
    now: datetime,
    given: Iterable[str] = (),
) -> ClassQuota:
    """Create or replace one device-class row (admin only); the row's key is (tenant, device class,
    scope, cluster), so setting it again replaces it. The tenant, the device class and (for scope
    cluster) the cluster must exist: NOT_FOUND naming the one that does not."""
    require_admin(principal, "quotas.set")
    row = parse_class_quota(
        tenant_id,
        device_class,
        scope,
        cluster_id,
        guaranteed_devices,
        floor_devices,
        over_quota_weight,
        now,
        given=given,
    )
    with store.begin() as tx:
        if tx.tenants.hold(row.tenant_id) is None:
            raise tenant_not_found(row.tenant_id)
        if tx.device_classes.get(row.device_class) is None:
            raise device_class_not_found(row.device_class)
        if row.cluster_id is not None and tx.clusters.get(row.cluster_id) is None:
            raise NotFound(f"cluster {row.cluster_id} not found", {"clusterId": row.cluster_id})
        tx.class_quotas.put(row)
        tx.events.append(
            QuotaSet(
                row.device_class,
                row.tenant_id,
                {row.device_class: row.guaranteed_devices},
                device_class=row.device_class,
                scope=row.scope,
                cluster_id=row.cluster_id,
                guaranteed_devices=row.guaranteed_devices,
                floor_devices=row.floor_devices,
                over_quota_weight=row.over_quota_weight,
            ),
            now,
        )
    return row


def held_by_class(
    tx: TenancyTx, tenant_ids: Sequence[str] | None, classes: Sequence[DeviceClass], now: datetime
) -> dict[tuple[str, str], dict[str, int]]:
    """What each tenant holds of each class at `now`, per cluster: {(tenant, class): {cluster: n}},
    from one read of the tenants' live bookings joined to their atoms and nodes."""
    by_tenant: dict[str, list[HeldAtom]] = {}
    for h in tx.atoms.held_at(tenant_ids, now):
        by_tenant.setdefault(h.tenant_id, []).append(h)
    out: dict[tuple[str, str], dict[str, int]] = {}
    for tenant_id, mine in by_tenant.items():
        for device_class in classes:
            out[(tenant_id, device_class.name)] = held_per_cluster(mine, device_class)
    return out


@dataclass(frozen=True, slots=True)
class ClassQuotaFigures:
    """What the quota rule needs for one tenant and device class: its rows for the class and how many
    devices of the class it holds now per cluster (clusters where it holds none are left out)."""

    tenant_id: str
    device_class: str
    rows: tuple[ClassQuota, ...]
    held: dict[str, int]

    def admit(self, cluster_id: str, asked: int) -> QuotaVerdict:
        """The verdict for `asked` more devices in `cluster_id` (`domain.placement.class_quotas.admit`)."""
        return admit(self.rows, self.held, cluster_id, asked)


def figures_in(tx: PlacementTx, tenant_id: str, device_class: str, now: datetime) -> ClassQuotaFigures:
    """`figures` inside the caller's transaction (placement reads them with its own snapshot)."""
    found = tx.device_classes.get(device_class)
    if found is None:
        raise device_class_not_found(device_class)
    rows = tuple(tx.class_quotas.find(tenant_id, device_class))
    held = held_by_class(tx, [tenant_id], [found], now).get((tenant_id, device_class), {})
    return ClassQuotaFigures(tenant_id, device_class, rows, held)


def figures(
    store: StorePort[PlacementTx], tenant_id: str, device_class: str, now: datetime
) -> ClassQuotaFigures:
    """The tenant's rows for `device_class` and what it holds of the class per cluster now; an unknown
    device class is NOT_FOUND naming it."""
    check_ref(tenant_id, "tenantId")
    check_class_name(device_class, "deviceClass")
    with store.read() as tx:
        return figures_in(tx, tenant_id, device_class, now)
