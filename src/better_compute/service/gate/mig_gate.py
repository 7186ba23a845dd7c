"""The MIG layout gate (docs/concepts.md#changing-a-pools-layout-the-gate): a pool's new layout freezes each
of its nodes, and a reconciler moves each node through `domain.gate.mig_gate` one step at a time.

Each step is one transaction under the node's row lock, written compare-and-set on the gate's
`version`: two reconcilers, or a reconciler and a new request, never both move one node, and a
crash between steps leaves the node at the last step committed. Scheduling books the node's GPU
families in the ledger, where the exclusion constraint decides: a booking that landed since the
plan was made makes the insert fail, and the next pass plans again from its end.

Reconcilers shard the nodes through leases on the gate rows (`Reconciler.tick`): on PostgreSQL
each replica takes free rows `SKIP LOCKED`, so any number share the work, one per node at a time,
and a replica that dies loses its leases when they run out. A lease only says who should try; a
step is correct whoever makes it.

A node scheduled for later is not leased until its time comes, unless a booking on it ended early:
each reconciler follows the event log (`service.kernel.event_tail.Follower`, as the relayout
resumer does) for the events that end bookings before their time (`ledger.released`: a
reservation, a workload replica or an eviction released; `ledger.cancelled`: one cancelled before
it started), and leases the nodes those bookings were on at its next pass. The event is appended in
the transaction that ended the booking, so the step that follows reads the ledger without it. The
news only says when to look; the step decides from the ledger under the node's lock, and `RECHECK`
still looks at every such node now and then, for an end whose event no reconciler followed (one
that committed while none ran).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from better_compute.domain.gate import mig_gate as rules
from better_compute.domain.gate.events import NodeMigApplied, NodeMigGranted, NodeMigScheduled
from better_compute.domain.gate.records import MigLayoutGate
from better_compute.domain.kernel.errors import ConcurrentChange, Unavailable
from better_compute.domain.kernel.events import LoggedEvent
from better_compute.domain.ledger.events import LedgerCancelled, LedgerReleased
from better_compute.service.fleet.rederive import rederive_told
from better_compute.service.gate import node_spec, partition_holds
from better_compute.service.gate.ports import GateTx
from better_compute.service.kernel.clock import Clock
from better_compute.service.kernel.event_tail import Follower
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ledger.ports import NotBookable, Overlap

_log = logging.getLogger("better_compute.mig_gate")

LEASE = timedelta(seconds=15)
"""How long a reconciler's hold on a node lasts without renewal; another takes the node after."""

RECHECK = timedelta(seconds=60)
"""A node scheduled for later is looked at again this long after its last lease ran out: if the
bookings that held it back ended early (released, cancelled, evicted), its holds move to the end
of those left (`domain.gate.mig_gate.next_step`). The backstop: a reconciler that follows the
event the end appended looks at the node at its next pass. Only when to look; what happens is
decided from the ledger under the node's lock."""

INTERVAL = 0.5
"""Seconds between a reconciler's passes."""

BATCH = 200
"""Nodes one reconciler holds at most (it takes more as it finishes them)."""

SERVER_DUTY = 0.25
"""The share of its time `serve`'s reconciler spends stepping nodes, on PostgreSQL."""

SERVER_DUTY_SQLITE = 0.1
"""The same on SQLite, lower: a step holds SQLite's single writer lock, which every request that
writes waits for, where on PostgreSQL it locks one node's rows."""


def server_duty(dialect: str) -> float:
    """The duty `serve`'s reconciler runs at on a database of `dialect`."""
    return SERVER_DUTY_SQLITE if dialect == "sqlite" else SERVER_DUTY


def request_in(
    tx: GateTx, pool_id: str, node_ids: Sequence[str], old_shape: str | None, new_shape: str, now: datetime
) -> None:
    """Gate `node_ids` (a pool's nodes, locked by the caller) for the pool's new shape: a mig pool's
    layout, or a slot pool's `replicas` as `domain.gate.mig_gate.slots_shape` writes it."""
    gates = tx.mig_layouts.of_nodes(node_ids)
    for node_id in sorted(node_ids):
        gate = gates.get(node_id)
        current = old_shape if gate is None else rules.told_shape(gate)
        change = rules.requested(gate, node_id, pool_id, current, new_shape, now)
        match change:
            case rules.Put(gate=put) if put.version == 1:
                tx.mig_layouts.add(put)
            case rules.Put(gate=put):
                if not tx.mig_layouts.replace(put):
                    raise ConcurrentChange(
                        f"node {node_id}'s layout change moved while this one was made; try again",
                        {"node": node_id},
                    )
            case rules.Drop(gate=dropped):
                _end(tx, dropped, now, undone=True)


def join_in(tx: GateTx, pool_id: str, node_ids: Sequence[str], layout: str, now: datetime) -> None:
    """Nodes added to a mig pool (locked by the caller, their atoms derived for it) read the pool's
    layout directly and take no work before their first converged spec: each one that runs a
    daemon (it has joined) is held from now and granted at once, so the gate releases it when it
    reports a newer generation (docs/concepts.md, the gate). A node with no daemon (a simulated one that never
    joined) has nothing to wait for."""
    nodes = tx.nodes.by_ids(node_ids)
    for node_id in sorted(node_ids):
        node = nodes.get(node_id)
        if node is not None and node.public_key is not None:
            cut_now_in(tx, pool_id, node_id, None, layout, now)


def cut_now_in(
    tx: GateTx, pool_id: str, node_id: str, frozen: str | None, layout: str, now: datetime
) -> None:
    """Hold every atom of a node (locked by the caller) from now and grant it `layout` at once:
    for a node no tenant's booking holds from now on (a joining node, an endpoint's instance), so
    there is nothing to wait for. A change under way is undone first (its holds end at now, these
    start then). Raises `Overlap` when a tenant's booking landed on the node meanwhile."""
    node = tx.nodes.by_ids([node_id])[node_id]
    old = tx.mig_layouts.of_nodes([node_id]).get(node_id)
    if old is not None:
        _end(tx, old, now, undone=True)
    partition_holds.hold(tx, tx.atoms.ids_by_gpu([node_id]), now, now)
    gate = MigLayoutGate(node_id, pool_id, frozen, layout, rules.SCHEDULED, now, scheduled_from=now)
    tx.mig_layouts.add(rules.granted(gate, now, node.spec_generation))
    rederive_told(tx, [node_id], now)
    tx.events.append(NodeMigGranted(node_id, pool_id, layout, False), now)
    node_spec.settle_grant_in(tx, node_id, now)


def leave_in(tx: GateTx, node_ids: Sequence[str], now: datetime) -> None:
    """Nodes removed from a pool end its layout change: their holds are released."""
    for gate in tx.mig_layouts.of_nodes(node_ids).values():
        _end(tx, gate, now, undone=True)


def _end(
    tx: GateTx, gate: MigLayoutGate, now: datetime, *, undone: bool = False, applied: bool = True
) -> None:
    """End the node's change: its holds released, its gate row gone, and `node.mig.applied` naming
    the layout it now has, unless it took none (`applied` false: a node keeping its own layout,
    whose `node.mig.granted` already said `released`)."""
    partition_holds.release(tx, gate, now)
    if not tx.mig_layouts.remove(gate.node_id, gate.version):
        raise Overlap(gate.node_id)
    if not undone:  # an endpoint's instance, cut: the endpoint holds it from the moment the gate lets go
        tx.hooks.layout_applied(gate.node_id, now)
    if not applied:
        return
    layout = gate.frozen_layout if undone else gate.pending_layout
    tx.events.append(NodeMigApplied(gate.node_id, gate.pool_id, layout or "", undone), now)


Booked = tuple[datetime | None, bool]
"""The node's tenant bookings as `tenants_booked_until` reads them: the latest end, and whether
one never ends."""


def facts(tx: GateTx, node_id: str, now: datetime, booked: Booked | None = None) -> rules.NodeFacts:
    """What the planner reads of the node; `booked`, when given, stands for the ledger read (see
    `step`), and the node's own row is read afresh."""
    node = tx.nodes.by_ids([node_id])[node_id]
    booked_until, open_ended = tx.ledger.tenants_booked_until(node_id, now) if booked is None else booked
    return rules.NodeFacts(
        carries_pool_layout=node.carries_pool_layout,
        spec_generation=node.spec_generation,
        observed_generation=node.observed_generation,
        booked_until=booked_until,
        open_ended=open_ended,
        joined=node.public_key is not None,
    )


def step_in(tx: GateTx, gate: MigLayoutGate, now: datetime, booked: Booked | None = None) -> rules.Step:
    """Take the gate's next step in the caller's transaction (which holds the node's row lock);
    raises `Overlap` when a booking or another writer got there first (nothing is then written).
    `booked`: the node's tenant bookings as read before the lock was taken (see `step`)."""
    step = rules.next_step(gate, facts(tx, gate.node_id, now, booked), now)
    match step:
        case rules.Schedule(at=at):
            partition_holds.release(tx, gate, now)  # a node scheduled later: its holds move to `at`
            families = tx.atoms.ids_by_gpu([gate.node_id])  # every atom of each GPU, parent included
            partition_holds.hold(tx, families, at, now)
            if not tx.mig_layouts.replace(rules.scheduled(gate, at)):
                raise Overlap(gate.node_id)
            tx.events.append(NodeMigScheduled(gate.node_id, gate.pool_id, at, gate.pending_layout), now)
        case rules.Grant(release=release, keeps_own=keeps_own):
            generation = tx.nodes.by_ids([gate.node_id])[gate.node_id].spec_generation
            moved = rules.granted(gate, now, generation)
            if not tx.mig_layouts.replace(moved):
                raise Overlap(gate.node_id)
            # A slot count is the control plane's to derive: the new slots exist from now (held
            # with the rest until the node has them), the ones past the count are gone. A GPU not
            # at its new layout yet is partitionPending until the node reports it there.
            rederive_told(tx, [gate.node_id], now)
            tx.events.append(NodeMigGranted(gate.node_id, gate.pool_id, gate.pending_layout, release), now)
            if release:
                _end(tx, moved, now, applied=not keeps_own)
            else:
                node_spec.settle_grant_in(tx, gate.node_id, now)
        case rules.Apply():
            _end(tx, gate, now)
        case rules.Wait():
            pass
    return step


def step(
    store: StorePort[GateTx], node_id: str, now: datetime, owner: str | None = None
) -> rules.Step | None:
    """One step for the node in a transaction of its own; None when it has no gate, its lease is
    another reconciler's (with `owner`), or a booking or another writer got there first (the next
    pass plans again). A read decides first whether there is anything to do: a wait takes no write
    transaction (the step is decided again under the node's lock when there is).

    The write plans from that read's ledger facts, not a second one (the ledger's read is most of a
    step's database time, which every request shares): a tenant booking that landed on the node
    since then overlaps the holds a schedule writes, and the exclusion constraint refuses them;
    one that ended early since leaves the holds later than they could be, until the reconciler
    follows the end's event to the node at its next pass (`Reconciler.woken`); and bookings never
    land under the holds a grant or an apply follows. The gate and the node's row are read again
    under the lock."""
    with store.read() as tx:  # most passes find nothing to do: decide that without the writer lock
        gate = tx.mig_layouts.of_nodes([node_id]).get(node_id)
        if gate is None:
            return None
        booked = tx.ledger.tenants_booked_until(node_id, now)
        planned = rules.next_step(gate, facts(tx, node_id, now, booked), now)
    if isinstance(planned, rules.Wait):
        return planned
    try:
        with store.begin() as tx:
            tx.nodes.lock([node_id])
            gate = tx.mig_layouts.of_nodes([node_id]).get(node_id)
            if gate is None or (owner is not None and not tx.mig_layouts.leased_to(node_id, owner, now)):
                return None
            return step_in(tx, gate, now, booked)
    except (Overlap, NotBookable):
        return None


@dataclass
class _Ended:
    """The reconciler as its follower sees the log: allocations whose bookings ended early since
    its last pass (a partition change's own holds end with `gpu.partition.released`, not here)."""

    allocations: set[str] = field(default_factory=set)

    def load(self, tx: GateTx) -> None:
        pass  # what ended before is left to `RECHECK`

    def apply(self, logged: LoggedEvent) -> None:
        if isinstance(logged.event, LedgerReleased | LedgerCancelled):
            self.allocations.add(logged.event.subject)


@dataclass
class Reconciler:
    """Drives the gate: each pass leases nodes (`BATCH` at most) and steps each of them once; a
    node scheduled for later only when its time came, a booking on it ended early, or `recheck`
    passed since its last lease."""

    store: StorePort[GateTx]
    clock: Clock
    owner: str
    lease: timedelta = LEASE
    recheck: timedelta = RECHECK
    batch: int = BATCH
    duty: float = 1.0
    """The share of its time a pass may spend stepping nodes: after a step that took t seconds it
    pauses t * (1 / duty - 1), so a reconciler beside a server leaves the rest to the requests it
    shares the machine and the database (on SQLite, its one writer) with. Pacing only; it decides
    nothing."""
    pause: Callable[[float], None] = time.sleep
    stopping: threading.Event | None = None
    """Set by `run`: a pass ends at the next node once it is set, and its pauses end at once."""
    _ended: _Ended = field(default_factory=_Ended)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _woken: dict[str, datetime] = field(default_factory=dict)
    """Nodes a booking ended early on, each with when the news came: leased at the next pass that
    can (another reconciler's live lease waits), forgotten once stepped or when `recheck` would
    have looked at it anyway."""

    def __post_init__(self) -> None:
        self._follower: Follower[GateTx] = Follower(self._ended, self._lock, time.monotonic)

    def woken(self, now: datetime) -> list[str]:
        """Follow the log: the nodes bookings ended early on since the last pass, with those still
        waiting to be stepped. A hint only: which nodes to lease now, never what they do."""
        with self.store.read() as tx:
            self._follower.sync(tx)
            with self._lock:
                ended, self._ended.allocations = self._ended.allocations, set()
            try:
                nodes = tx.ledger.nodes_booked_by(sorted(ended)) if ended else set()
            except BaseException:
                with self._lock:  # what was read is not lost: the next pass maps it again
                    self._ended.allocations |= ended
                raise
        for node_id in nodes:
            self._woken.setdefault(node_id, now)
        forget = now - self.recheck - self.lease
        self._woken = {n: at for n, at in self._woken.items() if at > forget}
        return sorted(self._woken)

    def tick(self) -> dict[str, rules.Step]:
        """One pass: the steps taken, by node (waits included)."""
        now = self.clock()
        woken = self.woken(now)
        with self.store.begin() as tx:
            held = tx.mig_layouts.lease(
                self.owner, now, now + self.lease, self.batch, now - self.recheck, woken
            )
        taken: dict[str, rules.Step] = {}
        rest = max(0.0, 1.0 / self.duty - 1.0) if self.duty > 0 else 0.0
        for node_id in held:
            if self.stopping is not None and self.stopping.is_set():
                break  # its leases run out; a successor takes the nodes then
            started = time.perf_counter()
            done = step(self.store, node_id, self.clock(), self.owner)
            if done is not None:
                taken[node_id] = done
                self._woken.pop(node_id, None)
            if rest:
                pause = (time.perf_counter() - started) * rest
                if self.stopping is not None and self.pause is time.sleep:
                    self.stopping.wait(pause)
                else:
                    self.pause(pause)
        return taken

    def run(self, stopping: threading.Event, interval: float = INTERVAL) -> None:
        """Pass after pass until `stopping` is set (which also cuts a pass short)."""
        self.stopping = stopping
        while not stopping.is_set():
            try:
                self.tick()
            except Unavailable:  # the store logs when an outage starts and ends; the next pass tries again
                pass
            except Exception:  # a fault of ours: logged, and the next pass tries again
                _log.exception("mig gate pass failed")
            stopping.wait(interval)


__all__ = [
    "BATCH",
    "INTERVAL",
    "LEASE",
    "RECHECK",
    "SERVER_DUTY",
    "SERVER_DUTY_SQLITE",
    "Booked",
    "Reconciler",
    "cut_now_in",
    "facts",
    "join_in",
    "leave_in",
    "request_in",
    "server_duty",
    "step",
    "step_in",
]
