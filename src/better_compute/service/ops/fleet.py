"""Registering a fleet described by a fleet file: tenants, clusters, nodes, pools and device classes,
idempotently.

Pools go through the same path as the pools methods (`pools.create_in`, `pools.update_in`): the
checks, the generation's compare-and-swap and the events are the same whether a pool comes from a
file or from the API. So a reloaded file cannot do what `pools.update` refuses (turn a mig pool
`exclusive` with its generation unchanged); it gets the same error.
"""

from __future__ import annotations

from datetime import datetime

from better_compute.domain.fleet.records import Cluster, Node
from better_compute.domain.kernel.errors import ConcurrentChange, InvalidInput
from better_compute.domain.ops.events import FleetRegistered
from better_compute.domain.ops.fleet import FleetSpec, PoolSpec
from better_compute.domain.tenancy.records import Tenant
from better_compute.service.fleet import pools
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ops.ports import OpsTx
from better_compute.service.placement import device_classes
from better_compute.service.tenancy import quotas


def register_fleet(store: StorePort[OpsTx], spec: FleetSpec, now: datetime) -> None:
    """Create or update everything the file names; existing rows keep their creation time."""
    with store.begin() as tx:
        tx.tenants.put([Tenant(t.id, t.name, now) for t in spec.tenants])
        tx.clusters.add_missing(
            [
                Cluster(c.name, c.region, tuple(c.residency), "active", now, kind=c.kind, slurm=c.slurm)
                for c in spec.clusters
            ]
        )
        tx.nodes.add_missing(
            [
                Node(
                    n.name,
                    n.cluster,
                    now,
                    carries_pool_layout=n.carries_pool_layout,
                    host_cpu_cores=n.host_cpu_cores,
                    host_memory_mib=n.host_memory_mib,
                )
                for n in spec.nodes
            ]
        )
        for pool in spec.pools:
            _register_pool(tx, pool, now)
        for item in spec.device_classes:
            device_classes.register(tx, item.created(now), now)
        tx.events.append(FleetRegistered("fleet", len(spec.clusters), len(spec.nodes), len(spec.pools)), now)


def _register_pool(tx: OpsTx, spec: PoolSpec, now: datetime) -> None:
    current = tx.pools.get(spec.name)
    if current is None:
        pools.create_in(
            tx,
            pool_id=spec.name,
            cluster_id=spec.cluster,
            mode=spec.mode,
            owner_tenant_id=spec.owner,
            nodes=list(spec.nodes),
            settings=spec.settings,
            owner_limits={},
            meter=spec.meter,
            now=now,
        )
    else:
        for field, stored, asked in (
            ("cluster", current.cluster_id, spec.cluster),
            ("owner", current.owner_tenant_id, spec.owner),
            ("meter", current.meter, spec.meter if spec.meter is not None else current.meter),
        ):
            if stored != asked:
                raise InvalidInput(
                    f"pool {spec.name}: its {field} is fixed at creation ({stored}, not {asked}); "
                    "create another pool instead",
                    {"field": f"pools.{spec.name}.{field}", "poolId": spec.name},
                )
        members = tx.pools.members([spec.name])[spec.name]
        if current.mode != spec.mode or current.settings != spec.settings or members != sorted(spec.nodes):
            try:
                pools.update_in(
                    tx, spec.name, spec.settings.as_mapping(), list(spec.nodes), None, spec.mode, now
                )
            except pools.Raced:
                raise ConcurrentChange(
                    f"pool {spec.name} changed while the fleet file was loaded; load it again"
                ) from None
    if spec.owner_quota:
        quotas.write_rows(tx, spec.owner, spec.name, spec.owner_quota, now)
