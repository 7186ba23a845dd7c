"""`nodes.get` (admin): one node with its GPUs, atoms, their holders and its layout gate; and
`nodes.slurmGres` (admin): what Slurm is told of the node's atoms."""

from __future__ import annotations

from fastapi import APIRouter

from better_compute.api.auth import AUTHENTICATED, PrincipalDep
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.api.routes.inventory import atom_public, gpu_public, node_public
from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.ledger import availability
from better_compute.domain.ledger.records import LiveBooking
from better_compute.service.fleet import slurm_gres
from better_compute.service.fleet.inventory import NodeView
from better_compute.service.gate import node_detail
from better_compute.wire.node_detail import (
    AtomHolderPublic,
    LayoutGatePublic,
    NodeAtomPublic,
    NodeDetailPublic,
    NodeGpuPublic,
)
from better_compute.wire.slurm_gres import NodeSlurmGresPublic

router = APIRouter(prefix="/v1", tags=["inventory"], dependencies=AUTHENTICATED, route_class=StrictQueryRoute)


@router.get("/nodes/{node}", response_model=NodeDetailPublic)
def get_node(node: str, principal: PrincipalDep, store: StoreDep, now: NowDep) -> NodeDetailPublic:
    return detail_public(node_detail.read(store, principal, node, now))


@router.get("/nodes/{node}/slurm-gres", response_model=NodeSlurmGresPublic)
def get_slurm_gres(node: str, principal: PrincipalDep, store: StoreDep) -> NodeSlurmGresPublic:
    out = slurm_gres.read(store, principal, node)
    return NodeSlurmGresPublic(gres_conf=out.gres_conf, node_line=out.node_line)


def _holder(b: LiveBooking) -> AtomHolderPublic:
    return AtomHolderPublic(
        allocation_id=b.allocation_id,
        kind=node_detail.holder_kind(b.allocation_id),
        tenant_id=b.tenant_id,
        starts_at=b.starts_at,
        ends_at=b.ends_at,
    )


def _atom(a: Atom, held: tuple[LiveBooking, ...], d: node_detail.NodeDetail) -> NodeAtomPublic:
    free = availability([Window(b.starts_at, b.ends_at) for b in held], d.at)
    shown = atom_public(a, free).model_dump(by_alias=True)
    return NodeAtomPublic.model_validate({**shown, "holders": [_holder(b) for b in held]})


def detail_public(d: node_detail.NodeDetail) -> NodeDetailPublic:
    refused = {r.gpu: r for r in d.node.layout_refused}
    gate = d.gate
    return NodeDetailPublic(
        at=d.at,
        node=node_public(NodeView(d.node, d.pool_id)),
        joined_at=d.node.joined_at,
        gpus=[
            NodeGpuPublic.model_validate(
                {**gpu_public(g, refused.get(g.id)).model_dump(by_alias=True), "toldLayout": d.told.get(g.id)}
            )
            for g in d.gpus
        ],
        atoms=[_atom(a, d.holders.get(a.id, ()), d) for a in d.atoms],
        gate=None
        if gate is None
        else LayoutGatePublic(
            pool_id=gate.pool_id,
            state=gate.state,
            frozen_layout=gate.frozen_layout,
            pending_layout=gate.pending_layout,
            requested_at=gate.requested_at,
            scheduled_from=gate.scheduled_from,
            granted_at=gate.granted_at,
        ),
    )
