"""An endpoint's live relayout (docs/endpoints.md#changing-the-layout-live, beyond SageMaker, which makes the
layout immutable): the instances are re-cut one at a time, in node order, through the layout gate.

`endpoints.update` checks the whole roll up front (`domain.endpoints.endpoints.plan_relayout`: every step
keeps every component at or above its `minCopies`, and every copy has a partition at the end),
stores the new layout with the endpoint `Updating`, and starts the first instance. Each step
(`next_cut_in`):

1. plans the copies as if the instance were gone (`components.plan_in`). When a component would
   drop below its `minCopies`, the step waits and says so: the endpoint stays `Updating` with the
   reason, and another `endpoints.update` takes it on from there.
2. moves the copies on the instance to free partitions of their type elsewhere (or makes them wait);
3. ends the endpoint's hold on the instance and holds it for the gate from the same instant, granted
   the new layout at once (no tenant can be there: the endpoint held it).

When the node has converged, the gate hands it back to the endpoint (`endpoint_holds.take_over`)
in one transaction: the waiting copies come back, and the next instance starts. When none is left,
the endpoint is `InService`. Every step is an `endpoint.updated` event. No timer drives it.

Locks: a step runs under the previous instance's node lock and the endpoint's row lock, and takes
the next instance's node lock; instances go in node order, so the node locks are taken in the same
ascending order as every other writer takes them.
"""

from __future__ import annotations

from datetime import datetime

from better_compute.domain.endpoints import endpoints as rules
from better_compute.domain.endpoints.commands import parse_endpoint
from better_compute.domain.endpoints.events import EndpointUpdated
from better_compute.domain.endpoints.records import EndpointRecord
from better_compute.domain.gate import mig_gate as gate_rules
from better_compute.domain.gate.events import NodeMigGranted
from better_compute.domain.gate.records import MigLayoutGate
from better_compute.service.endpoints import components, endpoint_holds
from better_compute.service.endpoints.ports import EndpointsTx
from better_compute.service.fleet.rederive import rederive_told
from better_compute.service.gate import node_spec, partition_holds


def _announce(
    tx: EndpointsTx,
    record: EndpointRecord,
    status: str,
    now: datetime,
    *,
    node: str = "",
    layout: str = "",
    reason: str = "",
) -> None:
    tx.events.append(EndpointUpdated(record.name, record.tenant_id, status, node, layout, reason), now)


def next_cut_in(tx: EndpointsTx, name: str, now: datetime) -> str | None:
    """Start re-cutting the endpoint's next instance whose layout is not its variant's, when none is
    being cut; `InService` when none is left. The caller holds the endpoint's row lock and the node
    locks below the next instance's. Answers the node started, if any."""
    record = tx.endpoints.get(name)
    if record is None or record.status != "Updating":
        return None
    spec = parse_endpoint(record.spec)
    targets = {v.name: rules.variant_layout(v) for v in spec.variants}
    instances = tx.endpoints.instances(name)
    if tx.mig_layouts.of_nodes([i.node_id for i in instances]):
        return None  # one instance at a time: the one being cut finishes first
    todo = sorted((i for i in instances if i.layout != targets[i.variant]), key=lambda i: i.node_id)
    if not todo:
        tx.endpoints.set_status(name, "InService", None, now)
        _announce(tx, record, "InService", now)
        return None
    instance, target = todo[0], targets[todo[0].variant]
    tx.nodes.lock([instance.node_id])
    plan = components.plan_in(tx, name, frozenset({instance.node_id}))
    short = components.below_floor(plan)
    states = components.copy_states_in(tx, plan)
    live = components.live_in(tx, plan.copies, now)
    unready = components.below_ready_floor(plan, states, live)
    if short is not None:
        component, placed, floor = short
        reason = (
            f"the relayout waits before re-cutting {instance.node_id}: component {component} would run"
            f" {placed} copies, below its minCopies {floor} (no other instance has room for its copies);"
            " lower minCopies, or update the endpoint again"
        )
    elif unready is not None:
        # make before break: copies move off the instance while enough others stay ready, and the
        # instance is cut once every copy that left is ready where it went (its node says so)
        moved = components.move_ahead_in(tx, plan, instance.node_id, states, live, now)
        component, ready, floor = unready
        reason = (
            f"the relayout waits before re-cutting {instance.node_id}: component {component} would keep"
            f" {ready} ready copies, below its minCopies {floor}"
            + (f"; {moved} copies moved off it ahead of the cut" if moved else "")
            + "; it goes on by itself once the copies that moved are ready where they went"
        )
    if short is not None or unready is not None:
        if record.reason != reason:
            tx.endpoints.set_status(name, "Updating", reason, now)
            _announce(tx, record, "Updating", now, node=instance.node_id, reason=reason)
        return None
    components.apply_in(tx, plan, now)
    endpoint_holds.release(tx, name, [instance.node_id], now)
    node = tx.nodes.by_ids([instance.node_id])[instance.node_id]
    pool = tx.pools.of_nodes([instance.node_id])[instance.node_id]
    partition_holds.hold(tx, tx.atoms.ids_by_gpu([instance.node_id]), now, now)
    gate = MigLayoutGate(
        instance.node_id, pool.id, instance.layout, target, gate_rules.SCHEDULED, now, scheduled_from=now
    )
    tx.mig_layouts.add(gate_rules.granted(gate, now, node.spec_generation))
    tx.events.append(NodeMigGranted(instance.node_id, pool.id, target, False), now)
    tx.nodes.set_mig_layout([instance.node_id], target)
    rederive_told(tx, [instance.node_id], now)
    tx.endpoints.set_instance_layout(instance.node_id, target)
    node_spec.settle_grant_in(tx, instance.node_id, now)
    if record.reason is not None:
        tx.endpoints.set_status(name, "Updating", None, now)
    _announce(tx, record, "Updating", now, node=instance.node_id, layout=target)
    return instance.node_id


def layout_applied_in(tx: EndpointsTx, node_id: str, now: datetime) -> None:
    """The gate applied a node's new layout and let go of it (its hook `layout_applied`, wired in
    `service/hooks.py`): a node that serves an endpoint is held for the endpoint from that moment,
    and a live relayout goes on to its next instance."""
    serving = endpoint_holds.take_over(tx, node_id, now)
    if serving is not None:
        next_cut_in(tx, serving, now)


__all__ = ["layout_applied_in", "next_cut_in"]
