"""Serving node specs: derive one (`domain.gate.node_spec.plan_spec`), give it its generation, and wait
for a change when the node asks to.

A spec is read in a read transaction; only when its digest differs from the one stored with the
node's generation is a write made, under the node's row lock, deriving the spec again there and
advancing the generation by one (compare-and-set). So the generation moves whenever the content
does, including when a booking starts or ends with the clock, and a generation always names one
content. A granted layout change whose node is told its frozen shape at a new generation (a
tenant's booking held at the read's time) is granted again at it, under the same lock
(`domain.gate.mig_gate.told_frozen_again`): the node's report of such a generation never applies it.

A wait polls this every `POLL_INTERVAL`: the poll only decides how soon a change is seen, never
what the spec is.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from better_compute.domain.fleet.records import Node
from better_compute.domain.gate.mig_gate import GRANTED, told_already, told_frozen_again
from better_compute.domain.gate.node_spec import LiveHold, NodeSpec, NodeWork, next_generation, plan_spec
from better_compute.domain.gate.records import MigLayoutGate
from better_compute.domain.kernel.errors import ConcurrentChange, NotFound
from better_compute.domain.placement.workloads import is_replica
from better_compute.service.gate.ports import GateTx
from better_compute.service.kernel.clock import Clock
from better_compute.service.kernel.ports import StorePort

POLL_INTERVAL = timedelta(milliseconds=200)
"""How often a waiting spec read derives the spec again."""

_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class ServedSpec:
    """A node's spec with the generation that names its content."""

    generation: int
    spec: NodeSpec


def _derive(tx: GateTx, node_id: str, now: datetime) -> tuple[Node, MigLayoutGate | None, NodeSpec]:
    node = tx.nodes.by_ids([node_id]).get(node_id)
    if node is None:
        raise NotFound(f"node {node_id} not found", {"node": node_id})
    pool = tx.pools.of_nodes([node_id]).get(node_id)
    atoms = tx.atoms.of_nodes([node_id])
    live = tx.ledger.live_on([a.id for a in atoms], now)
    replicas = sorted({b.allocation_id for b in live if is_replica(b.allocation_id)})
    # a terminating replica's devices stay booked, but the node is told to take them back
    ending = tx.workloads.terminating_among(replicas) if replicas else set()
    booked = [LiveHold(b.allocation_id, b.atom_id, b.starts_at, b.ends_at, b.tenant_id) for b in live]
    holds = [h for h in booked if h.allocation_id not in ending]
    gate = tx.mig_layouts.of_nodes([node_id]).get(node_id)
    spec = plan_spec(
        node_id,
        tx.gpus.of_nodes([node_id]),
        pool,
        atoms,
        holds,
        now,
        carries_pool_layout=node.carries_pool_layout,
        gate=gate,
        own_layout=node.mig_layout,
        bookings=booked,
        work=_work(tx, node, [a.id for a in atoms], holds),
    )
    return node, gate, spec


def _work(tx: GateTx, node: Node, atom_ids: Sequence[str], holds: Sequence[LiveHold]) -> NodeWork:
    """What the node runs for the contexts above. On a Slurm cluster's node a replica's container
    is run by its Slurm job (docs/slurm.md#replicas-as-jobs), not by `bcd`: the node is told the
    replica's devices (its CDI spec) and no container to run, so the container never runs twice;
    the container is its `jobContainer`, which the node watches and reports the readiness of (a
    `bcd` that knows no `jobContainer` ignores it and runs nothing)."""
    work = tx.hooks.work_on(atom_ids, sorted({h.allocation_id for h in holds if h.tenant_id is not None}))
    if not work.containers:
        return work
    cluster = tx.clusters.get(node.cluster_id)
    if cluster is None or cluster.slurm is None:
        return work
    return replace(work, containers={}, job_containers=work.containers)


def derive_in(tx: GateTx, node_id: str, now: datetime) -> tuple[Node, MigLayoutGate | None, NodeSpec]:
    """The node, its layout change under way and the spec it is told at `now`, read in `tx`
    without advancing its generation (what `nodes.get` shows); an unknown node is NOT_FOUND."""
    return _derive(tx, node_id, now)


def read(store: StorePort[GateTx], node_id: str, now: datetime) -> ServedSpec:
    """The node's spec at `now` and its generation, advanced when the content changed."""
    with store.read() as tx:
        node, _, spec = _derive(tx, node_id, now)
    if next_generation(node.spec_generation, node.spec_digest, spec.digest()) is None:
        return ServedSpec(node.spec_generation, spec)
    for _ in range(_ATTEMPTS):
        with store.begin() as tx:
            tx.nodes.lock([node_id])
            node, gate, spec = _derive(tx, node_id, now)
            digest = spec.digest()
            following = next_generation(node.spec_generation, node.spec_digest, digest)
            if following is None:
                return ServedSpec(node.spec_generation, spec)
            if tx.nodes.advance_spec(node_id, node.spec_generation, digest):
                # assignments: a tenant's booking holds the node at `now` (`plan_spec`)
                again = told_frozen_again(gate, spec.booked, following)
                if again is not None and not tx.mig_layouts.replace(again):
                    raise ConcurrentChange(
                        f"node {node_id}'s layout change moved while its spec was read; retry",
                        {"node": node_id},
                    )
                return ServedSpec(following, spec)
    raise ConcurrentChange(f"node {node_id}'s spec kept changing while it was read; retry", {"node": node_id})


def settle_grant_in(tx: GateTx, node_id: str, now: datetime) -> None:
    """After a grant (in its transaction, under the node's lock, every write of it made): when the
    spec derived at `now` is the content the node's current generation already names, the grant
    changed nothing the node is told, so no newer generation will come for it; the node having
    converged that generation counts as applied (`domain.gate.mig_gate.told_already`). Without this, an
    endpoint of the layout its nodes already have, or a node sent back to the layout it has, would
    wait for ever."""
    gate = tx.mig_layouts.of_nodes([node_id]).get(node_id)
    if gate is None or gate.state != GRANTED:
        return
    node, _, spec = _derive(tx, node_id, now)
    settled = told_already(gate, node.spec_generation, node.spec_digest == spec.digest())
    if settled is not None and not tx.mig_layouts.replace(settled):
        raise ConcurrentChange(
            f"node {node_id}'s layout change moved while it was granted; retry", {"node": node_id}
        )


async def read_after(
    store: StorePort[GateTx],
    node_id: str,
    after: int | None,
    wait: timedelta,
    clock: Clock,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    stopping: threading.Event | None = None,
) -> ServedSpec:
    """The spec, at once when its generation is not `after` (or `after` is None), else once it
    changes, `wait` has passed or the process is `stopping` (answering the same generation then).
    Database work runs in a worker thread, the waiting on the event loop."""
    deadline = monotonic() + wait.total_seconds()
    while True:
        served = await asyncio.to_thread(read, store, node_id, clock())
        over = monotonic() >= deadline or (stopping is not None and stopping.is_set())
        if after is None or served.generation != after or over:
            return served
        await sleep(min(POLL_INTERVAL.total_seconds(), max(0.0, deadline - monotonic())))
