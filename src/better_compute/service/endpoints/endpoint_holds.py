"""An endpoint's hold on its instances (docs/endpoints.md): once a node is cut to the endpoint's layout, every
atom of it is booked open-ended under the endpoint's allocation (`endpoint:<name>`, no tenant's),
so no reservation or workload lands on the endpoint's partitions and no quota counts them. The
layout gate's partition holds cover the node until then, and the gate hands over to this hold in
the transaction that applies the change (`take_over`), so the node is never free in between, and
the endpoint's waiting component copies take the new partitions there and then. The gate then goes
on with a live relayout's next instance (`endpoint_relayout.next_cut_in`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from better_compute.domain.endpoints.endpoints import endpoint_allocation_id
from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.events import LedgerReleased
from better_compute.service.endpoints import components
from better_compute.service.endpoints.ports import EndpointsTx


def take_over(tx: EndpointsTx, node_id: str, now: datetime) -> str | None:
    """When the node serves an endpoint, book all its atoms for it from `now` on (the caller has
    just ended the gate's holds at `now`) and give its partitions to the endpoint's waiting copies;
    the endpoint's name, its row locked, for the caller to go on with a live relayout (None: the
    node serves no endpoint, or one being deleted)."""
    instance = tx.endpoints.instances_of_nodes([node_id]).get(node_id)
    if instance is None:
        return None
    ids = [a for family in tx.atoms.ids_by_gpu([node_id]).values() for a in family]
    if ids:
        allocation = endpoint_allocation_id(instance.endpoint, node_id)
        tx.ledger.book(ids, Window(now, None), allocation, None, now, require_bookable=False)
    # Its partitions take the endpoint's waiting copies now (after the node's lock, its endpoint's).
    if tx.endpoints.get(instance.endpoint, lock=True) is None:
        return None
    components.place_pending_in(tx, instance.endpoint, now)
    return instance.endpoint


def hold_new_atoms_in(tx: EndpointsTx, fresh: Sequence[Atom], now: datetime) -> None:
    """Atoms that appear on a node serving an endpoint, with no layout change under way there (the
    gate's holds take those), join the endpoint's hold. Called by ingestion under the nodes' locks."""
    nodes = sorted({a.node for a in fresh})
    serving = tx.endpoints.instances_of_nodes(nodes)
    if not serving:
        return
    gated = tx.mig_layouts.of_nodes(sorted(serving))
    mine = [a for a in fresh if a.node in serving and a.node not in gated]
    if not mine:
        return
    live = {b.atom_id for b in tx.ledger.live_on([a.id for a in mine], now)}
    by_node: dict[str, list[str]] = {}
    for atom in mine:
        if atom.id not in live:
            by_node.setdefault(atom.node, []).append(atom.id)
    for node, ids in sorted(by_node.items()):
        allocation = endpoint_allocation_id(serving[node].endpoint, node)
        tx.ledger.book(sorted(ids), Window(now, None), allocation, None, now, require_bookable=False)


def replan_lost_in(tx: EndpointsTx, gone: Sequence[Atom], now: datetime) -> None:
    """Atoms gone from nodes serving an endpoint (a GPU lost, an instance destroyed under it): the
    copies on them wait again, and take other free partitions, at `now`, so a copy never runs, or
    counts in showback, on a partition that is not there. Called by ingestion under the nodes'
    locks (then each endpoint's, the documented order)."""
    serving = tx.endpoints.instances_of_nodes(sorted({a.node for a in gone}))
    for name in sorted({i.endpoint for i in serving.values()}):
        if tx.endpoints.get(name, lock=True) is not None:
            components.place_pending_in(tx, name, now)


def release(tx: EndpointsTx, name: str, nodes: Sequence[str], now: datetime) -> None:
    """End the endpoint's hold on these nodes at `now`."""
    for node in sorted(nodes):
        allocation = endpoint_allocation_id(name, node)
        tx.ledger.end_allocation(allocation, now, LedgerReleased(allocation, now))


__all__ = ["hold_new_atoms_in", "release", "replan_lost_in", "take_over"]
