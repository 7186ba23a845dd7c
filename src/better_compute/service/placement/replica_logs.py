"""Whose log `workloads logs` reads: a replica of the caller's workload, on the node that holds its
allocation now (docs/placement.md#logs). The read itself is the adapter's (`service.fleet.node_agents`)."""

from __future__ import annotations

from datetime import datetime

from better_compute.domain.fleet.node_agents import LogSource
from better_compute.domain.kernel.errors import InvalidInput, NotFound
from better_compute.domain.tenancy.credentials import Principal
from better_compute.service.fleet.node_agents import node_of_allocation, source_on
from better_compute.service.kernel.ports import StorePort
from better_compute.service.placement.ports import PlacementTx
from better_compute.service.placement.workloads import _visible


def locate(
    store: StorePort[PlacementTx],
    principal: Principal,
    ref: str,
    now: datetime,
    replica: int | None = None,
    cluster: str | None = None,
    serves: str = "logs",
) -> LogSource:
    """The replica `replica` (its number in its deployment; in `cluster` where several deployments
    have one of that number) of the workload `ref` the principal may see, or, with none named, its
    first replica on a node (by cluster, then number). NOT_FOUND: another tenant's workload, no such
    replica, or one on no node now; UNAVAILABLE: its node serves no logs (nor exec: `serves`)."""
    with store.read() as tx:
        workload = _visible(tx, principal, ref)
        deployments = sorted(
            tx.workloads.deployments_of([workload.id])[workload.id], key=lambda d: d.cluster_id
        )
        if cluster is not None:
            deployments = [d for d in deployments if d.cluster_id == cluster]
        replicas = tx.workloads.replicas_of([d.id for d in deployments])
        candidates = [
            (d.cluster_id, n, allocation)
            for d in deployments
            for n, allocation in sorted(replicas.get(d.id, []))
            if replica is None or n == replica
        ]
        if replica is not None and len(candidates) > 1:
            clusters = sorted(c for c, _, _ in candidates)
            raise InvalidInput(
                f"workload {workload.id} has a replica {replica} in clusters {', '.join(clusters)}; name"
                " the cluster",
                {"field": "cluster", "clusters": clusters},
            )
        for _, _, allocation in candidates:
            node = node_of_allocation(tx, allocation, now)
            if node is not None:
                return source_on(tx, allocation, node, workload.tenant_id, serves)
        what = "a replica on a node" if replica is None else f"replica {replica} on a node"
        raise NotFound(
            f"workload {workload.id} has no {what} now",
            {"workloadId": workload.id, "replica": replica, "cluster": cluster},
        )
