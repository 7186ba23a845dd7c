"""The Slurm follower: one pass over one Slurm cluster makes the ledger mirror what Slurm runs, and
Slurm hold what the ledger books (ADR 0015; the decisions are `domain.fleet.slurm_holds`'s).

A pass reads Slurm's jobs first and the ledger second. A holding job is submitted only for an
allocation already committed, so every job of ours the pass reads has an allocation that the ledger
read after it can see; a job whose allocation it does not see live is one whose allocation is over
(released, cancelled, ended), and it is cancelled. Nothing about a job is needed before it is
submitted or after: a server that dies between `sbatch` and writing down the job id loses nothing,
since the job's name carries the allocation id and the next pass adopts it instead of submitting
another.

Then, in this order: the jobs to cancel are cancelled; each ledger change is its own transaction
(an allocation whose job ended ends now; an external hold whose job ended ends; bookings move onto
the atoms Slurm gave; jobs submitted directly are booked); holding jobs are submitted for
allocations that have none; last, what was read and submitted is mirrored (`slurm_jobs`). A change
the ledger refuses (an atom taken meanwhile) is left for the next pass, which decides again from
what is then true. One follower follows a cluster at a time, under a lease (`slurm_followers`); should
two still overlap (a pass outliving its lease), every follower keeps the same copy of a holding job
(the oldest alive), so they cancel the same second copies, and the ledger's constraints fence every
booking either writes.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from better_compute.domain.fleet.cluster_kinds import EXTERNAL_TENANT
from better_compute.domain.fleet.records import Cluster
from better_compute.domain.fleet.slurm import FINISHED_STATES, SlurmOutputUnreadable
from better_compute.domain.fleet.slurm_gres import GresSlot, gres_slots
from better_compute.domain.fleet.slurm_holds import Held, HoldPlan, Mirror, hold_job_name, plan_holds
from better_compute.domain.kernel.errors import DomainError, Unavailable
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.events import LedgerRebound, LedgerReleased
from better_compute.service.fleet.slurm import HoldRequest, SlurmControl, SlurmRefused, SlurmUnreachable
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ledger.ports import LedgerTx, NotBookable, Overlap
from better_compute.service.ledger.reservations import end_in

_log = logging.getLogger("better_compute.slurm")


SlurmHoldsTx = LedgerTx
"""What a pass uses of a transaction: the ledger's slice (which holds `slurm_jobs`)."""


class JobCommands(Protocol):
    """What the job of an allocation runs in place of a holding job's wait: a workload replica's
    container (service.placement.slurm_replicas.ReplicaCommands; docs/slurm.md#replicas-as-jobs)."""

    def commands(self, allocation_ids: Sequence[str]) -> Mapping[str, str]:
        """The shell line each of `allocation_ids` that is a workload replica runs as its job (an
        ended job of one is followed by a new one); other allocations (reservations) are left out."""
        ...


class NoCommands:
    """Every allocation only holds (a follower wired without workloads)."""

    def commands(self, allocation_ids: Sequence[str]) -> Mapping[str, str]:
        return {}


RERUN_AFTER = timedelta(seconds=10)
"""How long a replica's ended job is shown (its state and Slurm's reason) before the follower submits
the replica's next one: a container that keeps failing is started again at most this often."""


@dataclass
class PassReport:
    """What one pass did, by kind, and what it could not do (for the log and the tests)."""

    cluster_id: str
    submitted: list[tuple[str, int]] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    rebound: list[str] = field(default_factory=list)
    booked_external: list[str] = field(default_factory=list)
    ended_external: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _read(
    tx: SlurmHoldsTx, cluster: Cluster, now: datetime, problems: list[str]
) -> tuple[dict[str, Sequence[GresSlot]], list[Held], set[str]]:
    """The cluster's nodes' GRES slots, the live bookings on their atoms by allocation and node, and
    the nodes whose GRES lines cannot be computed now (their jobs are left alone this pass)."""
    nodes = [n.id for n in tx.nodes.page(cluster.id, None, None)]
    gpus = tx.gpus.of_nodes(nodes)
    atoms = tx.atoms.of_nodes(nodes)
    slots: dict[str, Sequence[GresSlot]] = {}
    for node in nodes:
        try:
            slots[node] = gres_slots(
                node, [g for g in gpus if g.node_id == node], [a for a in atoms if a.node == node]
            )
        except DomainError as refused:
            problems.append(refused.message)
    node_of = {a.id: a.node for a in atoms if a.node in slots}
    grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
    windows: dict[tuple[str, str], tuple[str | None, datetime, datetime | None]] = {}
    for b in tx.ledger.live_on(sorted(node_of), now):
        key = (b.allocation_id, node_of[b.atom_id])
        grouped[key].append(b.atom_id)
        windows[key] = (b.tenant_id, b.starts_at, b.ends_at)
    held = [
        Held(allocation, node, tuple(atom_ids), *windows[(allocation, node)])
        for (allocation, node), atom_ids in sorted(grouped.items())
    ]
    return slots, held, set(nodes) - set(slots)


def plan_for(
    store: StorePort[SlurmHoldsTx],
    cluster: Cluster,
    slurm: SlurmControl,
    now: datetime,
    report: PassReport,
    replicas: frozenset[str] = frozenset(),
    rerun: frozenset[str] = frozenset(),
) -> HoldPlan:
    settings = cluster.slurm
    assert settings is not None
    # First (the module's note on the restart race), and every partition's: a job submitted directly
    # to another partition that shares a node of ours holds its cards as well.
    jobs = slurm.jobs()
    with store.read() as tx:
        slots, held, unread = _read(tx, cluster, now, report.problems)
    return plan_holds(
        cluster_id=cluster.id,
        account=settings.account,
        tenant_of=dict(settings.accounts),
        external_tenant=EXTERNAL_TENANT,
        slots=slots,
        held=held,
        jobs=jobs,
        now=now,
        unread=unread,
        replicas=replicas,
        rerun=rerun,
    )


def _atoms_on(tx: SlurmHoldsTx, nodes: Sequence[str]) -> list[str]:
    return sorted(a.id for a in tx.atoms.of_nodes(nodes))


def _end_ours(tx: SlurmHoldsTx, allocation_id: str, now: datetime) -> bool:
    """End an allocation of ours now: a reservation as its tenant's release (or cancel) would, any
    other allocation in the ledger alone."""
    if tx.reservations.get(allocation_id) is not None:
        return end_in(tx, allocation_id, now)
    return tx.ledger.end_allocation(allocation_id, now, LedgerReleased(allocation_id, now)) > 0


def follow(
    store: StorePort[SlurmHoldsTx],
    cluster: Cluster,
    slurm: SlurmControl,
    now: datetime,
    commands: JobCommands | None = None,
) -> PassReport:
    """One pass over one Slurm cluster (the module says in what order, and why). `commands`: what the
    job of an allocation runs instead of waiting (a replica's container); such an allocation whose
    job ended gets a new job rather than its end."""
    settings = cluster.slurm
    if settings is None:
        raise ValueError(f"cluster {cluster.id} is not a Slurm cluster")
    report = PassReport(cluster.id)
    runs: Mapping[str, str] = {}
    rerun: frozenset[str] = frozenset()
    if commands is not None:
        with store.read() as tx:
            nodes = [n.id for n in tx.nodes.page(cluster.id, None, None)]
            allocations = sorted({b.allocation_id for b in tx.ledger.live_on(_atoms_on(tx, nodes), now)})
        runs = commands.commands(allocations) if allocations else {}
        if runs:
            with store.read() as tx:
                shown = tx.slurm_jobs.of_allocations(sorted(runs))
            rerun = frozenset(
                a
                for a, mirrored in shown.items()
                if any(
                    m.state in FINISHED_STATES and m.since and now - m.since >= RERUN_AFTER for m in mirrored
                )
            )
    plan = plan_for(store, cluster, slurm, now, report, frozenset(runs), rerun)
    report.problems.extend(plan.unplaced)
    for job_id, why in plan.cancel:
        try:
            slurm.cancel(job_id)
            report.cancelled.append(job_id)
        except (SlurmRefused, SlurmUnreachable) as exc:
            report.problems.append(f"scancel {job_id} ({why}): {exc}")
    for allocation_id, why in plan.end:
        with store.begin() as tx:
            if _end_ours(tx, allocation_id, now):
                report.ended.append(allocation_id)
                _log.info("ended %s: %s", allocation_id, why)
    for allocation_id in plan.end_external:
        with store.begin() as tx:
            if tx.ledger.end_allocation(allocation_id, now, LedgerReleased(allocation_id, now)):
                report.ended_external.append(allocation_id)
    gpu_of: dict[str, str] = {}
    if plan.rebind:
        with store.read() as tx:
            nodes = sorted({r.node for r in plan.rebind})
            gpu_of = {a.id: a.gpu_id for a in tx.atoms.of_nodes(nodes)}
    if plan.rebind:
        # One transaction for every move: two bookings of ours may swap cards.
        moves = [(r.allocation_id, source, target) for r in plan.rebind for source, target in r.moves]
        events = [
            LedgerRebound(r.allocation_id, tuple((s, t, gpu_of.get(t, "")) for s, t in r.moves), now)
            for r in plan.rebind
        ]
        try:
            with store.begin() as tx:
                tx.ledger.rebind(moves, now, events)
            report.rebound.extend(r.allocation_id for r in plan.rebind)
        except (Overlap, NotBookable) as refused:
            report.problems.append(f"bookings could not move onto Slurm's cards: {refused!r}")
    for hold in plan.book_external:
        try:
            with store.begin() as tx:
                tx.ledger.book(
                    hold.atom_ids, Window(hold.start, hold.end), hold.allocation_id, hold.tenant_id, now
                )
            report.booked_external.append(hold.allocation_id)
        except (Overlap, NotBookable) as refused:
            report.problems.append(f"job {hold.job_id} could not be booked: {refused!r}")
    mirrors = list(plan.mirror)
    for submit in plan.submit:
        request = HoldRequest(
            name=hold_job_name(submit.allocation_id),
            account=settings.account,
            partition=settings.partitions[0],
            node=submit.node,
            gres=submit.gres,
            begin_seconds=submit.begin_seconds,
            time_limit_seconds=submit.time_limit_seconds,
            command=runs.get(submit.allocation_id, HoldRequest.command),
        )
        try:
            job_id = slurm.submit_hold(request)
        except (SlurmRefused, SlurmUnreachable, ValueError) as exc:
            report.problems.append(f"sbatch for {submit.allocation_id}: {exc}")
            continue
        report.submitted.append((submit.allocation_id, job_id))
        # Shown as Slurm shows a job no scheduling pass has looked at yet.
        # It replaces the ended job a replica's new one follows.
        mirrors = [m for m in mirrors if (m.allocation_id, m.node) != (submit.allocation_id, submit.node)]
        mirrors.append(Mirror(submit.allocation_id, submit.node, job_id, "PENDING", "None", external=False))
    with store.begin() as tx:
        tx.slurm_jobs.put(cluster.id, mirrors, now)
    return report


INTERVAL = 2.0
"""Seconds between passes over the Slurm clusters: how soon a job Slurm starts or ends is mirrored."""


LEASE = timedelta(seconds=60)
"""How long a follower holds a Slurm cluster after its last pass began: another reconciler takes the
cluster over this long after the holder died. Longer than a pass with Slurm's commands timing out."""


class SlurmFollower:
    """Passes over every Slurm cluster until stopped, in the reconciler process beside the MIG gate
    (`better-compute reconcile`). `control_for` gives the `SlurmControl` of a cluster (the entry point
    wires the commands adapter with the cluster's `SLURM_CONF`).

    With an `owner`, a cluster is followed only under its lease (`slurm_followers`), so of any number
    of reconcilers one follows each cluster at a time; without, every pass follows every cluster."""

    def __init__(
        self,
        store: StorePort[SlurmHoldsTx],
        clock: Callable[[], datetime],
        control_for: Callable[[Cluster], SlurmControl],
        commands: JobCommands | None = None,
        *,
        owner: str | None = None,
        lease: timedelta = LEASE,
    ) -> None:
        self.store = store
        self.clock = clock
        self.control_for = control_for
        self.commands = commands
        self.owner = owner
        self.lease = lease

    def _leased(self, cluster_id: str) -> bool:
        if self.owner is None:
            return True
        now = self.clock()
        with self.store.begin() as tx:
            return tx.slurm_jobs.lease(cluster_id, self.owner, now, now + self.lease)

    def tick(self) -> list[PassReport]:
        """One pass over each Slurm cluster; one that does not answer, or whose pass fails, is tried
        again next pass, and the others are followed all the same."""
        with self.store.read() as tx:
            found = [c for c in tx.clusters.all() if c.slurm is not None]
        reports = []
        for cluster in found:
            if not self._leased(cluster.id):
                continue
            try:
                report = follow(self.store, cluster, self.control_for(cluster), self.clock(), self.commands)
            except (SlurmUnreachable, SlurmRefused, SlurmOutputUnreadable) as exc:
                _log.warning("Slurm cluster %s: %s", cluster.id, exc)
                continue
            except Unavailable:
                raise
            except Exception:  # a fault of ours on this cluster: logged; the others go on
                _log.exception("Slurm follower pass over cluster %s failed", cluster.id)
                continue
            for problem in report.problems:
                _log.warning("Slurm cluster %s: %s", cluster.id, problem)
            reports.append(report)
        return reports

    def run(self, stopping: threading.Event, interval: float = INTERVAL) -> None:
        while not stopping.is_set():
            try:
                self.tick()
            except Unavailable:  # the store logs outages; the next pass tries again
                pass
            except Exception:  # a fault of ours: logged, and the next pass tries again
                _log.exception("Slurm follower pass failed")
            stopping.wait(interval)


__all__ = [
    "INTERVAL",
    "LEASE",
    "JobCommands",
    "NoCommands",
    "PassReport",
    "SlurmFollower",
    "SlurmHoldsTx",
    "follow",
    "plan_for",
]
