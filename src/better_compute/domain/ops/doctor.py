"""`better-compute doctor`: what in the fleet needs an operator, as findings (docs/operations.md#doctor).

Each rule is a pure function of what the fleet's records say at `now`, returning findings with a
code, the thing it is about (`subject`), what was found (`detail`) and what to do (`action`):

- `capacity.mig.stuck`: a node granted a new MIG layout 24 hours ago or more that has not converged
  it (its gate row is still `granted`). Its partition holds stay until it does (docs/operations.md#doctor).
- `node.silent`: a joined node (it registered a key) whose `bcd` has not reached the server for the
  silence window, or not since it joined that long ago. A live `bcd` reaches it at least every
  `--wait` seconds even when idle: it long-polls its spec, signed, and that read counts as contact
  as a report does. Nodes that never joined (registered, waiting for their `bcd`) are not expected
  to call; `serve --fleet`'s simulated nodes join and run the same loop as a real `bcd`.
- `gpu.unhealthy`: a present GPU its node reports unhealthy.
- `node.gpu-owned-elsewhere`: a node whose last inventory was refused because it named a GPU (or
  MIG) uuid another node holds (domain.fleet.gpu_owners), until an inventory of it is taken.
- `node.reboot-required`: a node whose last inventory said a GPU waits for a reboot.
- `node.layout-refused`: a GPU its node's last inventory said it could not bring to its layout (the
  hardware, or a GPU client that would not stop, refused the change), with the action and the
  reason; one finding per GPU, until it converges.
- `pool.fractional-without-quota`: a mig pool with no `gpu.mig` quota row, or a timeslice or mps
  pool with no `gpu.slot` row, above 0, for any tenant: every fractional request is QUOTA_EXCEEDED.
- `ledger.overlap`: two live bookings of one atom overlap in time, or two of one GPU's atoms that
  exclude each other (the GPU and a part of it): the ledger's fences failed.
- `ledger.stranded`: a tenant's live booking, now or later, of an atom it cannot have: one gone from
  its node, not bookable (a GPU split since into parts, one not at its layout, one unhealthy), or
  in another pool than the booking's; one finding per reservation (or workload replica), naming it.
- `ledger.orphan-partition`: a live, open-ended partition change of a GPU whose node has no gate
  row: nothing will release it. A bounded one (a maintenance window, `partitions.book`) ends by
  itself and is no finding.
- `workload.terminating-stuck`: a workload's replica terminating for 24 hours or more: its node has
  not released it, so its devices stay booked (docs/placement.md#terminating-replicas).
- `capacity.mig.waiting`: a node's layout change not yet granted that has waited, or will wait,
  more than its bound (7 days unless the caller says, `migWaitingDays`) from its request, with the
  bookings that hold it and when they end (docs/layouts.md#when-a-layout-change-waits).
- `replica.crash-looping`, `replica.image-not-found`, `replica.create-failed`: a workload replica's or
  an endpoint copy's container that does not run, as its node last reported it (its detail, restarts
  and exit code), naming the workload or endpoint, the allocation and the node; until the node reports
  it running, or the replica ends (docs/placement.md#phases-and-reasons).
- `endpoint.waiting`: an endpoint waiting for an hour or more: `Failed` for want of idle nodes
  (it is tried again when capacity frees), an instance cut whose node has not reported converging,
  or a live relayout held at a component's `minCopies`.

Findings sort by (code, subject, detail), so two runs over the same fleet print the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from better_compute.domain.endpoints.records import EndpointRecord
from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.bindings import stranded_reason
from better_compute.domain.fleet.records import Gpu, Node, Pool
from better_compute.domain.fleet.replica_states import ReplicaState
from better_compute.domain.gate.records import MigLayoutGate
from better_compute.domain.ledger.ledger import Booking
from better_compute.domain.placement.workloads import Terminating, is_replica
from better_compute.domain.tenancy.records import Quota

STUCK_AFTER = timedelta(hours=24)
"""How long after its grant a node that has not converged its new layout is reported stuck."""

DEFAULT_MIG_WAITING_DAYS = 7
"""How long a layout change may wait before `capacity.mig.waiting` when the caller does not say (the
API's `migWaitingDays` bounds are in `wire.doctor`)."""

ENDPOINT_WAITING_AFTER = timedelta(hours=1)
"""How long an endpoint may wait (`Failed`, an instance being cut, a relayout held) before
`endpoint.waiting`: a node cuts its GPUs in seconds to minutes."""

MIG_STUCK = "capacity.mig.stuck"
MIG_WAITING = "capacity.mig.waiting"
ENDPOINT_WAITING = "endpoint.waiting"
NODE_SILENT = "node.silent"
GPU_UNHEALTHY = "gpu.unhealthy"
NODE_GPU_OWNED_ELSEWHERE = "node.gpu-owned-elsewhere"
NODE_REBOOT_REQUIRED = "node.reboot-required"
NODE_LAYOUT_REFUSED = "node.layout-refused"
POOL_FRACTIONAL_WITHOUT_QUOTA = "pool.fractional-without-quota"
LEDGER_OVERLAP = "ledger.overlap"
LEDGER_ORPHAN_PARTITION = "ledger.orphan-partition"
LEDGER_STRANDED = "ledger.stranded"
WORKLOAD_TERMINATING_STUCK = "workload.terminating-stuck"
REPLICA_CRASH_LOOPING = "replica.crash-looping"
REPLICA_IMAGE_NOT_FOUND = "replica.image-not-found"
REPLICA_CREATE_FAILED = "replica.create-failed"

CODES: tuple[str, ...] = (
    MIG_STUCK,
    MIG_WAITING,
    ENDPOINT_WAITING,
    GPU_UNHEALTHY,
    LEDGER_ORPHAN_PARTITION,
    LEDGER_OVERLAP,
    LEDGER_STRANDED,
    NODE_GPU_OWNED_ELSEWHERE,
    NODE_LAYOUT_REFUSED,
    NODE_REBOOT_REQUIRED,
    NODE_SILENT,
    POOL_FRACTIONAL_WITHOUT_QUOTA,
    REPLICA_CRASH_LOOPING,
    REPLICA_CREATE_FAILED,
    REPLICA_IMAGE_NOT_FOUND,
    WORKLOAD_TERMINATING_STUCK,
)
"""Every code a finding may have, in the order findings sort by."""

FRACTIONAL_CLASS: Mapping[str, str] = {"mig": "gpu.mig", "timeslice": "gpu.slot", "mps": "gpu.slot"}
"""The atom class a pool of each sharing mode books fractions as."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing that needs an operator: its code, what it is about, what was found, what to do."""

    code: str
    subject: str
    detail: str
    action: str


@dataclass(frozen=True, slots=True)
class StrandedBooking:
    """A tenant's live booking of an atom it cannot have, with the pool it was made in and the
    atom as it is now."""

    booking: Booking
    pool_id: str | None
    atom: Atom


@dataclass(frozen=True, slots=True)
class FleetFacts:
    """What the doctor reads, in one read of the store."""

    nodes: Sequence[Node] = ()
    gpus: Sequence[Gpu] = ()
    pools: Sequence[Pool] = ()
    quotas: Sequence[Quota] = ()
    gates: Sequence[MigLayoutGate] = ()
    partition_holds: Sequence[Booking] = ()
    """Live bookings of partition changes not over at `now`."""
    overlaps: Sequence[tuple[Booking, Booking]] = ()
    """Pairs of live bookings of one atom that overlap (the ledger's own self-check)."""
    family_overlaps: Sequence[tuple[Booking, Booking]] = ()
    """Pairs of live bookings of one GPU's atoms that exclude each other and overlap (the GPU and a
    part of it), the first of the lesser class."""
    stranded: Sequence[StrandedBooking] = ()
    """Tenants' live bookings not over at `now` of atoms gone, not bookable or in another pool."""
    terminating: Sequence[Terminating] = ()
    """Workloads' replicas waiting for their node to release them."""
    gate_holders: Sequence[GateHolder] = ()
    """Tenants' live bookings, now or later, on the nodes of the changes `mig_waiting_nodes` names."""
    endpoints: Sequence[EndpointFacts] = ()
    """Endpoints stored `Creating`, `Updating` or `Failed`, with their instances' nodes."""
    replica_problems: Sequence[ReplicaProblem] = ()
    """Containers of replicas and copies that do not run, with whose they are."""


@dataclass(frozen=True, slots=True)
class ReplicaProblem:
    """A container its node says does not run (`state.problem`), and whose it is: `owner` names the
    workload (`workload wl-1 (tenant acme)`) or the endpoint and component; None: the allocation
    ended (its state is forgotten then, so this is a race with the end)."""

    state: ReplicaState
    owner: str | None


@dataclass(frozen=True, slots=True)
class GateHolder:
    """A tenant's live booking on a gated node that holds its layout change back: the allocation
    (a reservation's id, or a workload replica's), its tenant, and its end (None: never)."""

    node_id: str
    allocation_id: str
    tenant_id: str
    ends_at: datetime | None


@dataclass(frozen=True, slots=True)
class EndpointFacts:
    """An endpoint as stored, and the nodes its instances took."""

    record: EndpointRecord
    nodes: tuple[str, ...] = ()


def diagnose(
    facts: FleetFacts,
    now: datetime,
    silent_after: timedelta,
    *,
    mig_waiting_after: timedelta = timedelta(days=DEFAULT_MIG_WAITING_DAYS),
) -> list[Finding]:
    """Every finding about the fleet at `now`, sorted by (code, subject, detail)."""
    findings = [
        *mig_stuck(facts.gates, {n.id: n for n in facts.nodes}, now),
        *silent_nodes(facts.nodes, now, silent_after),
        *unhealthy_gpus(facts.gpus),
        *gpus_owned_elsewhere(facts.nodes),
        *reboot_required(facts.nodes),
        *layout_refused(facts.nodes),
        *fractional_without_quota(facts.pools, facts.quotas),
        *ledger_overlaps(facts.overlaps),
        *family_overlaps(facts.family_overlaps),
        *stranded_bookings(facts.stranded, facts.gpus),
        *orphan_partitions(facts.partition_holds, facts.gpus, facts.gates),
        *terminating_stuck(facts.terminating, now),
        *replica_problems(facts.replica_problems),
        *mig_waiting(facts.gates, facts.gate_holders, now, mig_waiting_after),
        *endpoints_waiting(facts.endpoints, facts.gates, now),
    ]
    return sorted(findings, key=lambda f: (f.code, f.subject, f.detail))


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    """How many findings of each code (codes with none left out), by code."""
    return dict(sorted(Counter(f.code for f in findings).items()))


def mig_stuck(gates: Iterable[MigLayoutGate], nodes: Mapping[str, Node], now: datetime) -> Iterator[Finding]:
    """Nodes granted a layout `STUCK_AFTER` or more before `now` that have not converged it."""
    for gate in gates:
        if gate.state != "granted" or gate.granted_at is None or now - gate.granted_at < STUCK_AFTER:
            continue
        node = nodes.get(gate.node_id)
        observed = (
            "never reported a spec generation"
            if node is None
            else (f"last observed spec generation {node.observed_generation}")
        )
        granted_at = _when(gate.granted_at)
        yield Finding(
            MIG_STUCK,
            gate.node_id,
            f"pool {gate.pool_id} granted layout {gate.pending_layout} at {granted_at}"
            f" (spec generation {gate.granted_generation}); the node has not converged it"
            f" ({observed}), so its GPUs stay held",
            "check bcd on the node (running, reaching the server, converging: its logs), and whether a"
            " GPU waits for a reboot; the holds are released once it reports a newer converged"
            " generation",
        )


def silent_nodes(nodes: Iterable[Node], now: datetime, silent_after: timedelta) -> Iterator[Finding]:
    """Joined nodes whose last sign of life (a signed report or spec read, or joining) is
    `silent_after` or more ago."""
    for node in nodes:
        if node.public_key is None:
            continue  # never joined: its bcd is not set up yet, so nothing is expected from it
        contact, joined = node.last_contact_at, node.joined_at
        last: datetime | None
        if contact is not None and (joined is None or contact >= joined):
            last, detail = contact, f"no report or spec read since {_when(contact)}"
        else:
            last = joined
            detail = "no report or spec read since it joined" + (
                "" if joined is None else f" at {_when(joined)}"
            )
        if last is not None and now - last < silent_after:
            continue
        yield Finding(
            NODE_SILENT,
            node.id,
            f"{detail} ({_minutes(silent_after)} or more)",
            "check that bcd runs on the node and reaches the server (network, clock, its key);"
            " cordon the node if it is down",
        )


def unhealthy_gpus(gpus: Iterable[Gpu]) -> Iterator[Finding]:
    """Present GPUs reported unhealthy: none of their atoms can be booked."""
    for gpu in gpus:
        if gpu.present and not gpu.healthy:
            yield Finding(
                GPU_UNHEALTHY,
                gpu.id,
                f"GPU {gpu.index} ({gpu.product}) of node {gpu.node_id} reports unhealthy"
                " (ECC errors or throttling); its atoms are not bookable",
                "inspect the GPU on the node (nvidia-smi -q: ECC, XID errors, temperature); drain"
                " and reboot the node, or replace the GPU if it stays unhealthy",
            )


def gpus_owned_elsewhere(nodes: Iterable[Node]) -> Iterator[Finding]:
    """Nodes whose last inventory was refused for naming GPUs other nodes hold: nothing of it was
    taken, so the node's inventory stays as it was before it."""
    for node in nodes:
        if not node.owned_elsewhere:
            continue
        named = ", ".join(f"{uuid} (held by node {holder})" for uuid, holder in node.owned_elsewhere)
        at = "" if node.owned_elsewhere_at is None else f" at {_when(node.owned_elsewhere_at)}"
        yield Finding(
            NODE_GPU_OWNED_ELSEWHERE,
            node.id,
            f"its inventory{at} named {named}: a GPU belongs to one node, so the report was refused"
            " and none of it was taken",
            "if the GPU really moved to this node, let its old node go first: it reports the GPU gone"
            " when its bcd restarts without it, or, if that node is gone for good, better-compute nodes"
            " release-gpu <uuid>; then restart bcd on this node. If it did not move, this node reports"
            " hardware it does not have (a copied state directory, a tampered host): cordon it and"
            " check it",
        )


def reboot_required(nodes: Iterable[Node]) -> Iterator[Finding]:
    """Nodes whose last inventory said a GPU waits for a reboot (a failed GPU reset)."""
    for node in nodes:
        if node.reboot_required:
            yield Finding(
                NODE_REBOOT_REQUIRED,
                node.id,
                "a MIG mode change needs a GPU reset that failed; a GPU waits for a reboot",
                "drain the node (cordon it, let its work end), then reboot it; bcd applies the"
                " layout after the reboot",
            )


def layout_refused(nodes: Iterable[Node]) -> Iterator[Finding]:
    """GPUs whose layout change their node's last inventory said was refused, one finding each."""
    for node in nodes:
        for refusal in node.layout_refused:
            yield Finding(
                NODE_LAYOUT_REFUSED,
                node.id,
                f"GPU {refusal.gpu}: {refusal.action} refused since {_when(refusal.since)}: {refusal.reason}",
                "read the reason: a process holding the GPU (nvidia-smi lists it; stop it, or add its"
                " systemd unit to bcd run --gpu-clients so bcd stops it for the change), or a change"
                " the driver refuses (a MIG mode change may need the node drained and rebooted); bcd"
                " tries again on each pass, and the finding clears once the GPU is at its layout",
            )


def fractional_without_quota(pools: Iterable[Pool], quotas: Iterable[Quota]) -> Iterator[Finding]:
    """Pools that share GPUs but where no tenant has quota for the shared atoms."""
    granted = {(q.pool_id, q.cls) for q in quotas if q.limit > 0}
    for pool in pools:
        cls = FRACTIONAL_CLASS.get(pool.mode)
        if cls is None or (pool.id, cls) in granted:
            continue
        yield Finding(
            POOL_FRACTIONAL_WITHOUT_QUOTA,
            pool.id,
            f"{pool.mode} pool with no {cls} quota row for any tenant: every {cls} request is QUOTA_EXCEEDED",
            f"give a tenant {cls} quota: better-compute quotas set --tenant T --pool {pool.id}"
            f" --class {cls} --limit N (or pools.offer; ownerQuota in a fleet file)",
        )


def ledger_overlaps(pairs: Iterable[tuple[Booking, Booking]]) -> Iterator[Finding]:
    """Pairs of live bookings of one atom that overlap: the ledger's fences failed."""
    for first, second in pairs:
        yield Finding(
            LEDGER_OVERLAP,
            first.atom_id,
            f"live bookings {first.id} ({first.allocation_id}, {_span(first)}) and {second.id}"
            f" ({second.allocation_id}, {_span(second)}) overlap",
            "end one of the two allocations (reservations.release or cancel); then find what wrote"
            " the ledger around its fences (a manual SQL write, a restored backup)",
        )


def family_overlaps(pairs: Iterable[tuple[Booking, Booking]]) -> Iterator[Finding]:
    """Pairs of live bookings of a GPU and of a part of it (or of parts of two kinds) that overlap:
    the GPU is held whole and in parts at once; the ledger's fences failed."""
    for first, second in pairs:
        yield Finding(
            LEDGER_OVERLAP,
            first.gpu_id,
            f"live bookings {first.id} ({first.allocation_id}, atom {first.atom_id}, {_span(first)}) and"
            f" {second.id} ({second.allocation_id}, atom {second.atom_id}, {_span(second)}) of GPU"
            f" {first.gpu_id} overlap: the GPU is held whole and in parts at once",
            "end one of the two allocations (reservations.release or cancel); ledger.stranded names"
            " the one whose atom its GPU no longer has",
        )


def stranded_bookings(found: Iterable[StrandedBooking], gpus: Iterable[Gpu]) -> Iterator[Finding]:
    """Allocations (a reservation, a workload's replica) with a live booking of an atom they cannot
    have (`domain.fleet.bindings.stranded_why`), one finding each, naming it and why."""
    unhealthy = {g.id for g in gpus if g.present and not g.healthy}
    by_allocation: dict[str, list[StrandedBooking]] = {}
    for item in found:
        by_allocation.setdefault(item.booking.allocation_id, []).append(item)
    for allocation_id, items in by_allocation.items():
        first = items[0]
        why = stranded_reason([i.atom for i in items], first.pool_id, unhealthy)
        kind = "workload replica" if is_replica(allocation_id) else "reservation"
        yield Finding(
            LEDGER_STRANDED,
            allocation_id,
            f"{kind} {allocation_id} (tenant {first.booking.tenant_id}, {_span(first.booking)}) holds"
            f" {len(items)} atom{'' if len(items) == 1 else 's'} it cannot have: {why}",
            "cancel or release it (better-compute reservations cancel|release; a workload replica:"
            " better-compute workloads release-replica), and book again; its atoms are not what it"
            " was given, so the tenant cannot run on them",
        )


def orphan_partitions(
    holds: Iterable[Booking], gpus: Iterable[Gpu], gates: Iterable[MigLayoutGate]
) -> Iterator[Finding]:
    """Live, open-ended partition changes of GPUs whose node has no gate row: a hold nothing will
    release. A bounded hold (a maintenance window an operator booked) ends at its window's end."""
    node_of = {g.id: g.node_id for g in gpus}
    gated = {g.node_id for g in gates}
    by_allocation: dict[str, list[Booking]] = {}
    for booking in holds:
        if booking.span.end is None:
            by_allocation.setdefault(booking.allocation_id, []).append(booking)
    for allocation_id, family in by_allocation.items():
        gpu_id = family[0].gpu_id
        node_id = node_of.get(gpu_id)
        if node_id is not None and node_id in gated:
            continue
        where = f"node {node_id}" if node_id is not None else "a GPU no node reports"
        yield Finding(
            LEDGER_ORPHAN_PARTITION,
            allocation_id,
            f"holds {len(family)} atoms of GPU {gpu_id} on {where} ({_span(family[0])}) with no"
            " layout change under way: nothing will release it",
            "make sure no layout change of the GPU's pool is under way, then end it with"
            f" `better-compute partitions release {allocation_id}` (docs/operations.md#doctor); the"
            " GPU takes no work until then",
        )


def terminating_stuck(items: Iterable[Terminating], now: datetime) -> Iterator[Finding]:
    """Replicas terminating `STUCK_AFTER` or more before `now`: their node has not released them."""
    for t in items:
        if now - t.since < STUCK_AFTER:
            continue
        yield Finding(
            WORKLOAD_TERMINATING_STUCK,
            t.allocation_id,
            f"a replica of workload {t.workload_id} (tenant {t.tenant_id}) in cluster {t.cluster_id} has"
            f" been terminating since {_when(t.since)}: its node has not released it, so its devices"
            " stay booked",
            "bring its node's bcd back (it releases the replica); if the node is gone for good,"
            f" end it: better-compute workloads release-replica {t.allocation_id} (operations.create"
            " {type: replica.release, payload: {allocation}})",
        )


_PROBLEM_CODES: Mapping[str, str] = {
    "crash-looping": REPLICA_CRASH_LOOPING,
    "image-not-found": REPLICA_IMAGE_NOT_FOUND,
    "create-failed": REPLICA_CREATE_FAILED,
}
_PROBLEM_ACTIONS: Mapping[str, str] = {
    "crash-looping": "read its log (better-compute workloads logs, endpoints logs) and fix its command,"
    " environment or image; its node restarts it with back-off",
    "image-not-found": "load the image on the node or make its registry reachable from it, or fix the"
    " image reference",
    "create-failed": "read the detail (what the container runtime said) and fix the node's runtime or"
    " the container's settings",
}


def replica_problems(items: Iterable[ReplicaProblem]) -> Iterator[Finding]:
    """One finding per container that does not run (one code per problem kind)."""
    for item in items:
        s = item.state
        if s.problem is None or item.owner is None:
            continue
        said = [f"{s.state}"]
        if s.exit_code is not None:
            said.append(f"exit code {s.exit_code}")
        if s.restarts:
            said.append(f"{s.restarts} restarts")
        detail = f": {s.detail}" if s.detail else ""
        yield Finding(
            _PROBLEM_CODES[s.problem],
            s.allocation_id,
            f"{item.owner}: the container of {s.allocation_id} on node {s.node_id} is {s.problem}"
            f" ({', '.join(said)}, reported {_when(s.updated_at)}){detail}",
            _PROBLEM_ACTIONS[s.problem],
        )


MAX_HOLDERS_NAMED = 5
"""The holding allocations one `capacity.mig.waiting` finding names (the latest to end first)."""


def mig_waiting_nodes(gates: Iterable[MigLayoutGate], now: datetime, after: timedelta) -> list[str]:
    """The nodes whose change `mig_waiting` must see the holders of: every change not yet scheduled
    (what holds it is not known without them) and every one scheduled more than `after` from its
    request; oldest request first."""
    found = [
        g
        for g in gates
        if g.state == "pending"
        or (
            g.state == "scheduled"
            and g.scheduled_from is not None
            and max(g.scheduled_from, now) - g.requested_at > after
        )
    ]
    return [g.node_id for g in sorted(found, key=lambda g: (g.requested_at, g.node_id))]


def mig_waiting(
    gates: Iterable[MigLayoutGate], holders: Iterable[GateHolder], now: datetime, after: timedelta
) -> Iterator[Finding]:
    """Layout changes not yet granted that wait more than `after` from their request: scheduled for
    later than that (the end of the node's last booking), or held by a booking that never ends, or
    not yet scheduled that long after it. Each names the bookings that hold it and when they end.
    The gate never ends a booking itself: an operator moves on by ending them."""
    by_node: dict[str, dict[str, GateHolder]] = {}
    for h in holders:
        mine = by_node.setdefault(h.node_id, {})
        kept = mine.get(h.allocation_id)
        if kept is None or _later(h.ends_at, kept.ends_at):
            mine[h.allocation_id] = h  # an allocation's latest end over its atoms
    for gate in gates:
        if gate.state not in ("pending", "scheduled"):
            continue
        held = sorted(
            by_node.get(gate.node_id, {}).values(),
            key=lambda h: (
                h.ends_at is not None,
                -(h.ends_at.timestamp() if h.ends_at else 0),
                h.allocation_id,
            ),
        )
        forever = any(h.ends_at is None for h in held)
        until: datetime | None
        if gate.state == "scheduled" and gate.scheduled_from is not None:
            until = gate.scheduled_from
        elif forever:
            until = None
        else:
            until = max((h.ends_at for h in held if h.ends_at is not None), default=now)
        if until is not None and max(until, now) - gate.requested_at <= after:
            continue
        when = (
            "for ever: a booking that holds the node never ends"
            if until is None
            else f"until {_when(until)} ({_days(until - gate.requested_at)} after its request)"
        )
        named = ", ".join(
            f"{h.allocation_id} (tenant {h.tenant_id}, "
            + ("never ends" if h.ends_at is None else f"ends {_when(h.ends_at)}")
            + ")"
            for h in held[:MAX_HOLDERS_NAMED]
        )
        more = f" and {len(held) - MAX_HOLDERS_NAMED} more" if len(held) > MAX_HOLDERS_NAMED else ""
        by = f"; held by {named}{more}" if held else "; no booking holds it now"
        yield Finding(
            MIG_WAITING,
            gate.node_id,
            f"pool {gate.pool_id}'s change of the node to {gate.pending_layout}, requested at"
            f" {_when(gate.requested_at)}, waits {when}, more than the {_days(after)} bound{by}",
            "the gate never ends a booking: cancel or release the holding reservations (better-compute"
            " reservations cancel|release ID; an admin token may), or end the workload replicas, and"
            " the change goes at the end of those left; book work that may run under a coming layout"
            " change as preemptible (docs/layouts.md#when-a-layout-change-waits)",
        )


def endpoints_waiting(
    endpoints: Iterable[EndpointFacts],
    gates: Iterable[MigLayoutGate],
    now: datetime,
    after: timedelta = ENDPOINT_WAITING_AFTER,
) -> Iterator[Finding]:
    """Endpoints waiting `after` or more: `Failed` since their creation (no idle nodes; retried as
    capacity frees), an instance cut that long ago whose node has not converged, or a live relayout
    held at a component's `minCopies` since it said so."""
    gated = {g.node_id: g for g in gates}
    for facts in endpoints:
        record = facts.record
        cutting = sorted(
            ((g.granted_at or g.requested_at, n) for n in facts.nodes if (g := gated.get(n)) is not None),
        )
        if record.status == "Failed":
            since, detail = record.created_at, f"Failed since {_when(record.created_at)}: {record.reason}"
            action = (
                "free what the reason names (bookings on the pool's nodes, a cordon, a layout change, too"
                " few nodes in the pool); it takes its nodes as soon as they are idle, or delete it:"
                f" better-compute endpoints delete {record.name}"
            )
        elif record.status in ("Creating", "Updating") and cutting:
            since, node = cutting[0]
            detail = (
                f"{record.status}: instance {node} has been cut since {_when(since)} and its node has not"
                " reported converging the layout, so the endpoint waits"
            )
            action = (
                f"check bcd on node {node} (running, reaching the server, converging: its logs) and whether"
                " a GPU waits for a reboot; the endpoint goes on once the node reports"
            )
        elif record.status == "Updating" and record.reason is not None:
            since, detail = (
                record.updated_at,
                f"Updating, held since {_when(record.updated_at)}: {record.reason}",
            )
            action = (
                "lower the component's minCopies, scale it down, or update the endpoint again:"
                f" better-compute endpoints update {record.name} ..."
            )
        else:
            continue
        if now - since < after:
            continue
        yield Finding(ENDPOINT_WAITING, record.name, f"{detail} ({_minutes(after)} or more)", action)


def _later(a: datetime | None, b: datetime | None) -> bool:
    """Whether end `a` is later than end `b` (None: never ends, the latest)."""
    if a is None:
        return b is not None
    return b is not None and a > b


def _days(value: timedelta) -> str:
    days = value.total_seconds() / 86400
    shown = f"{days:.0f}" if days >= 10 or days == int(days) else f"{days:.1f}"
    return f"{shown} day" + ("" if shown == "1" else "s")


def _when(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _span(booking: Booking) -> str:
    end = "open-ended" if booking.span.end is None else _when(booking.span.end)
    return f"{_when(booking.span.start)} to {end}"


def _minutes(value: timedelta) -> str:
    minutes = int(value.total_seconds() // 60)
    return f"{minutes} minute" + ("" if minutes == 1 else "s")
