"""Signed node reports: checking who sent one, then applying it once, with its sequence number.

A request is checked in this order: the signature headers are there (`domain.fleet.node_reports`), the node
is registered and has joined, the signature verifies under its key, the timestamp is fresh; only then
is the body read (`read`), and a report must name the node that signed it. The report's effect and its
sequence number are written in one transaction, under the node's row lock, so a replayed or raced
report is refused and changes nothing. A report whose `reportId` was accepted before (a queued report
resent, signed again) is answered as accepted and not applied again. Refusals of a node that has
joined are logged (`node.report.refused`, for the admin), in a transaction of their own since the
refused one wrote nothing. So is an inventory refused because it names a GPU (or MIG) uuid another
node holds (`GpuOwnedElsewhere`, service.fleet.gpu_owners), which the node's row also keeps for `doctor`
until an inventory of the node is taken.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from better_compute.domain.fleet.events import (
    AllocationBound,
    AllocationReleased,
    NodeLayoutRefused,
    NodeRebootRequired,
    NodeReportRefused,
    NodeScrubbed,
    ReplicaReadinessChanged,
)
from better_compute.domain.fleet.gpu_owners import owned_elsewhere
from better_compute.domain.fleet.inventory import NodeReport
from better_compute.domain.fleet.node_agents import NodeAgent, check_agent_token, check_agent_url
from better_compute.domain.fleet.node_reports import (
    AgentReported,
    BindingReported,
    GenerationObserved,
    InventoryReported,
    ReplicaReported,
    Report,
    ScrubDone,
    SignedRequest,
    check_fresh,
    check_same_node,
    check_sequence,
    kind_of,
    refused,
)
from better_compute.domain.fleet.records import Node
from better_compute.domain.fleet.replica_states import check_address, is_live, said_ready
from better_compute.domain.kernel.errors import (
    DomainError,
    Forbidden,
    GpuOwnedElsewhere,
    InvalidInput,
    Unauthenticated,
    Unavailable,
)
from better_compute.domain.ledger.events import LedgerReleased
from better_compute.domain.placement.workloads import hands_over, is_replica
from better_compute.service.fleet.gpu_owners import refused_in
from better_compute.service.fleet.inventory import ingest_in
from better_compute.service.fleet.node_keys import verifies
from better_compute.service.fleet.ports import FleetTx
from better_compute.service.kernel.ports import StorePort

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Accepted:
    """A report taken: its node, kind and sequence number."""

    node: str
    kind: str
    sequence: int
    duplicate: bool = False
    """The report's `reportId` had been accepted before; nothing was applied this time."""


def _log_refusal(store: StorePort[FleetTx], node: str, reason: str, kind: str | None, now: datetime) -> None:
    with store.begin() as tx:
        tx.events.append(NodeReportRefused(node, reason, kind), now)


def _log_owned_elsewhere(
    store: StorePort[FleetTx], node: str, error: GpuOwnedElsewhere, now: datetime
) -> None:
    """Log an inventory refused for naming uuids other nodes hold, with who holds each, and keep
    them on the node's row for `doctor`."""
    with store.begin() as tx:
        tx.events.append(
            NodeReportRefused(node, str(error.reason), InventoryReported.KIND, error.owners), now
        )
        tx.nodes.set_owned_elsewhere(node, sorted(error.owners.items()), now)


def _reason(error: Unauthenticated) -> str:
    return str(error.details.get("reason", "unauthenticated"))


def verify(store: StorePort[FleetTx], signed: SignedRequest, now: datetime) -> Node:
    """The node that signed `signed`; UNAUTHENTICATED when it is unknown, has not joined, the
    signature does not verify, or the timestamp is not fresh."""
    with store.read() as tx:
        node = tx.nodes.by_ids([signed.node]).get(signed.node) if signed.node else None
    return _verified(store, node, signed, now)


def _verified(store: StorePort[FleetTx], node: Node | None, signed: SignedRequest, now: datetime) -> Node:
    """`verify`, the signer's row read (None: no such node)."""
    if node is None or node.public_key is None:
        raise refused("not_joined", "no node with that id has joined; run `bcd join` on it first")
    try:
        if not verifies(node.public_key, signed.signature, signed.canonical()):
            raise refused("signature", "the signature does not verify under the node's registered key")
        check_fresh(signed.timestamp, now)
    except Unauthenticated as error:
        _log_refusal(store, node.id, _reason(error), None, now)
        raise
    return node


def accept(
    store: StorePort[FleetTx], signed: SignedRequest, read: Callable[[bytes], Report], now: datetime
) -> Accepted:
    """Check `signed`, read its body with `read` (INVALID_INPUT when it is no report; `read` also
    refuses a body about another node than the path's), and apply it once (see the module)."""
    node = verify(store, signed, now)
    kind: str | None = None
    duplicate = False
    try:
        report = read(signed.body)
        kind = kind_of(report)
        check_same_node(node.id, report.node)
        with store.begin() as tx:
            tx.nodes.lock([node.id])
            current = tx.nodes.by_ids([node.id])[node.id]
            fresh = _check(node, current, report, signed, _seen(tx, [(node.id, report)]))
            _record(
                tx,
                [_Taken(node.id, signed.sequence, report.report_id, fresh, now, _was_silent(current, now))],
            )
            if fresh:
                _apply(tx, current, report, now)
            duplicate = not fresh
    except Unauthenticated as error:
        _log_refusal(store, node.id, _reason(error), kind, now)
        raise
    except GpuOwnedElsewhere as error:
        _log_owned_elsewhere(store, node.id, error, now)
        raise
    return Accepted(node.id, kind_of(report), signed.sequence, duplicate)


def _seen(tx: FleetTx, reports: Sequence[tuple[str, Report]]) -> set[tuple[str, str]]:
    """The `(node, reportId)` pairs of these reports accepted before (read under the nodes' locks)."""
    return tx.nodes.report_ids_taken([(n, r.report_id) for n, r in reports if r.report_id is not None])


def _check(
    signer: Node, current: Node, report: Report, signed: SignedRequest, seen: set[tuple[str, str]]
) -> bool:
    """Check the report under its node's lock (`current`: the node's row as the lock found it, `seen`:
    `_seen`); whether it is fresh (False: a copy of one accepted before, to answer without applying).
    Its sequence number is taken, fresh or not, by `_record`."""
    if current.public_key != signer.public_key:
        raise refused("signature", "the node joined again with another key; sign with the new one")
    check_sequence(signed.sequence, current.report_sequence)
    return report.report_id is None or (current.id, report.report_id) not in seen


@dataclass(frozen=True, slots=True)
class _Taken:
    """A report `_check` passed: its sequence number to record, fresh or not, and its `reportId`
    (recorded when it is fresh)."""

    node: str
    sequence: int
    report_id: str | None
    fresh: bool
    at: datetime
    returned: bool = False
    """The node was silent past the ready lease before this report (`_was_silent`)."""


def _record(tx: FleetTx, taken: Sequence[_Taken]) -> None:
    """Take the reports' sequence numbers and fresh `reportId`s, a few statements for all of them.
    Under the nodes' locks every number `_check` passed is still free; one found taken all the same
    is refused as a replay, and the transaction with it. A node heard from again after a silence
    vouches again for what it last said ready (`_vouch_again`)."""
    if not tx.nodes.accept_sequences([(t.node, t.sequence, t.at) for t in taken]):
        # (A batch refused so is written again one report at a time: each then hears its own.)
        raise refused("replayed", f"sequence {taken[0].sequence} was already used")
    tx.nodes.take_report_ids([(t.node, t.report_id, t.at) for t in taken if t.fresh and t.report_id])
    for t in taken:
        if t.returned:
            _vouch_again(tx, t.node, t.at)


def _was_silent(node: Node, now: datetime) -> bool:
    """Whether `node` (its row before this contact) no longer vouched for its containers at `now`:
    its last contact is older than the ready lease, or it has none."""
    return not is_live(node.last_contact_at, now)


def _vouch_again(tx: FleetTx, node_id: str, now: datetime) -> None:
    """A node silent past the ready lease is heard from: what it last said `ready` counts again from
    now, with no new report. Nothing was written when it went silent (each reader decides at its own
    `now`), but a reader that waits for readiness (a live relayout's resumer) must hear of its return,
    so each container it last said ready is logged `replica.readiness_changed` as ready again."""
    for state in tx.replica_states.ready_on(node_id):
        tx.events.append(ReplicaReadinessChanged(state.allocation_id, node_id, True, state.state), now)


@dataclass(frozen=True, slots=True)
class Sent:
    """A signed report as it arrived, with the reader of its body and when it arrived."""

    signed: SignedRequest
    read: Callable[[bytes], Report]
    now: datetime
    kind: str = InventoryReported.KIND
    """The kind its body names, before anything is checked: it only picks the way the report is
    written (`service.fleet.report_batches`), each with the same checks."""


Outcome = Accepted | Exception
"""What became of one report of a batch: accepted, or the error its sender is answered with (a
`DomainError`, or the database's)."""


def accept_batch(store: StorePort[FleetTx], batch: Sequence[Sent]) -> list[Outcome]:
    """Accept reports of distinct nodes together, each as `accept` would on its own; outcomes in
    the batch's order.

    Inventory reports (a node's first ones are a whole fleet's worth of GPUs and atoms) are taken in
    one transaction and ingested in one `ingest_in`: a transaction per node cost each report four
    times what the node's rows do. Each is checked under its node's row lock (nodes locked in id
    order, as every writer of several nodes locks them) with the same checks in the same order as
    `accept`, before anything is written: one that fails a check writes nothing and is answered with
    its error while the others go on; the sequence numbers and `reportId`s of the rest are recorded
    together (`_record`). If the shared write fails as a whole, each report is accepted
    again on its own, so one bad report never costs the others. Reports of any other kind are
    accepted on their own. The batch's ingest is stamped with the latest of its reports' arrival."""
    if len({sent.signed.node for sent in batch}) != len(batch):
        raise ValueError("a batch holds one report per node")
    outcomes: list[Outcome | None] = [None] * len(batch)
    checked: list[tuple[int, Node, InventoryReported]] = []
    with store.read() as tx:  # every signer's row in one read
        signers = tx.nodes.by_ids([sent.signed.node for sent in batch if sent.signed.node])
    for n, sent in enumerate(batch):
        try:
            node = _verified(store, signers.get(sent.signed.node), sent.signed, sent.now)
            report = _read(store, node, sent)
        except Exception as error:
            outcomes[n] = error
            continue
        if isinstance(report, InventoryReported):
            checked.append((n, node, report))
        else:
            outcomes[n] = _alone(store, sent)
    refusals: list[tuple[str, str, datetime]] = []
    owned: list[tuple[str, GpuOwnedElsewhere, datetime]] = []
    if checked:
        try:
            together = _inventories(store, batch, sorted(checked, key=lambda c: c[1].id), refusals, owned)
        except Exception:  # the shared write failed: each on its own, as if never batched
            refusals.clear()
            owned.clear()
            for n, _, _ in checked:
                outcomes[n] = _alone(store, batch[n])
        else:
            for n, outcome in together.items():
                outcomes[n] = outcome
    for node_id, reason, now in refusals:  # in transactions of their own, as `accept` logs them
        try:
            _log_refusal(store, node_id, reason, InventoryReported.KIND, now)
        except Unavailable:  # the refusal stands; the store has logged its outage
            pass
        except Exception:  # the refusal stands, logged or not
            _LOG.exception("a refused report of node %s could not be logged", node_id)
    for node_id, refusal, now in owned:
        try:
            _log_owned_elsewhere(store, node_id, refusal, now)
        except Unavailable:  # the refusal stands; the store has logged its outage
            pass
        except Exception:
            _LOG.exception("a refused report of node %s could not be logged", node_id)
    assert all(outcome is not None for outcome in outcomes)
    return [outcome for outcome in outcomes if outcome is not None]


def _read(store: StorePort[FleetTx], node: Node, sent: Sent) -> Report:
    """The report `sent` carries, from the node that signed it (a refusal logged as `accept` logs
    it)."""
    kind: str | None = None
    try:
        report = sent.read(sent.signed.body)
        kind = kind_of(report)
        check_same_node(node.id, report.node)
    except Unauthenticated as error:
        _log_refusal(store, node.id, _reason(error), kind, sent.now)
        raise
    return report


def _alone(store: StorePort[FleetTx], sent: Sent) -> Outcome:
    try:
        return accept(store, sent.signed, sent.read, sent.now)
    except Exception as error:
        return error


def _inventories(
    store: StorePort[FleetTx],
    batch: Sequence[Sent],
    checked: Sequence[tuple[int, Node, InventoryReported]],
    refusals: list[tuple[str, str, datetime]],
    owned: list[tuple[str, GpuOwnedElsewhere, datetime]],
) -> dict[int, Outcome]:
    """The inventory reports of `accept_batch`, in one transaction (nodes in id order); refusals to
    log are added to `refusals` and `owned` (GPUs other nodes hold), for after the commit."""
    outcomes: dict[int, Outcome] = {}
    at = max(batch[n].now for n, _, _ in checked)
    with store.begin() as tx:
        tx.nodes.lock([node.id for _, node, _ in checked])
        current = tx.nodes.by_ids([node.id for _, node, _ in checked])
        seen = _seen(tx, [(node.id, report) for _, node, report in checked])
        passed: list[tuple[int, Node, InventoryReported, bool, int]] = []
        for n, node, report in checked:
            sent, now, held = batch[n], batch[n].now, current[node.id]
            try:
                fresh = _check(node, held, report, sent.signed, seen)
                observed = _observed(held, report) if fresh else held.observed_generation
            except DomainError as error:
                outcomes[n] = error
                if isinstance(error, Unauthenticated):
                    refusals.append((node.id, _reason(error), now))
                continue
            passed.append((n, held, report, fresh, observed))
        # Whose GPUs they name, of the fresh ones (in node order: the first to name a new one has it).
        elsewhere = refused_in(
            tx, [(held.id, report.gpus) for _, held, report, fresh, _ in passed if fresh], at
        )
        recorded: list[_Taken] = []
        taken: list[tuple[Node, InventoryReported, int]] = []
        for n, held, report, fresh, observed in passed:
            sent = batch[n]
            if fresh and held.id in elsewhere:
                refusal = owned_elsewhere(held.id, elsewhere[held.id])
                outcomes[n] = refusal
                owned.append((held.id, refusal, sent.now))
                continue
            recorded.append(
                _Taken(
                    held.id,
                    sent.signed.sequence,
                    report.report_id,
                    fresh,
                    sent.now,
                    _was_silent(held, sent.now),
                )
            )
            if fresh:
                taken.append((held, report, observed))
            outcomes[n] = Accepted(held.id, report.KIND, sent.signed.sequence, not fresh)
        _record(tx, recorded)
        if taken:
            ingest_in(
                tx, [NodeReport(node.id, report.gpus, observed) for node, report, observed in taken], at
            )
            for node, report, _ in taken:
                _mark_reboot(tx, node, report, at)
                _mark_layout_refused(tx, node, report, at)
                _taken(tx, node)
    return outcomes


def _taken(tx: FleetTx, node: Node) -> None:
    """An inventory of the node was taken: what a refused one named is past (`doctor`)."""
    if node.owned_elsewhere:
        tx.nodes.set_owned_elsewhere(node.id, (), None)


def _mark_reboot(tx: FleetTx, node: Node, report: InventoryReported, now: datetime) -> None:
    required = bool(report.reboot_required)
    if required != node.reboot_required:
        tx.nodes.set_reboot_required(node.id, required)
        if required:
            tx.events.append(NodeRebootRequired(node.id, report.reboot_required), now)


def _mark_layout_refused(tx: FleetTx, node: Node, report: InventoryReported, now: datetime) -> None:
    """Keep what the inventory says was refused (an empty list clears it: the GPUs converged), and
    log each refusal new to the node (a GPU refused an action it was not refused before)."""
    refused = report.layout_refused
    if refused == node.layout_refused:
        return
    tx.nodes.set_layout_refused(node.id, refused)
    known = {(r.gpu, r.action) for r in node.layout_refused}
    for r in refused:
        if (r.gpu, r.action) not in known:
            tx.events.append(NodeLayoutRefused(node.id, r.gpu, r.action, r.reason), now)


def _apply(tx: FleetTx, node: Node, report: Report, now: datetime) -> None:
    match report:
        case InventoryReported():
            refused = refused_in(tx, [(node.id, report.gpus)], now)
            if refused:
                raise owned_elsewhere(node.id, refused[node.id])
            ingest_in(tx, [NodeReport(node.id, report.gpus, _observed(node, report))], now)
            _mark_reboot(tx, node, report, now)
            _mark_layout_refused(tx, node, report, now)
            _taken(tx, node)
        case GenerationObserved():
            tx.nodes.mark_observed(node.id, _observable(node, report.generation), now)
        case BindingReported():
            _check_on_node(tx, node.id, report.allocation_id)
            tx.bindings.put(report.allocation_id, node.id, report.state, report.detail, now)
            if report.state == "released":
                tx.events.append(AllocationReleased(report.allocation_id, node.id), now)
                _end_if_terminating(tx, report.allocation_id, now)
            else:
                tx.events.append(
                    AllocationBound(report.allocation_id, node.id, report.state, report.detail), now
                )
        case ReplicaReported():
            check_address(report.address)
            if _reports_on(tx, node.id, report.allocation_id, report.state):
                _put_state(tx, node.id, report, now)
        case AgentReported():
            # Signed by the node it names (check_same_node): a node sets only its own agent.
            url = check_agent_url(report.url)
            tx.node_agents.put(NodeAgent(node.id, url, check_agent_token(report.token), now))
        case ScrubDone():
            mine = {a.id for a in tx.atoms.of_nodes([node.id])}
            foreign = sorted(set(report.atoms) - mine)
            if foreign:
                raise Forbidden(f"atoms {foreign} are not on node {node.id}", {"atoms": foreign})
            tx.atoms.mark_scrubbed(node.id, report.atoms, now)
            tx.events.append(NodeScrubbed(node.id, tuple(sorted(set(report.atoms)))), now)


def _put_state(tx: FleetTx, node_id: str, report: ReplicaReported, now: datetime) -> None:
    """Keep the node's word on a container; when it goes to `ready` or from it, say so in the log
    (`replica.readiness_changed`), in this transaction: a relayout waiting for moved copies to be
    ready resumes on it (`service.endpoints.relayout_resume`), without this transaction taking
    any lock but its node's."""
    before = tx.replica_states.of_allocations([report.allocation_id])[report.allocation_id]
    was = any(said_ready(s) for s in before if s.node_id == node_id)
    record = report.record(now)
    if record.state == "removed":
        # Nothing runs there any more: the node's word is dropped, not kept (no row outlives its
        # container, whichever of this and the allocation's end comes first).
        tx.replica_states.forget_on(report.allocation_id, node_id)
    else:
        tx.replica_states.put(record)
    if said_ready(record) != was:
        tx.events.append(
            ReplicaReadinessChanged(report.allocation_id, node_id, said_ready(record), record.state), now
        )


def _end_if_terminating(tx: FleetTx, allocation_id: str, now: datetime) -> None:
    """A terminating replica's allocation ends once no node holds it handed over any more: its
    devices are free from then on (seed 001: "until the allocation is removed")."""
    if not is_replica(allocation_id) or not tx.workloads.terminating_among([allocation_id]):
        return
    if hands_over(tx.bindings.of_allocations([allocation_id])[allocation_id]):
        return  # another node of the allocation has not released it yet
    if tx.workloads.end_terminating(allocation_id) is not None:
        tx.ledger.end_allocation(allocation_id, now, LedgerReleased(allocation_id, now))
        tx.replica_states.forget([allocation_id])


def _observed(node: Node, report: InventoryReported) -> int:
    """The generation a node's inventory says it observed (INVALID_INPUT for one never handed out);
    the one it had when the report names none."""
    if report.observed_generation is None:
        return node.observed_generation
    return _observable(node, report.observed_generation)


def _observable(node: Node, generation: int) -> int:
    """A generation the node may say it observed: one the server has handed out."""
    if not 0 <= generation <= node.spec_generation:
        raise InvalidInput(
            f"generation {generation} was never handed to node {node.id} (its spec is at"
            f" {node.spec_generation})",
            {"field": "generation"},
        )
    return generation


def _reports_on(tx: FleetTx, node_id: str, allocation_id: str, state: str) -> bool:
    """Whether to keep a node's word on a container: it reports on a replica that booked its atoms,
    or on an endpoint copy on it now (FORBIDDEN otherwise). A copy that moved away, or ended and was
    forgotten, may still be reported `removed` by a node: taken when that node had reported on it (its
    last word is dropped), ignored otherwise (False), never refused, so a node that removed a
    container it no longer runs is not told it lied."""
    held = tx.hooks.holds_copy(node_id, allocation_id)
    if held is None:
        _check_on_node(tx, node_id, allocation_id)
        return True
    if held:
        return True
    if state == "removed":
        before = tx.replica_states.of_allocations([allocation_id])[allocation_id]
        return any(s.node_id == node_id for s in before)
    raise Forbidden(
        f"allocation {allocation_id} holds no atom of node {node_id}",
        {"allocationId": allocation_id, "node": node_id},
    )


def _check_on_node(tx: FleetTx, node_id: str, allocation_id: str) -> None:
    """A node reports only on tenants' allocations that booked its atoms, and on endpoint copies
    placed on its atoms now (FORBIDDEN otherwise, the same for one that does not exist, so a node
    learns nothing of other nodes' allocations or copies)."""
    booked = {b.atom_id for b in tx.ledger.allocation_bookings(allocation_id) if b.tenant_id is not None}
    if not booked and (copy_atom := tx.hooks.atom_of_unbooked(allocation_id)) is not None:
        booked = {copy_atom}  # an endpoint copy: on its partition's node only
    mine = {a.id for a in tx.atoms.of_nodes([node_id])}
    if not booked & mine:
        raise Forbidden(
            f"allocation {allocation_id} holds no atom of node {node_id}",
            {"allocationId": allocation_id, "node": node_id},
        )


def accept_read(store: StorePort[FleetTx], signed: SignedRequest, now: datetime) -> Node:
    """The node that signed a spec read, its sequence number taken (UNAUTHENTICATED as `verify`, and
    `replayed` for a number not greater than the last accepted: a captured read sent again). One
    statement records the number and the read's time (the node's contact), without reading the row
    under a lock first: an idle node long-polls its spec, so this runs every `--wait` seconds per
    node, and never waits on a report being written (a node sends one request at a time)."""
    node = verify(store, signed, now)
    assert node.public_key is not None  # `verify` refuses a node without one
    with store.begin() as tx:
        returned = False
        if _was_silent(node, now):  # rare: decided again under the node's lock, so it is logged once
            tx.nodes.lock([node.id])
            current = tx.nodes.by_ids([node.id]).get(node.id)
            returned = current is not None and _was_silent(current, now)
        taken = tx.nodes.accept_read(node.id, node.public_key, signed.sequence, now)
        if taken and returned:
            _vouch_again(tx, node.id, now)
    if taken:
        return node
    try:
        with store.read() as tx:
            current = tx.nodes.by_ids([node.id]).get(node.id)
        if current is None or current.public_key != node.public_key:
            raise refused("signature", "the node joined again with another key; sign with the new one")
        if signed.sequence == 0:
            raise refused(
                "replayed",
                "a spec read must carry a sequence number greater than the last accepted from this"
                " node, not 0 (a bcd older than this server sends 0: upgrade bcd on the node)",
            )
        check_sequence(signed.sequence, current.report_sequence)
        raise refused("replayed", f"sequence {signed.sequence} was already used")
    except Unauthenticated as error:
        _log_refusal(store, node.id, _reason(error), None, now)
        raise


__all__ = ["Accepted", "Outcome", "Sent", "accept", "accept_batch", "accept_read", "verify"]
