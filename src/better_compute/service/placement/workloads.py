"""Workloads: create, get, list, scale, delete, drain, and the retry of what could not be placed
(docs/placement.md; rules in `domain.placement.workloads` and `domain.placement`).

Every write follows snapshot -> pure decision -> commit in one transaction, under the tenant's
workload lock (an advisory lock on PostgreSQL; SQLite has one writer), so the quota counted is the
quota held: two writes of one tenant never both count the same headroom. Writes of different
tenants go ahead in parallel; an atom two of them choose at once is settled by the ledger's
exclusion constraint, and the loser decides again on a caught-up index.

`place_in` is the one routine under create, scale, drain and retry: it plans over what the workload
has booked per cluster, removes replicas a smaller share no longer holds, books new replicas, and
writes each deployment's share, phase and reason. A replica taken away (a scale down, a drain, a
delete) ends at once unless its node has handed it over; then it terminates: its devices stay
booked, and count as allocated, until the node reports the allocation released (`_take_away`).
Replica indexes, and so allocation ids, are never used twice in a deployment, so what a node
reports of an allocation is always about one replica.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Generic, TypeVar

from better_compute.domain.fleet.bindings import BindingState, binding_of
from better_compute.domain.fleet.replica_states import ReplicaState, is_ready, live_nodes
from better_compute.domain.fleet.slurm_holds import Mirror
from better_compute.domain.kernel.errors import (
    AlreadyExists,
    BookingConflict,
    ConcurrentChange,
    GenerationMismatch,
    InvalidInput,
    NotFound,
    NowhereToGo,
)
from better_compute.domain.kernel.events import Event
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.events import LedgerReleased
from better_compute.domain.placement.binpack import choose_replicas
from better_compute.domain.placement.capability import Resolution
from better_compute.domain.placement.commands import PlaceWorkload, place_workload_of
from better_compute.domain.placement.events import (
    MAX_REFUSED,
    DeploymentUpdated,
    ReplicasTerminating,
    WorkloadCreated,
    WorkloadDecided,
    WorkloadDeleted,
    WorkloadDrained,
    WorkloadPreempted,
    WorkloadScaled,
)
from better_compute.domain.placement.fairness import admission_order
from better_compute.domain.placement.preemption import Victim
from better_compute.domain.placement.priority_classes import STANDARD
from better_compute.domain.placement.records import Operation
from better_compute.domain.placement.slurm_replicas import SlurmReplicaPhase, deployment_phase, replica_phase
from better_compute.domain.placement.topology import FreeDevice
from better_compute.domain.placement.verdicts import Placement, Reason, Verdict
from better_compute.domain.placement.workloads import (
    Containers,
    Deployment,
    Phase,
    Terminating,
    Workload,
    WorkloadSpec,
    check_floors,
    check_replicas,
    containers_of,
    hands_over,
    phase_of,
    placement_policy_name,
    problems_of,
    replica_allocation_id,
    replica_state,
    workload_not_found,
    workload_spec,
)
from better_compute.domain.tenancy.credentials import Principal, require_admin
from better_compute.domain.tenancy.events import PolicyDeleted
from better_compute.domain.tenancy.iam import Policy, parse_policy
from better_compute.domain.tenancy.tenancy import check_ref, tenant_not_found, tenant_scope
from better_compute.service.kernel.ids import Ids
from better_compute.service.kernel.paging import Listing, page
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.ledger.ports import NotBookable, Overlap
from better_compute.service.placement import capabilities, placement, preemption
from better_compute.service.placement.placement_stock import Stock
from better_compute.service.placement.ports import PlacementTx
from better_compute.service.tenancy import policies
from better_compute.service.tenancy.quotas import quota_lock

MAX_ATTEMPTS = 4
DRAIN = "workload.drain"
RELEASE_REPLICA = "replica.release"
OPERATION_TYPES = (DRAIN, RELEASE_REPLICA)
DRAINED = "cluster {cluster} was drained of this workload (workload.drain)"
CREATE, SCALE, RETRY = "create", "scale", "retry"
"""What set a placement off (`workload.decided`'s `trigger`; a drain's is `workload.drain`)."""


def workload_lock(tenant_id: str) -> str:
    """The lock a tenant's workload writes are serialised on (quota is counted under it)."""
    return f"workloads:{tenant_id}"


@dataclass(frozen=True)
class DeploymentView:
    deployment: Deployment
    booked: int
    bound: int
    phase: Phase
    terminating: int = 0
    """Its replicas taken away whose node has not released them yet."""
    ready: int = 0
    """Replicas whose container its node reports ready (a workload with a container)."""
    problems: tuple[ReplicaState, ...] = ()
    """Replicas whose container does not run, and why (the first `MAX_PROBLEMS`)."""
    runs_containers: bool = False
    """Whether its workload's shape has a container (its nodes start one per replica)."""

    @property
    def running(self) -> int:
        """Replicas running: ready ones for a workload with a container, else bound ones."""
        return self.ready if self.runs_containers else self.bound


@dataclass(frozen=True)
class WorkloadView:
    workload: Workload
    deployments: list[DeploymentView]
    placement: Placement | None = None
    """The placement just made (create, scale, drain), with a verdict per cluster; None on reads."""
    terminating: int = 0
    """Replicas taken away, in any cluster, whose node has not released them yet."""
    resolution: Resolution | None = None
    """What a shape asked by capability resolved to (a create's answer only)."""

    @property
    def id(self) -> str:
        return self.workload.id

    @property
    def booked(self) -> int:
        return sum(d.booked for d in self.deployments)

    @property
    def waiting(self) -> bool:
        """Short of its replicas: some no cluster took, or a deployment `pending` or `admitted`
        (what the retrier places again)."""
        waiting = ("pending", "admitted")
        return self.workload.unplaced > 0 or any(
            d.phase in waiting and d.deployment.phase in waiting for d in self.deployments
        )


TxT_co = TypeVar("TxT_co", bound=PlacementTx, covariant=True)


@dataclass(frozen=True)
class Wiring(Generic[TxT_co]):
    """What the use cases share with reservations: the store, the index, the stock, ids. Its store
    offers at least placement's slice; the retrier's offers every context's (it retries endpoints
    too)."""

    store: StorePort[TxT_co]
    index: BookingIndex
    stock: Stock
    ids: Ids


@dataclass
class Attempt:
    """One try of a write (`_attempts`): whether it settles, and the atoms it claimed, released by
    `_attempts` once its transaction has ended (`BookingIndex.release`)."""

    settle: bool = False
    claims: list[str] = field(default_factory=list)


def _terminating(tx: PlacementTx, workload_ids: Sequence[str]) -> Counter[str]:
    """Terminating replicas per deployment and per workload (ids of both kinds in one counter)."""
    counts: Counter[str] = Counter()
    for t in tx.workloads.terminating_of(workload_ids):
        counts[t.deployment_id] += 1
        counts[t.workload_id] += 1
    return counts


def _live(tx: PlacementTx, states: Mapping[str, Sequence[ReplicaState]], now: datetime) -> frozenset[str]:
    """The nodes that said something of these replicas and are live at `now` (`live_nodes`): one
    read of their last contacts."""
    nodes = sorted({s.node_id for said in states.values() for s in said})
    return live_nodes(tx.nodes.contacts(nodes), now) if nodes else frozenset()


def _views(tx: PlacementTx, workloads: list[Workload], now: datetime) -> dict[str, WorkloadView]:
    deps = tx.workloads.deployments_of([w.id for w in workloads])
    flat = [d for ds in deps.values() for d in ds]
    reps = tx.workloads.replicas_of([d.id for d in flat])
    allocations = [a for rs in reps.values() for _, a in rs]
    bindings = tx.bindings.of_allocations(allocations) if allocations else {}
    runs = [
        a
        for w in workloads
        if w.spec.container is not None
        for d in deps.get(w.id, [])
        for _, a in reps.get(d.id, [])
    ]
    states = tx.replica_states.of_allocations(runs) if runs else {}
    live = _live(tx, states, now)
    ending = _terminating(tx, [w.id for w in workloads])
    slurm = {c.id for c in tx.clusters.all() if c.slurm is not None} if flat else set()
    on_slurm = [a for d in flat if d.cluster_id in slurm for _, a in reps.get(d.id, [])]
    jobs = tx.slurm_jobs.of_allocations(on_slurm) if on_slurm else {}
    out: dict[str, WorkloadView] = {}
    for w in workloads:
        views = []
        for d in deps.get(w.id, []):
            mine = [a for _, a in reps.get(d.id, [])]
            view = _deployment_view(w, d, len(mine), mine, bindings, states, live, ending)
            if d.cluster_id in slurm:
                view = _on_slurm(view, w, mine, jobs, states, live)
            views.append(view)
        out[w.id] = WorkloadView(w, views, terminating=ending[w.id])
    return out


def _on_slurm(
    view: DeploymentView,
    w: Workload,
    replicas: Sequence[str],
    jobs: Mapping[str, Sequence[Mirror]],
    states: Mapping[str, Sequence[ReplicaState]],
    live: Set[str],
) -> DeploymentView:
    """A deployment in a Slurm cluster, whose replicas run as Slurm jobs: its phase and message from
    their jobs' states (`slurm_replicas.deployment_phase`; docs/slurm.md#replicas-as-jobs), a
    replica's job running counting as running once its node reports its container ready (the
    `bcd` watching the container the job runs), and at once for a workload without a container. A deployment
    placement could not book keeps what placement said."""
    if not replicas:
        return view
    phases: list[SlurmReplicaPhase | None] = []
    for a in replicas:
        job = jobs.get(a, [])
        if not job:
            phases.append(None)
            continue
        # Its container runs as the job's command, not under bcd; bcd on the node watches it and
        # reports its readiness, read by the one rule (`is_ready`): not ready until its live node
        # says so. A replica without a container runs nothing to be ready: its job's running is its.
        ready = None if w.spec.container is None else is_ready(replica_state(states.get(a, ())), live)
        try:
            phases.append(replica_phase(job[0].job_id, job[0].state, job[0].reason, ready=ready))
        except ValueError:  # a state this Slurm's squeue(1) does not list: nothing known of it
            phases.append(None)
    phase, message = deployment_phase(view.deployment.desired_replicas, phases)
    shown = replace(view.deployment, message=message) if message else view.deployment
    return replace(view, deployment=shown, phase=phase)


def _deployment_view(
    w: Workload,
    d: Deployment,
    booked: int,
    earlier: Sequence[str],
    bindings: Mapping[str, Mapping[str, BindingState]],
    states: Mapping[str, Sequence[ReplicaState]],
    live: Set[str],
    ending: Counter[str],
) -> DeploymentView:
    """A deployment as shown: its `booked` replicas (`earlier`: those that can be bound or run yet)
    counted by what their nodes reported, and its phase from them (`phase_of`); a replica is ready
    only while its node is `live` (`replica_states.is_ready`)."""
    bound = sum(1 for a in earlier if binding_of(bindings.get(a, {}), ()) == "bound")
    if w.spec.container is None:
        return DeploymentView(d, booked, bound, _shown_phase(d, booked, bound, None), ending[d.id])
    containers = containers_of(earlier, states, live)
    return DeploymentView(
        d,
        booked,
        bound,
        _shown_phase(d, booked, bound, containers),
        ending[d.id],
        ready=containers.ready,
        problems=tuple(problems_of(earlier, states)),
        runs_containers=True,
    )


def _shown_phase(d: Deployment, booked: int, bound: int, containers: Containers | None) -> Phase:
    """The phase shown: the stored one (what placement decided on booking) brought up to date with
    what the nodes reported (`phase_of`): bound replicas, or with a container, created and ready ones."""
    if containers is None:
        return "running" if bound > 0 else d.phase
    if d.phase == "placed":
        return phase_of(d.desired_replicas, booked, bound, False, containers)
    return "running" if containers.ready > 0 else d.phase


def _view(tx: PlacementTx, w: Workload, now: datetime) -> WorkloadView:
    return _views(tx, [w], now)[w.id]


def _visible(tx: PlacementTx, principal: Principal, ref: str) -> Workload:
    """The workload `ref` names: its id, or else its name among the workloads the principal may
    see (names are unique per project; an admin's name matching several projects' is refused)."""
    found = tx.workloads.get(check_ref(ref, "workloadId"))
    if found is not None and principal.acts_for(found.tenant_id):
        return found
    named = [w for w in tx.workloads.named(ref, principal.tenant_id, 2) if principal.acts_for(w.tenant_id)]
    if len(named) > 1:
        raise InvalidInput(
            f"more than one project has a workload named {ref}; give the workload's id",
            {"field": "workloadId", "name": ref},
        )
    if not named:
        raise workload_not_found(ref)
    return named[0]


def _lock_and_catch_up(tx: PlacementTx, wiring: Wiring[PlacementTx], tenant_id: str, now: datetime) -> None:
    """Take the tenant's workload lock, then catch the index up with every commit made before it
    was granted: what the tenant holds is then exact for this write (one round trip with the
    transaction's BEGIN when it is the transaction's first statement). Bookings ended well before
    `now` are forgotten first (`BookingIndex.forget_ended`)."""
    wiring.index.forget_ended(now)
    read = wiring.index.prepare(tx)
    events, newest, snapshot = tx.reservations.locked_tail(workload_lock(tenant_id), read)
    wiring.index.apply(tx, read, events, newest, snapshot)


def _tenant_for(principal: Principal, named: str | None) -> str:
    tenant_id = tenant_scope(principal, named)
    if tenant_id is None:
        raise InvalidInput("project (tenantId) is required with an admin credential", {"field": "project"})
    return tenant_id


def _attempts(
    wiring: Wiring[PlacementTx], run: Callable[[PlacementTx, Attempt], WorkloadView]
) -> WorkloadView:
    """Run a write, deciding again on a caught-up index when the ledger refused an atom. Losing an
    atom to another tenant's write is the common case when many place at once (each picks the same
    best devices), so the index only catches up with the log; it is rebuilt from the ledger (under
    its lock, costly on a large fleet) only when, caught up, it still knows no booking of the atom
    lost. The last attempt settles (`Attempt.settle`): a replica whose atoms are taken even then is
    left unbooked, for the retrier, rather than the whole write refused, since other processes
    booking the same best atoms can outrun any number of attempts. The atoms an attempt claimed
    are released once its transaction has ended, committed or not (`BookingIndex.release`)."""
    for n in range(MAX_ATTEMPTS):
        attempt = Attempt(settle=n == MAX_ATTEMPTS - 1)
        committed = False
        try:
            with wiring.store.begin() as tx:
                view = run(tx, attempt)
            committed = True
            return view
        except Overlap as clash:
            if attempt.settle:
                raise BookingConflict(clash.atom_id or "unknown", None) from None
            with wiring.store.read() as tx:
                wiring.index.sync(tx)
                if clash.atom_id is not None and not wiring.index.knows_booking_of(clash.atom_id):
                    # caught up, and still no booking of the atom it lost: rebuild from the ledger
                    wiring.index.reload(tx)
        except NotBookable:
            if attempt.settle:
                raise ConcurrentChange(
                    "the fleet's atoms kept changing while this workload was placed; retry"
                ) from None
            with wiring.store.read() as tx:
                wiring.index.reload(tx)
        finally:
            wiring.index.release(attempt.claims, committed)
    raise AssertionError("unreachable")


def create(
    wiring: Wiring[PlacementTx],
    principal: Principal,
    request: PlaceWorkload | Mapping[str, Any],
    now: datetime,
) -> WorkloadView:
    """`workloads.create`: check, place, book; the workload is created even when no cluster can
    take a replica now (its deployments, if any, wait as `pending`, and it is retried).

    `request` is the command the API builds, or the request as JSON (`place_workload_of` reads it,
    once the project is known: a caller who may not name it is told so first)."""
    named = request.tenant_id if isinstance(request, PlaceWorkload) else request.get("tenantId")
    tenant_id = _tenant_for(principal, None if named is None else check_ref(named, "project"))
    asked = workload_spec(
        request if isinstance(request, PlaceWorkload) else place_workload_of(request), tenant_id
    )
    workload_id = wiring.ids.workload()

    def run(tx: PlacementTx, attempt: Attempt) -> WorkloadView:
        _lock_and_catch_up(tx, wiring, tenant_id, now)
        if not wiring.stock.tenant_exists(tx, wiring.index, tenant_id):
            raise tenant_not_found(tenant_id)
        spec, resolution = placement.resolved(
            tx,
            wiring.index,
            wiring.stock,
            asked,
            now,
            workload_id=workload_id,
            workload_policies=_own(asked, workload_id),
        )
        if resolution is not None and resolution.chosen is None:
            raise capabilities.nothing_gives(resolution)
        _check_refs(tx, wiring, spec)
        workload = Workload(workload_id, spec, 1, now)
        created = WorkloadCreated(
            workload_id,
            tenant_id,
            spec.name,
            spec.device_class,
            spec.device_count,
            spec.replicas,
            spec.priority_class,
        )
        # Names are unique per project (a unique key): under the project's lock, a refused insert
        # is a name taken, never a race.
        if not tx.workloads.create(workload, created, now):
            raise AlreadyExists(
                f"project {tenant_id} already has a workload named {spec.name}",
                {"tenantId": tenant_id, "name": spec.name},
            )
        own: tuple[Policy, ...] = ()
        if spec.allowed_regions or spec.allowed_clusters:
            workload, made = _with_own_policy(tx, wiring, workload, now)
            own = (made,)
        view = place_in(
            tx, wiring, workload, now, fresh=True, attempt=attempt, own_policies=own, trigger=CREATE
        )
        return replace(view, resolution=resolution)

    return _attempts(wiring, run)


def _own_raw(spec: WorkloadSpec, workload_id: str) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": placement_policy_name(spec.name),
        "tenantId": spec.tenant_id,
        "subjectType": "workload",
        "subjectId": workload_id,
    }
    if spec.allowed_regions:
        raw["allowedRegions"] = list(spec.allowed_regions)
    if spec.allowed_clusters:
        raw["allowedClusters"] = list(spec.allowed_clusters)
    return raw


def _own(spec: WorkloadSpec, workload_id: str) -> tuple[Policy, ...]:
    """The policy a new workload's `allowedRegions`/`allowedClusters` will become, not stored yet
    (what a capability's resolution plans with)."""
    if not (spec.allowed_regions or spec.allowed_clusters):
        return ()
    return (parse_policy(_own_raw(spec, workload_id)),)


def _with_own_policy(
    tx: PlacementTx, wiring: Wiring[PlacementTx], workload: Workload, now: datetime
) -> tuple[Workload, Policy]:
    """The `<name>-placement` policy a workload's `allowedRegions`/`allowedClusters` become: a real
    policy on the workload, made in the workload's transaction (seed 001 "Attaching policies")."""
    raw = _own_raw(workload.spec, workload.id)
    made = policies.create_in(tx, parse_policy(raw), policy_id=wiring.ids.policy(), now=now)
    own = replace(workload, policy_id=made.id, generation=workload.generation + 1)
    if not tx.workloads.update(own, workload.generation):
        raise ConcurrentChange(f"workload {workload.id} changed while it was created; retry")
    return own, made


def preview(
    wiring: Wiring[PlacementTx], principal: Principal, spec: WorkloadSpec, now: datetime
) -> placement.Preview:
    """`placement.preview` of a shape not created yet: the clusters it names are checked as `create`
    checks them (an unknown one in `clusterFloors` or `cluster` is NOT_FOUND), and it is planned
    with the `<name>-placement` policy its `allowedRegions`/`allowedClusters` would become, so a
    preview and the create after it agree. It writes nothing."""
    with wiring.store.read() as tx:
        _check_clusters(tx, spec)
    workload_id = wiring.ids.workload()
    return placement.preview(
        wiring.store,
        wiring.index,
        wiring.stock,
        principal,
        spec,
        now,
        workload_id=workload_id,
        workload_policies=_own(spec, workload_id),
    )


def _check_refs(tx: PlacementTx, wiring: Wiring[PlacementTx], spec: WorkloadSpec) -> None:
    wiring.stock.device_class(tx, spec.device_class)  # NOT_FOUND naming it
    if spec.priority_class != STANDARD and tx.priority_classes.get(spec.priority_class) is None:
        raise NotFound(
            f"priority class {spec.priority_class} not found", {"priorityClass": spec.priority_class}
        )
    _check_clusters(tx, spec)


def _check_clusters(tx: PlacementTx, spec: WorkloadSpec) -> None:
    """NOT_FOUND for a cluster the spec names (pinned, or in `clusterFloors`) that does not exist."""
    if spec.pinned_cluster is not None and tx.clusters.get(spec.pinned_cluster) is None:
        raise NotFound(f"cluster {spec.pinned_cluster} not found", {"cluster": spec.pinned_cluster})
    for cluster_id in [*spec.cluster_floors]:
        if tx.clusters.get(cluster_id) is None:
            raise NotFound(
                f"cluster {cluster_id} not found", {"field": "clusterFloors", "cluster": cluster_id}
            )


def place_in(
    tx: PlacementTx,
    wiring: Wiring[PlacementTx],
    workload: Workload,
    now: datetime,
    *,
    excluded: Mapping[str, str] | None = None,
    attempt: Attempt,
    fresh: bool = False,
    own_policies: Sequence[Policy] = (),
    trigger: str = "retry",
) -> WorkloadView:
    """Place the workload's replicas (module docstring); returns it with its deployments and the
    placement made. The caller holds the tenant's workload lock and a caught-up index, and runs in
    `attempt` (`_attempts`): with `attempt.settle`, a replica whose atoms another process took since
    the index was read stays unbooked; the atoms chosen are claimed in `attempt.claims`. `fresh`: a
    workload created in this transaction, which has no deployments to read and no policies but
    `own_policies` (the one it made, if any).

    Each deployment is written once, after its replicas are booked, with one `deployment.updated`
    event when its share, phase or reason changed. A share the plan admitted but the scheduler could
    not fully book (an atom another request of this process holds) leaves it `admitted`; a share
    beyond what the cluster can take (a pinned workload's) leaves it `pending` with the reason."""
    spec = workload.spec
    fresh_workload = fresh
    excluded = {**{c: DRAINED.format(cluster=c) for c in spec.drained_clusters}, **(excluded or {})}
    known = [] if fresh else tx.workloads.deployments_of([workload.id])[workload.id]
    deps = {d.cluster_id: d for d in known}
    reps = tx.workloads.replicas_of([d.id for d in known]) if known else {}
    booked = {c: len(reps[d.id]) for c, d in deps.items()}
    snap = placement.snapshot_in(
        tx,
        wiring.index,
        wiring.stock,
        workload.tenant_id,
        spec.device_class,
        workload.id,
        now,
        workload_policies=own_policies if fresh else None,
    )
    plan, freed = _plan_and_evict(tx, wiring, workload, snap, booked, excluded, now)
    views: list[tuple[Deployment, int, list[str]]] = []
    written: list[tuple[Deployment, bool]] = []
    new_replicas: list[tuple[str, int, str]] = []
    events: list[Event] = []
    for cluster_id in sorted(set(deps) | set(plan.shares)):
        share = plan.shares.get(cluster_id, 0)
        dep = deps.get(cluster_id)
        have = reps[dep.id] if dep is not None else []
        if share == 0 and not have:
            if dep is not None:
                tx.workloads.remove_deployment(dep.id)
                events.append(_updated(workload, dep, "removed", 0, 0, None))
            continue
        fresh = dep is None
        if dep is None:
            dep = Deployment(
                id=wiring.ids.deployment(),
                workload_id=workload.id,
                tenant_id=workload.tenant_id,
                cluster_id=cluster_id,
                desired_replicas=share,
                phase="pending",
                reason=None,
                message="",
                shortfall=0,
                created_at=now,
                updated_at=now,
            )
        count = len(have)
        kept = [a for _, a in have]
        added: list[tuple[int, str]] = []
        if share < count:
            _take_away(tx, dep, have[share:], now)
            kept = [a for _, a in have[:share]]
            count = share
        elif share > count:
            # never past what the verdict allows (quota and capacity), even for a pinned share
            verdict_room = plan.verdict(cluster_id)
            allowed = min(share - count, verdict_room.room if verdict_room is not None else 0)
            added = (
                _book(tx, wiring, snap, spec, dep, have, allowed, now, attempt, freed.get(cluster_id, {}))
                if allowed > 0
                else []
            )
        before = count
        count += len(added)
        if share == 0 and count == 0:
            tx.workloads.remove_deployment(dep.id)
            events.append(_updated(workload, dep, "removed", 0, 0, None))
            continue
        verdict = plan.verdict(cluster_id)
        short = count < share
        room = verdict.room if verdict is not None else 0
        blocked = short and (share - before > room or verdict is None or verdict.reason is not None)
        reason: Reason | None = None
        if blocked:
            reason = (verdict.reason if verdict is not None else None) or _limit_of(
                verdict, spec, share - before
            )
        message = verdict.message if verdict is not None and short else ""
        shortfall = max(verdict.shortfall if verdict is not None else 0, share - count)
        phase = phase_of(share, count, 0, blocked)
        new = replace(
            dep,
            desired_replicas=share,
            phase=phase,
            reason=reason,
            message=message[:500],
            shortfall=max(0, shortfall),
            updated_at=now,
            generation=dep.generation if fresh else dep.generation + 1,
            next_replica=max([dep.next_replica, *(i + 1 for i, _ in added)]),
            preempted_by=dep.preempted_by if short else None,
        )
        changed = fresh or (
            new.phase,
            new.desired_replicas,
            new.reason,
            new.shortfall,
            new.next_replica,
            new.preempted_by,
        ) != (dep.phase, dep.desired_replicas, dep.reason, dep.shortfall, dep.next_replica, dep.preempted_by)
        if changed:
            written.append((new, fresh))
            events.append(_updated(workload, new, phase, share, count, reason))
        elif new.message != dep.message:
            # The same reason with other figures (a pinned share waiting as free devices or quota
            # change): the message shown is the present one, with no event for a wording.
            written.append((new, fresh))
        new_replicas.extend((new.id, i, a) for i, a in added)
        views.append((new, count, kept))
    total = sum(count for _, count, _ in views)
    unplaced = max(0, spec.replicas - total)
    placed = replace(
        workload,
        unplaced=unplaced,
        reason=placement.main_reason(plan) if unplaced else None,
        generation=workload.generation + 1,
    )
    if trigger != RETRY or events or plan.evictions or placed.unplaced != workload.unplaced:
        events.append(_decided(placed, trigger, plan, {d.cluster_id: n for d, n, _ in views if n > 0}))
    # the deployments, their new replicas, their events and the workload's figures, at once
    if not tx.workloads.record_placement(placed, workload.generation, written, new_replicas, events, now):
        raise ConcurrentChange(f"workload {workload.id} changed while it was placed; retry")
    ending = Counter[str]() if fresh_workload else _terminating(tx, [workload.id])
    return WorkloadView(placed, _deployment_views(tx, placed, views, ending, now), plan, ending[workload.id])


WIDER = 10
"""How many times its limit a retry pass reads of the waiting workloads before it orders them."""

MAX_LOCK_ROUNDS = 8
"""Plans made again, each without the tenants whose workload lock another write held, before a
placement gives up evicting for this attempt."""


def _plan_and_evict(
    tx: PlacementTx,
    wiring: Wiring[PlacementTx],
    workload: Workload,
    snap: placement.Snapshot,
    booked: Mapping[str, int],
    excluded: Mapping[str, str],
    now: datetime,
) -> tuple[Placement, dict[str, dict[str, list[FreeDevice]]]]:
    """Plan the workload's placement and carry out the evictions it needs (`service.placement.preemption`):
    the victims' tenants are locked without waiting (a plan is made again without a tenant whose
    lock is held), their replicas taken away, their deployments sent back to `pending` with reason
    `preempted`. Returns the plan and, by cluster and pool, the devices the victims freed at once
    (a victim its node has handed over terminates, and its devices come when the node lets go)."""
    spec = workload.spec
    skip: frozenset[str] = frozenset()
    for round_ in range(MAX_LOCK_ROUNDS + 1):
        plan, opened = placement.plan_in(
            tx,
            wiring.index,
            wiring.stock,
            snap,
            spec,
            booked,
            now,
            excluded=excluded,
            workload_id=workload.id,
            skip_tenants=skip,
            preempt=round_ < MAX_LOCK_ROUNDS,
        )
        victims = [v.candidate for o in opened for v in o.eviction.victims]
        # a replica's project is locked as its workload writes lock it; a reservation's as its
        # tenant's writes in its pool do (quota_lock)
        locks = {workload_lock(v.tenant_id): v.tenant_id for v in victims if not v.reservation}
        locks.pop(workload_lock(workload.tenant_id), None)
        for o in opened:
            for v in o.eviction.victims:
                if v.candidate.reservation:
                    pool = o.pools[v.candidate.devices[0].atom_id]
                    locks[quota_lock(v.candidate.tenant_id, pool)] = v.candidate.tenant_id
        busy = {t for key, t in sorted(locks.items()) if not tx.reservations.try_lock(key)}
        if not busy:
            # held now: a victim its project took away since the index was read is gone for good
            ids = [v.allocation_id for v in victims]
            there = {r.allocation_id for r in tx.workloads.running(ids)}
            there |= {
                r.id for r in tx.reservations.preemptible_among(ids) if r.ends_at is None or r.ends_at > now
            }
            busy = {v.tenant_id for v in victims if v.allocation_id not in there}
        if not busy:
            break
        skip |= busy
    freed: dict[str, dict[str, list[FreeDevice]]] = {}
    for o in opened:
        freed[o.cluster_id] = _evict(tx, workload, o, now)
    return plan, freed


def _evict(
    tx: PlacementTx, preemptor: Workload, opened: preemption.Opened, now: datetime
) -> dict[str, list[FreeDevice]]:
    """Take the victims' replicas away (those handed over terminate, naming the preemptor, which
    waits for them), send their deployments back to `pending` with reason `preempted`, and tell of
    it: one `workload.preempted` per deployment and rule. Returns the devices freed at once, by
    pool. The victims were read again under their projects' locks (`_plan_and_evict`)."""
    by_deployment: dict[str, list[Victim]] = {}
    for victim in opened.eviction.victims:
        if victim.candidate.reservation:
            found = tx.reservations.get(victim.candidate.allocation_id)
            assert found is not None  # read again under its lock (`_plan_and_evict`)
            reservations.preempt_in(tx, found, preemptor.id, victim.why, now)
            continue
        by_deployment.setdefault(victim.candidate.deployment_id, []).append(victim)
    owners = sorted({v.candidate.workload_id for v in opened.eviction.victims if not v.candidate.reservation})
    deps = {d.id: d for ds in tx.workloads.deployments_of(owners).values() for d in ds}
    reps = tx.workloads.replicas_of(sorted(by_deployment))
    gone_all: list[str] = []
    for dep_id, victims in sorted(by_deployment.items()):
        dep = deps.get(dep_id)
        wanted = {v.candidate.allocation_id for v in victims}
        gone = [(i, a) for i, a in reps.get(dep_id, []) if a in wanted]
        if dep is None or len(gone) != len(wanted):
            raise Overlap(None)
        _take_away(tx, dep, gone, now, preempted_by=preemptor.id)
        gone_all.extend(wanted)
        left = len(reps[dep_id]) - len(gone)
        whys = sorted({v.why for v in victims})
        message = (
            f"{len(gone)} replica(s) preempted by workload {preemptor.id}"
            f" ({', '.join(_WHY[w] for w in whys)}); placed again when devices free up"
        )
        tx.workloads.put_deployment(
            replace(
                dep,
                phase="pending",
                reason="preempted",
                message=message,
                shortfall=max(0, dep.desired_replicas - left),
                preempted_by=preemptor.id,
                updated_at=now,
                generation=dep.generation + 1,
            )
        )
        tx.events.append(
            DeploymentUpdated(
                dep.id,
                dep.tenant_id,
                dep.workload_id,
                dep.cluster_id,
                "pending",
                dep.desired_replicas,
                left,
                "preempted",
            ),
            now,
        )
        for why in whys:
            tx.events.append(
                WorkloadPreempted(
                    dep.workload_id,
                    dep.tenant_id,
                    dep.cluster_id,
                    dep.id,
                    tuple(sorted(v.candidate.allocation_id for v in victims if v.why == why)),
                    preemptor.id,
                    why,
                ),
                now,
            )
    ending = tx.workloads.terminating_among(gone_all)
    freed: dict[str, list[FreeDevice]] = {}
    for victim in opened.eviction.victims:
        if victim.candidate.allocation_id in ending:
            continue
        for device in victim.candidate.devices:
            freed.setdefault(opened.pools[device.atom_id], []).append(device)
    return freed


_WHY = {
    "priority": "a higher priority",
    "floor": "its project's floor",
    "fair_share": "its project's fair share",
}


def _decided(workload: Workload, trigger: str, plan: Placement, shares: Mapping[str, int]) -> WorkloadDecided:
    """The decision a placement made, as `workloads why` tells it (`WorkloadDecided`)."""
    refused = {v.cluster_id: v.reason for v in plan.verdicts if v.reason is not None and v.share == 0}
    return WorkloadDecided(
        workload.id,
        workload.tenant_id,
        trigger,
        workload.spec.replicas,
        dict(sorted(shares.items())),
        workload.unplaced,
        workload.reason,
        dict(sorted(refused.items())[:MAX_REFUSED]),
        tuple(
            {
                "clusterId": cluster_id,
                "workloadId": v.candidate.workload_id,
                "allocationId": v.candidate.allocation_id,
                "why": v.why,
                "kind": "reservation" if v.candidate.reservation else "replica",
            }
            for cluster_id, eviction in sorted(plan.evictions.items())
            for v in eviction.victims
        )[:MAX_REFUSED],
        sum(len(e.victims) for e in plan.evictions.values()),
    )


def _limit_of(verdict: Verdict | None, spec: WorkloadSpec, wanted: int) -> Reason:
    """Why a cluster that takes some replicas cannot take `wanted`: its quota when that is what
    runs out first, else its capacity."""
    if (
        verdict is not None
        and verdict.quota_left is not None
        and verdict.quota_left // spec.device_count < wanted
    ):
        return "insufficient_quota"
    return "insufficient_capacity"


def _deployment_views(
    tx: PlacementTx,
    workload: Workload,
    placed: list[tuple[Deployment, int, list[str]]],
    ending: Counter[str],
    now: datetime,
) -> list[DeploymentView]:
    """Views of deployments just written: only replicas that were there before can be bound or run yet."""
    earlier = [a for _, _, kept in placed for a in kept]
    bindings = tx.bindings.of_allocations(earlier) if earlier else {}
    runs = workload.spec.container is not None and earlier
    states = tx.replica_states.of_allocations(earlier) if runs else {}
    live = _live(tx, states, now)
    out = []
    for dep, count, kept in placed:
        out.append(_deployment_view(workload, dep, count, kept, bindings, states, live, ending))
    return out


def _book(
    tx: PlacementTx,
    wiring: Wiring[PlacementTx],
    snap: placement.Snapshot,
    spec: WorkloadSpec,
    dep: Deployment,
    have: list[tuple[int, str]],
    wanted: int,
    now: datetime,
    attempt: Attempt,
    freed: Mapping[str, Sequence[FreeDevice]] | None = None,
) -> list[tuple[int, str]]:
    """Book up to `wanted` more replicas of the deployment in its cluster; the replicas booked, as
    (index, allocation id), for the caller to record once the deployment is written. With
    `attempt.settle` a replica whose atoms were taken meanwhile is skipped instead of refusing the
    write."""
    taken = set(wiring.index.claimed())
    used = {i for i, _ in have}
    next_index = dep.next_replica
    new_rows: list[tuple[int, str]] = []
    pools = placement.free_devices_in(tx, wiring.index, wiring.stock, snap, dep.cluster_id, now)
    for pool_id, devices in (freed or {}).items():
        have_there, left_there = pools.get(pool_id, ((), snap.pool_left.get(pool_id)))
        pools[pool_id] = (tuple(have_there) + tuple(devices), left_there)
    for pool_id in sorted(pools, key=lambda p: (-len(pools[p][0]), p)):
        devices, left = pools[pool_id]
        if len(new_rows) >= wanted:
            break
        may = wanted - len(new_rows)
        if left is not None:
            may = min(may, left // spec.device_count)
        free = [d for d in devices if d.atom_id not in taken]
        for atoms in choose_replicas(free, spec.device_count, may, spec.topology_kind, wiring.stock.salt):
            while next_index in used:
                next_index += 1
            allocation = replica_allocation_id(dep.id, next_index)
            wiring.index.claim(atoms)
            attempt.claims.extend(atoms)
            taken.update(atoms)
            if attempt.settle:
                if not tx.ledger.try_book(list(atoms), Window(now, None), allocation, dep.tenant_id, now):
                    continue
            else:
                tx.ledger.book(list(atoms), Window(now, None), allocation, dep.tenant_id, now)
            new_rows.append((next_index, allocation))
            used.add(next_index)
    return new_rows


def _take_away(
    tx: PlacementTx,
    dep: Deployment,
    gone: Sequence[tuple[int, str]],
    now: datetime,
    preempted_by: str | None = None,
) -> int:
    """Remove these replicas of the deployment; returns how many terminate. A replica its node has
    handed over (`domain.placement.workloads.hands_over`) terminates: its allocation keeps its devices booked,
    so they count as allocated, until the node reports it released (`service.fleet.node_reports`) and the
    node's spec no longer assigns it (`service.gate.node_spec`). Any other ends at once."""
    if not gone:
        return 0
    # locked: a node's report about one of them waits for this write, and sees what it decided
    # (a release that committed first is read here, and the replica ends at once)
    reported = tx.bindings.of_allocations([a for _, a in gone], for_update=True)
    terminating = [
        Terminating(a, dep.tenant_id, dep.workload_id, dep.id, dep.cluster_id, now, preempted_by)
        for _, a in gone
        if hands_over(reported.get(a, {}))
    ]
    waiting = {t.allocation_id for t in terminating}
    for _, allocation in gone:
        if allocation not in waiting:
            tx.ledger.end_allocation(allocation, now, LedgerReleased(allocation, now))
    # what nodes said of the containers of those that ended: a replica's number is never reused,
    # but its word must not outlive it (doctor, a deployment's problems)
    tx.replica_states.forget([a for _, a in gone if a not in waiting])
    tx.workloads.add_terminating(terminating)
    if terminating:
        tx.events.append(
            ReplicasTerminating(dep.workload_id, dep.tenant_id, dep.cluster_id, tuple(sorted(waiting))), now
        )
    tx.workloads.remove_replicas(dep.id, [i for i, _ in gone])
    return len(terminating)


def _updated(
    workload: Workload, dep: Deployment, phase: str, desired: int, booked: int, reason: str | None
) -> DeploymentUpdated:
    return DeploymentUpdated(
        dep.id, workload.tenant_id, workload.id, dep.cluster_id, phase, desired, booked, reason
    )


def get(store: StorePort[PlacementTx], principal: Principal, ref: str, now: datetime) -> WorkloadView:
    """The workload as of `now` (its replicas ready while their nodes are live)."""
    with store.read() as tx:
        return _view(tx, _visible(tx, principal, ref), now)


def list_workloads(
    store: StorePort[PlacementTx],
    principal: Principal,
    now: datetime,
    *,
    tenant_id: str | None,
    limit: int | None,
    after: str | None,
) -> Listing[WorkloadView]:
    scope = tenant_scope(principal, tenant_id)
    with store.read() as tx:
        found = tx.workloads.page(scope, None, None)
        listing = page(found, lambda w: w.id, limit, after)
        views = _views(tx, list(listing.items), now)
    return Listing([views[w.id] for w in listing.items], listing.next_cursor)


def list_deployments(
    store: StorePort[PlacementTx],
    principal: Principal,
    now: datetime,
    *,
    workload_id: str | None,
    limit: int | None,
    after: str | None,
) -> Listing[DeploymentView]:
    with store.read() as tx:
        if workload_id is not None:
            workloads = [_visible(tx, principal, workload_id)]
        else:
            workloads = tx.workloads.page(tenant_scope(principal, None), None, None)
        views = [d for v in _views(tx, workloads, now).values() for d in v.deployments]
    views.sort(key=lambda v: v.deployment.id)
    return page(views, lambda v: v.deployment.id, limit, after)


def scale(
    wiring: Wiring[PlacementTx],
    principal: Principal,
    ref: str,
    replicas: object,
    now: datetime,
    generation: int | None = None,
) -> WorkloadView:
    """`workloads.scale`: re-run placement for the new count (module docstring)."""
    count = check_replicas(replicas)

    def run(tx: PlacementTx, attempt: Attempt) -> WorkloadView:
        found = _visible(tx, principal, ref)
        _lock_and_catch_up(tx, wiring, found.tenant_id, now)
        current = tx.workloads.get(found.id)
        if current is None:
            raise workload_not_found(ref)
        if generation is not None and generation != current.generation:
            raise GenerationMismatch(
                f"workload {current.id} is at generation {current.generation}, not {generation};"
                " read it again",
                {"id": current.id, "generation": current.generation, "given": generation},
            )
        check_floors(current.spec.cluster_floors, count)
        scaled = replace(current, spec=replace(current.spec, replicas=count))
        tx.events.append(WorkloadScaled(current.id, current.tenant_id, count, current.spec.replicas), now)
        return place_in(tx, wiring, scaled, now, attempt=attempt, trigger=SCALE)

    return _attempts(wiring, run)


def delete(wiring: Wiring[PlacementTx], principal: Principal, ref: str, now: datetime) -> WorkloadView:
    """`workloads.delete`: take every replica away (those handed over terminate: `_take_away`),
    remove the deployments and the workload (and its own `<name>-placement` policy). Returns it as
    it was, with `terminating` counting the replicas now terminating."""
    with wiring.store.begin() as tx:
        found = _visible(tx, principal, ref)
        tx.reservations.lock(workload_lock(found.tenant_id))
        view = _view(tx, found, now)
        deps = tx.workloads.deployments_of([found.id])[found.id]
        reps = tx.workloads.replicas_of([d.id for d in deps])
        ending = sum(_take_away(tx, d, reps[d.id], now) for d in deps)
        view = replace(view, terminating=view.terminating + ending)
        for d in deps:
            tx.events.append(_updated(found, d, "removed", 0, 0, None), now)
        if found.policy_id is not None:
            gone = tx.policies.remove(found.policy_id)
            if gone is not None:
                tx.events.append(PolicyDeleted(gone.id, gone.tenant_id, gone.name), now)
        tx.workloads.remove(found.id)
        tx.events.append(WorkloadDeleted(found.id, found.tenant_id, found.spec.name), now)
    return view


class _Planned(Exception):
    """Carries a dry run's answer out of its transaction, which rolls back: nothing is written."""

    def __init__(self, view: WorkloadView, result: dict[str, Any]) -> None:
        super().__init__("dry run")
        self.view = view
        self.result = result


def _held(tx: PlacementTx, workload_id: str) -> set[str]:
    """The allocations of the workload's replicas now, in every cluster."""
    deps = tx.workloads.deployments_of([workload_id])[workload_id]
    reps = tx.workloads.replicas_of([d.id for d in deps])
    return {a for rs in reps.values() for _, a in rs}


def drain(
    wiring: Wiring[PlacementTx],
    principal: Principal,
    ref: str,
    cluster: str,
    now: datetime,
    *,
    dry_run: bool = False,
    force: bool = False,
) -> tuple[Operation, WorkloadView]:
    """`workload.drain`: remove the workload's deployment from `cluster` and place its replicas
    elsewhere, in one transaction; recorded as an operation that has succeeded.

    The answer counts what the drain did, read from the state before and after it (so a replica the
    re-placement takes away in another cluster counts too): `removedReplicas` taken away,
    `terminatingReplicas` of them waiting for their node, and `strandedReplicas`, placed before and
    placed nowhere after. A drain that strands any is refused (`NowhereToGo`) unless `force`.
    `dry_run` runs the very same steps and rolls them back, so what it answers is what the drain
    would do now (operation status `planned`, no id); nothing is written and no operation kept."""
    cluster_id = check_ref(cluster, "payload.cluster")
    op_id = "" if dry_run else wiring.ids.operation()

    def run(tx: PlacementTx, attempt: Attempt) -> WorkloadView:
        found = _visible(tx, principal, ref)
        _lock_and_catch_up(tx, wiring, found.tenant_id, now)
        if tx.clusters.get(cluster_id) is None:
            raise NotFound(
                f"cluster {cluster_id} not found", {"field": "payload.cluster", "cluster": cluster_id}
            )
        if found.spec.pinned_cluster == cluster_id:
            raise InvalidInput(
                f"workload {found.id} is pinned to cluster {cluster_id}; scale it to 0 or delete it instead",
                {"field": "payload.cluster"},
            )
        held_before = _held(tx, found.id)
        terminating_before = _terminating(tx, [found.id])[found.id]
        deps = {d.cluster_id: d for d in tx.workloads.deployments_of([found.id])[found.id]}
        dep = deps.get(cluster_id)
        if dep is not None:
            gone = tx.workloads.replicas_of([dep.id])[dep.id]
            _take_away(tx, dep, gone, now)
            tx.workloads.remove_deployment(dep.id)
            tx.events.append(_updated(found, dep, "removed", 0, 0, None), now)
        drained = replace(
            found,
            spec=replace(
                found.spec, drained_clusters=tuple(sorted({*found.spec.drained_clusters, cluster_id}))
            ),
        )
        tx.events.append(WorkloadDrained(found.id, found.tenant_id, cluster_id, force), now)
        view = place_in(tx, wiring, drained, now, attempt=attempt, trigger=DRAIN)
        held_after = _held(tx, found.id)
        stranded = max(0, len(held_before) - len(held_after))
        result: dict[str, Any] = {
            "removedReplicas": len(held_before - held_after),
            "terminatingReplicas": max(0, view.terminating - terminating_before),
            "strandedReplicas": stranded,
            "shares": dict(view.placement.shares) if view.placement else {},
            "unplaced": view.workload.unplaced,
        }
        if dry_run:
            raise _Planned(view, result)
        if stranded and not force:
            raise NowhereToGo(
                f"draining cluster {cluster_id} would leave {stranded} replica(s) of workload"
                f" {found.id} with nowhere to go: no other cluster can take them now, so they would"
                " end and wait as unplaced; send force: true to drain anyway, or dryRun: true to see"
                " what the drain would do",
                {"field": "force", "replicas": stranded, "cluster": cluster_id, "workloadId": found.id},
            )
        tx.workloads.add_operation(
            Operation(
                id=op_id,
                type=DRAIN,
                tenant_id=found.tenant_id,
                workload_id=found.id,
                payload={"cluster": cluster_id},
                status="succeeded",
                result=result,
                created_at=now,
                finished_at=now,
            )
        )
        return view

    try:
        view = _attempts(wiring, run)
    except _Planned as planned:
        op = Operation(
            id=op_id,
            type=DRAIN,
            tenant_id=planned.view.workload.tenant_id,
            workload_id=planned.view.workload.id,
            payload={"cluster": cluster_id},
            status="planned",
            result=planned.result,
            created_at=now,
            finished_at=None,
        )
        return op, planned.view
    with wiring.store.read() as tx:
        found_op = tx.workloads.operation(op_id)
    assert found_op is not None
    return found_op, view


def release_replica(
    wiring: Wiring[PlacementTx], principal: Principal, allocation: str, now: datetime
) -> Operation:
    """`replica.release` (admin): end a terminating replica whose node will not release it (a node
    gone for good): its allocation ends at `now` and its devices are free. The operator's word
    stands in for the node's report, so this is for an admin alone; a replica that is not
    terminating is NOT_FOUND (scale the workload, or delete it, to take a running one away)."""
    require_admin(principal, "operations.create (replica.release)")
    allocation_id = check_ref(allocation, "payload.allocation")
    op_id = wiring.ids.operation()
    with wiring.store.begin() as tx:
        tx.bindings.of_allocations([allocation_id], for_update=True)  # as a node's report would
        gone = tx.workloads.end_terminating(allocation_id)
        if gone is None:
            raise NotFound(
                f"no replica with allocation {allocation_id} is terminating",
                {"field": "payload.allocation", "allocation": allocation_id},
            )
        tx.ledger.end_allocation(allocation_id, now, LedgerReleased(allocation_id, now))
        tx.replica_states.forget([allocation_id])
        op = Operation(
            id=op_id,
            type=RELEASE_REPLICA,
            tenant_id=gone.tenant_id,
            workload_id=gone.workload_id,
            payload={"allocation": allocation_id},
            status="succeeded",
            result={"clusterId": gone.cluster_id, "terminatingSince": gone.since.isoformat()},
            created_at=now,
            finished_at=now,
        )
        tx.workloads.add_operation(op)
    return op


def get_operation(store: StorePort[PlacementTx], principal: Principal, operation_id: str) -> Operation:
    with store.read() as tx:
        found = tx.workloads.operation(check_ref(operation_id, "id"))
    if found is None or (found.tenant_id is not None and not principal.acts_for(found.tenant_id)):
        raise NotFound(f"operation {operation_id} not found", {"id": operation_id})
    return found


def retry(wiring: Wiring[PlacementTx], now: datetime, limit: int = 100) -> int:
    """Place again every workload with replicas short of its count (a deployment pending or
    admitted, or replicas unplaced); how many gained replicas. Called when capacity or quota may
    have freed (`service.ops.placement_retry`)."""
    with wiring.store.read() as tx:
        # read past `limit`, so that the highest priorities among more of those waiting go first
        wider = limit * WIDER
        waiting = {*tx.workloads.pending_workloads(wider), *(w.id for w in tx.workloads.unplaced(wider))}
        found = tx.workloads.many(sorted(waiting))
        priorities = {p.name: p.priority for p in tx.priority_classes.all()}
        deps = tx.workloads.deployments_of([w.id for w in found])
    evicted_by = {w: d.preempted_by for w, ds in deps.items() for d in ds if d.preempted_by is not None}
    ids = admission_order(
        ((w.id, priorities.get(w.spec.priority_class, 0), w.created_at) for w in found), evicted_by
    )[:limit]
    gained = 0
    for workload_id in ids:

        def run(tx: PlacementTx, attempt: Attempt, workload_id: str = workload_id) -> WorkloadView:
            found = tx.workloads.get(workload_id)
            if found is None:
                raise workload_not_found(workload_id)
            _lock_and_catch_up(tx, wiring, found.tenant_id, now)
            again = tx.workloads.get(workload_id)
            if again is None:  # deleted by its project between the read and the lock
                raise workload_not_found(workload_id)
            return place_in(tx, wiring, again, now, attempt=attempt, trigger=RETRY)

        try:
            view = _attempts(wiring, run)
        except NotFound:
            continue
        if view.workload.unplaced == 0:
            gained += 1
    return gained


__all__ = [
    "DRAIN",
    "OPERATION_TYPES",
    "RELEASE_REPLICA",
    "DeploymentView",
    "Wiring",
    "WorkloadView",
    "create",
    "delete",
    "drain",
    "get",
    "get_operation",
    "list_deployments",
    "list_workloads",
    "place_in",
    "preview",
    "release_replica",
    "retry",
    "scale",
    "workload_lock",
]
