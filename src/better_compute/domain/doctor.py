"""`better-compute doctor`: what in the fleet needs an operator, as findings (docs/operations.md#doctor).

Each rule is a pure function of what the fleet's records say at `now`, returning findings with a
code, the thing it is about (`subject`), what was found (`detail`) and what to do (`action`):

- `capacity.mig.stuck`: a node granted a new MIG layout 24 hours ago or more that has not converged
  it (its gate row is still `granted`). Its partition holds stay until it does (SPEC 6.1).
- `node.silent`: a joined node (it registered a key) with no report for the silence window, or
  none since it joined that long ago. Nodes that never joined (simulated in-process) do not report.
- `gpu.unhealthy`: a present GPU its node reports unhealthy.
- `node.reboot-required`: a node whose last inventory said a GPU waits for a reboot.
- `pool.fractional-without-quota`: a mig pool with no `gpu.mig` quota row, or a timeslice or mps
  pool with no `gpu.slot` row, above 0, for any tenant: every fractional request is QUOTA_EXCEEDED.
- `ledger.overlap`: two live bookings of one atom overlap in time, or two of one GPU's atoms that
  exclude each other (the GPU and a part of it): the ledger's fences failed.
- `ledger.stranded`: a tenant's live booking, now or later, of an atom it cannot have: one gone from
  its node, not bookable (a GPU split since into parts, one not at its layout, one unhealthy), or
  in another pool than the booking's; one finding per reservation (or workload replica), naming it.
- `ledger.orphan-partition`: a live partition change of a GPU whose node has no gate row: nothing
  will release it.
- `workload.terminating-stuck`: a workload's replica terminating for 24 hours or more: its node has
  not released it, so its devices stay booked (docs/placement.md#terminating-replicas).

Findings sort by (code, subject, detail), so two runs over the same fleet print the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from better_compute.domain.atoms import Atom
from better_compute.domain.bindings import stranded_reason
from better_compute.domain.ledger import Booking
from better_compute.domain.records import Gpu, MigLayoutGate, Node, Pool, Quota
from better_compute.domain.workloads import Terminating, is_replica

STUCK_AFTER = timedelta(hours=24)
"""How long after its grant a node that has not converged its new layout is reported stuck."""

DEFAULT_SILENT_MINUTES = 10
MAX_SILENT_MINUTES = 10080
"""`silentMinutes`: the silence window of `node.silent`, 1 minute to a week (default 10)."""

MIG_STUCK = "capacity.mig.stuck"
NODE_SILENT = "node.silent"
GPU_UNHEALTHY = "gpu.unhealthy"
NODE_REBOOT_REQUIRED = "node.reboot-required"
POOL_FRACTIONAL_WITHOUT_QUOTA = "pool.fractional-without-quota"
LEDGER_OVERLAP = "ledger.overlap"
LEDGER_ORPHAN_PARTITION = "ledger.orphan-partition"
LEDGER_STRANDED = "ledger.stranded"
WORKLOAD_TERMINATING_STUCK = "workload.terminating-stuck"

CODES: tuple[str, ...] = (
    MIG_STUCK,
    GPU_UNHEALTHY,
    LEDGER_ORPHAN_PARTITION,
    LEDGER_OVERLAP,
    LEDGER_STRANDED,
    NODE_REBOOT_REQUIRED,
    NODE_SILENT,
    POOL_FRACTIONAL_WITHOUT_QUOTA,
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


def diagnose(facts: FleetFacts, now: datetime, silent_after: timedelta) -> list[Finding]:
    """Every finding about the fleet at `now`, sorted by (code, subject, detail)."""
    findings = [
        *mig_stuck(facts.gates, {n.id: n for n in facts.nodes}, now),
        *silent_nodes(facts.nodes, now, silent_after),
        *unhealthy_gpus(facts.gpus),
        *reboot_required(facts.nodes),
        *fractional_without_quota(facts.pools, facts.quotas),
        *ledger_overlaps(facts.overlaps),
        *family_overlaps(facts.family_overlaps),
        *stranded_bookings(facts.stranded, facts.gpus),
        *orphan_partitions(facts.partition_holds, facts.gpus, facts.gates),
        *terminating_stuck(facts.terminating, now),
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
    """Joined nodes whose last sign of life (a report, or joining) is `silent_after` or more ago."""
    for node in nodes:
        if node.public_key is None:
            continue  # never joined: simulated in-process, or not yet set up; it does not report
        reported, joined = node.last_report_at, node.joined_at
        last: datetime | None
        if reported is not None and (joined is None or reported >= joined):
            last, detail = reported, f"no report since {_when(reported)}"
        else:
            last = joined
            detail = "no report since it joined" + ("" if joined is None else f" at {_when(joined)}")
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
    have (`domain.bindings.stranded_why`), one finding each, naming it and why."""
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
    """Live partition changes of GPUs whose node has no gate row: a hold nothing will release."""
    node_of = {g.id: g.node_id for g in gpus}
    gated = {g.node_id for g in gates}
    by_allocation: dict[str, list[Booking]] = {}
    for booking in holds:
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
            "make sure no layout change of the GPU's pool is under way, then end the partition"
            " change's bookings (no API call releases one yet: docs/operations.md#doctor); the GPU"
            " takes no work until then",
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


def _when(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _span(booking: Booking) -> str:
    end = "open-ended" if booking.span.end is None else _when(booking.span.end)
    return f"{_when(booking.span.start)} to {end}"


def _minutes(value: timedelta) -> str:
    minutes = int(value.total_seconds() // 60)
    return f"{minutes} minute" + ("" if minutes == 1 else "s")
