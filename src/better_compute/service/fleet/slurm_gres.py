"""`nodes.slurmGres` (admin): what Slurm is told of one node, from its GPUs and atoms as stored.

The GPUs and atoms are read in one transaction, so the lines describe one moment of the node; the
mapping and its refusals are the domain's (`domain.fleet.slurm_gres`).
"""

from __future__ import annotations

from better_compute.domain.fleet.clusters import node_not_found
from better_compute.domain.fleet.slurm_gres import SlurmGres, node_gres
from better_compute.domain.tenancy.credentials import Principal, require_admin
from better_compute.domain.tenancy.tenancy import check_ref
from better_compute.service.fleet.ports import FleetTx
from better_compute.service.kernel.ports import StorePort

METHOD = "nodes.slurmGres"


def read(store: StorePort[FleetTx], principal: Principal, node_id: str) -> SlurmGres:
    """The node's gres.conf lines and slurm.conf node line; an unknown node is NOT_FOUND, a tenant
    token FORBIDDEN, a node Slurm cannot be told exactly INVALID_STATE."""
    require_admin(principal, METHOD)
    check_ref(node_id, "node")
    with store.read() as tx:
        if node_id not in tx.nodes.by_ids([node_id]):
            raise node_not_found(node_id)
        gpus = tx.gpus.of_nodes([node_id])
        atoms = tx.atoms.of_nodes([node_id])
    return node_gres(node_id, gpus, atoms)
