"""`pools.previewLayout`: what a new MIG layout would do to a pool, read in one transaction, written nowhere.

The admin and the pool's owner may ask (the answer names other tenants' allocations); a tenant that
sees the pool through its quota rows is FORBIDDEN, one that does not see it gets NOT_FOUND, exactly
like a pool that does not exist. The layout is checked on every node's GPU model by the same rule,
with the same refusal, as `pools.update`; the rest is `domain.gate.layout_preview`.
"""

from __future__ import annotations

from datetime import datetime

from better_compute.domain.catalog import layouts
from better_compute.domain.fleet.pools import check_layout_fits, check_layout_possible
from better_compute.domain.gate.layout_preview import (
    LayoutPreview,
    NodeBooking,
    NodeState,
    plan_layout_preview,
)
from better_compute.domain.gate.mig_gate import told_layout
from better_compute.domain.kernel.errors import InvalidState
from better_compute.domain.tenancy.credentials import Principal
from better_compute.domain.tenancy.tenancy import check_ref, pool_not_found, require_pool_owner, sees_pool
from better_compute.service.gate.ports import GateTx
from better_compute.service.kernel.ports import StorePort
from better_compute.service.tenancy import quotas

METHOD = "pools.previewLayout"


def preview(
    store: StorePort[GateTx], principal: Principal, pool_id: str, mig_layout: str, now: datetime
) -> LayoutPreview:
    """Per member node: when the gate could grant `mig_layout`, which bookings hold it back, which
    atoms would disappear and which instances appear; and the pool's capacity by profile before and
    after. Nothing is written: no event, no generation, no booking."""
    check_ref(pool_id, "id")
    with store.read() as tx:
        pool = tx.pools.get(pool_id)
        if pool is None:
            raise pool_not_found(pool_id)
        if not principal.is_admin:
            visible = sees_pool(
                principal, pool.owner_tenant_id, quotas.quota_pool_ids(tx, principal.tenant_id), pool_id
            )
            require_pool_owner(principal, pool_id, pool.owner_tenant_id, visible, METHOD)
        if pool.mode != "mig":
            raise InvalidState(
                f"pool {pool_id} shares its GPUs as {pool.mode}; only mig pools have a MIG layout to preview",
                {"poolId": pool_id, "mode": pool.mode},
            )
        layout = layouts.format_layout(layouts.parse_layout(mig_layout))
        members = sorted(tx.pools.members([pool_id])[pool_id])
        gpus = tx.gpus.of_nodes(members)
        if members:
            check_layout_fits(gpus, layout)
        else:
            check_layout_possible(layout, METHOD)
        nodes = tx.nodes.by_ids(members)
        atoms = tx.atoms.of_nodes(members)
        gates = tx.mig_layouts.of_nodes(members)
        gpu_of_atom = {a.id: a.gpu_id for a in atoms}
        node_of_gpu = {g.id: g.node_id for g in gpus} | {a.gpu_id: a.node for a in atoms}
        bookings: dict[str, list[NodeBooking]] = {m: [] for m in members}
        for b in tx.ledger.live_on(sorted(gpu_of_atom), now):
            gpu_id = gpu_of_atom[b.atom_id]
            bookings[node_of_gpu[gpu_id]].append(
                NodeBooking(b.allocation_id, gpu_id, b.tenant_id, b.starts_at, b.ends_at)
            )
        states = [
            NodeState(
                node=m,
                carries_pool_layout=nodes[m].carries_pool_layout if m in nodes else True,
                gpus=tuple(g for g in gpus if g.node_id == m),
                bookings=tuple(bookings[m]),
                layout=told_layout(pool, gates.get(m)),
                change_state=gates[m].state if m in gates else None,
            )
            for m in members
        ]
    return plan_layout_preview(pool_id, pool.settings.layout, layout, states, now)
