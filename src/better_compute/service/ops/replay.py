"""`replay`: what recorded (or given) demand would have met under a fleet and a policy set, found by
running the server's own use cases over it in virtual time (docs/replay.md).

Nothing here decides where anything goes. A replay opens a throwaway store (`Scratch`: the
composition root's, a fresh SQLite file with the real migrations, the fleet registered and its
nodes' first reports ingested), lays the policy set over it with the admin use cases
(`priority_classes.create`, `class_quotas.set_class_quota`, `policies.create`, `prices.set_price`),
then walks the demand's instants in order. At each instant the virtual clock is set to it, the
requests of that instant go through `reservations.create`/`release`/`cancel` and
`workloads.create`/`scale`/`drain`/`delete` exactly as the API calls them, and the placement retrier's pass
(`placement_retry.Retrier.tick`, the one the server runs on a timer and on wake-ups) runs once, so
what waits is placed again, preemptions included, when an end or a release frees devices. The real
store is only read (the fleet, the policy set and the history); every write goes to the scratch
store, which is thrown away.

What each request met is then read back from the scratch store's own event log
(`deployment.updated`, `workload.decided`, `workload.preempted`, `reservation.preempted`) and its
ledger, and the bills of the window (`bills.get_bill`) give the cost: the figures come from the
same records the server would show.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol

from better_compute.domain.catalog import find_model
from better_compute.domain.endpoints.events import EndpointCreated, EndpointDeleted, EndpointUpdated
from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.shares import share as atom_share
from better_compute.domain.fleet.shares import share_of_kind
from better_compute.domain.gate import mig_gate as gate_rules
from better_compute.domain.kernel.errors import DomainError, InvalidInput, InvalidState, NotFound
from better_compute.domain.kernel.events import Event
from better_compute.domain.kernel.selectors import Selector, parse_selector
from better_compute.domain.ledger.events import ReservationCancelled, ReservationCreated, ReservationReleased
from better_compute.domain.ledger.ledger import Booking
from better_compute.domain.metering.billing import Price
from better_compute.domain.ops.audience import Reader
from better_compute.domain.ops.fleet import (
    ClusterSpec,
    FleetSpec,
    NodeSpec,
    PoolSpec,
    TenantSpec,
    parse_fleet,
)
from better_compute.domain.ops.fleet_changes import apply_fleet_changes, parse_fleet_changes
from better_compute.domain.ops.replay import (
    Ask,
    Demand,
    EndpointAsk,
    Figures,
    Outcome,
    PolicySet,
    ReservationAsk,
    Window,
    WorkloadAsk,
    check_fleet_size,
    check_size,
    check_window,
    check_within,
    figures,
    parse_demand,
    parse_policy_set,
    request_shapes,
    size_of,
)
from better_compute.domain.placement.class_quotas import ClassQuota
from better_compute.domain.placement.device_classes import DeviceClass
from better_compute.domain.placement.events import (
    DeploymentUpdated,
    ReservationPreempted,
    WorkloadCreated,
    WorkloadDecided,
    WorkloadDeleted,
    WorkloadDrained,
    WorkloadPreempted,
    WorkloadScaled,
)
from better_compute.domain.placement.fragmentation import WHOLE, Free, free_of, node_fragmentation, share_of
from better_compute.domain.placement.pool_fragmentation import milli_of
from better_compute.domain.placement.priority_classes import PriorityClass
from better_compute.domain.tenancy.credentials import Principal, require_admin
from better_compute.domain.tenancy.iam import Policy
from better_compute.domain.tenancy.records import Quota
from better_compute.service.endpoints import endpoints
from better_compute.service.gate import mig_gate
from better_compute.service.kernel.ports import LogPosition, StorePort
from better_compute.service.ledger import reservations
from better_compute.service.metering import bills, prices
from better_compute.service.ops.placement_retry import Retrier
from better_compute.service.ops.ports import OpsTx
from better_compute.service.ops.replay_demand import ReplayedDemand
from better_compute.service.ops.replay_held import HeldAtoms
from better_compute.service.placement import class_quotas, priority_classes, workloads
from better_compute.service.tenancy import policies, quotas

REPLAYER = Principal(tenant_id=None, is_admin=True, credential_id="replay")
"""Who makes the replayed requests in the scratch store: an admin naming each request's tenant."""


class ReplayedNodes(Protocol):
    """The replayed fleet's nodes, each doing at once what its daemon does (the composition root's:
    `entrypoints.replay.SimulatedNodes`): a layout change waits for its node's report, and a node
    is picked for an endpoint only once it has joined."""

    def join(self, node_ids: Sequence[str], now: datetime) -> None:
        """Join the nodes (a join token spent for a key of their own), as `bcd join` does."""
        ...

    def converge(self, node_id: str, now: datetime) -> None:
        """Read the node's spec as its daemon does, give its GPUs the layouts it tells, and report
        the inventory with the spec's generation observed."""
        ...


@dataclass(frozen=True)
class Sandbox(workloads.Wiring[OpsTx]):
    """A scratch store with its own booking index, stock and ids, and its fleet's simulated nodes."""

    nodes: ReplayedNodes


Scratch = Callable[[FleetSpec, datetime], AbstractContextManager[Sandbox]]
"""Opens a throwaway store holding `fleet` as registered at the instant given (the composition
root's: `entrypoints.replay.scratch`), and removes it when the block ends."""


@contextmanager
def refuse_replay(fleet: FleetSpec, now: datetime) -> Iterator[Sandbox]:
    """A `Scratch` for a process that runs no replays (the default of `Services`)."""
    del fleet, now
    raise InvalidState("this server process runs no replays", {"reason": "no_replays"})
    yield  # pragma: no cover


PAGE = 1000
GATE_STEPS = 16
"""The most gate steps one node takes at one instant (a layout change is a few)."""


@dataclass(frozen=True)
class Run:
    """One policy set's replay: per tenant and overall figures, and each request's outcome."""

    name: str
    overall: Figures
    tenants: Mapping[str, Figures]
    outcomes: tuple[Outcome, ...]
    elapsed_s: float


@dataclass(frozen=True)
class Report:
    window: Window
    requests: int
    runs: tuple[Run, ...]
    source: str
    """`history` (the deployment's own) or `file` (demand given)."""


@dataclass
class _Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now


@dataclass
class _Tracked:
    """What the replay learnt of one request as it made it: the scratch id it got, or why it was
    refused outright."""

    ask: Ask
    scratch_id: str | None = None
    refused_reason: str | None = None


# -- Today's fleet -------------------------------------------------------------------------------


def today_fleet(store: StorePort[OpsTx]) -> FleetSpec:
    """The deployment's fleet now, as a fleet file would describe it: its tenants, clusters, nodes
    (each with its GPUs' model and count, NUMA nodes, NVLink, and its pool's MIG layout) and pools
    (mode, owner, members, settings, meter and the owner's quota rows). A node with no GPU of a
    model the catalog knows is left out: a replay cannot simulate it."""
    with store.read() as tx:
        tenants = tx.tenants.page(None, None)
        clusters = tx.clusters.all()
        nodes = tx.nodes.page(None, None, None)
        gpus = tx.gpus.of_nodes([n.id for n in nodes]) if nodes else []
        pools = tx.pools.all()
        members = tx.pools.members()
        owner_rows = {p.id: tx.quotas.find(p.owner_tenant_id, p.id) for p in pools}
    pool_of = {n: p for p in pools for n in members.get(p.id, ())}
    by_node: dict[str, list[Any]] = defaultdict(list)
    for g in gpus:
        if g.present and g.model:
            by_node[g.node_id].append(g)
    node_specs = []
    for n in nodes:
        held = by_node.get(n.id)
        if not held:
            continue
        pool = pool_of.get(n.id)
        layout = pool.settings.mig_layout if pool is not None and pool.mode == "mig" else None
        node_specs.append(
            NodeSpec(
                n.id,
                n.cluster_id,
                held[0].model,
                len(held),
                mig_layout=layout,
                numa_nodes=max(1, len({g.numa_node for g in held if g.numa_node is not None})),
                nvlink=any(g.nvlink_peers for g in held),
                carries_pool_layout=n.carries_pool_layout,
                host_cpu_cores=n.host_cpu_cores,
                host_memory_mib=n.host_memory_mib,
                joined=n.public_key is not None,
            )
        )
    kept = {n.name for n in node_specs}
    return FleetSpec(
        tuple(TenantSpec(t.id, t.name) for t in tenants),
        tuple(ClusterSpec(c.id, c.region, tuple(c.residency)) for c in clusters),
        tuple(node_specs),
        tuple(
            PoolSpec(
                p.id,
                p.cluster_id,
                p.mode,
                p.owner_tenant_id,
                tuple(m for m in members.get(p.id, ()) if m in kept),
                p.settings,
                {q.cls: q.limit for q in owner_rows[p.id]},
                p.meter,
            )
            for p in pools
        ),
    )


# -- Today's policy set ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Today:
    """The deployment's policy set now, as its records: what a replay starts from before the
    changes it was given."""

    priority_classes: tuple[PriorityClass, ...] = ()
    device_classes: tuple[DeviceClass, ...] = ()
    class_quotas: tuple[ClassQuota, ...] = ()
    pool_quotas: tuple[Quota, ...] = ()
    policies: tuple[Policy, ...] = ()
    prices: tuple[Price, ...] = ()


def today(store: StorePort[OpsTx]) -> Today:
    """Read the deployment's policy set: priority classes, device classes, device-class quota rows
    (floors and weights), pool quota rows, the policies of tenants and clusters (a workload's own
    `<name>-placement` policy is made again by its replayed create) and prices."""
    with store.read() as tx:
        return Today(
            tuple(tx.priority_classes.all()),
            tuple(tx.device_classes.all()),
            tuple(tx.class_quotas.find()),
            tuple(tx.quotas.find(None, None)),
            tuple(
                p for p in tx.policies.find(None, None, with_clusters=True) if p.subject_type != "workload"
            ),
            tuple(tx.prices.all()),
        )


def _copy_today(sandbox: Sandbox, base: Today, fleet: FleetSpec) -> None:
    """Copy `base` into the scratch store, leaving out what names a tenant, cluster or pool the
    replayed fleet does not have (a fleet file of another shape)."""
    tenants = {t.id for t in fleet.tenants}
    clusters = {c.name for c in fleet.clusters}
    pools = {p.name for p in fleet.pools}
    with sandbox.store.begin() as tx:
        for pc in base.priority_classes:
            if tx.priority_classes.get(pc.name) is None:
                tx.priority_classes.add(pc)
        for dc in base.device_classes:
            if tx.device_classes.get(dc.name) is None:
                tx.device_classes.add(dc)
        for row in base.class_quotas:
            if row.tenant_id in tenants and (row.cluster_id is None or row.cluster_id in clusters):
                tx.class_quotas.put(row)
        tx.quotas.put([q for q in base.pool_quotas if q.tenant_id in tenants and q.pool_id in pools])
        for policy in base.policies:
            subject_known = (
                policy.subject_id in clusters
                if policy.subject_type == "cluster"
                else policy.subject_id in tenants
            )
            if subject_known and (policy.pool_id is None or policy.pool_id in pools):
                tx.policies.add(policy)
        for price in base.prices:
            tx.prices.put(price)


# -- Running -------------------------------------------------------------------------------------


def run(
    scratch: Scratch,
    fleet: FleetSpec,
    base: Today,
    changes: PolicySet,
    demand: Demand,
    window: Window,
    *,
    name: str = "policy",
) -> Run:
    """Replay `demand` within `window` over `fleet` with `base` then `changes` laid over it."""
    check_size(demand.asks)
    _check_tenants(fleet, changes, demand)
    began = time.perf_counter()
    with scratch(fleet, window.since) as sandbox:
        _copy_today(sandbox, base, fleet)
        _lay_policy(sandbox, changes, window.since)
        _join_endpoint_pools(sandbox, fleet, demand, window.since)
        gauge = _Fragmentation(sandbox.store, demand)
        tracked = _drive(sandbox, demand, window, gauge)
        outcomes = measure(
            sandbox.store,
            [(t.ask, t.scratch_id, t.refused_reason) for t in tracked],
            window,
            # an endpoint may hold nodes whose atoms did not change (its layout the pool's): read again
            shares=None if any(isinstance(a, EndpointAsk) for a in demand.asks) else gauge.shares(),
        )
        costs = _costs(sandbox.store, {o.tenant for o in outcomes}, window)
    done = _run(name, outcomes, costs, began)
    return replace(done, overall=replace(done.overall, fragmentation=gauge.mean()))


def _join_endpoint_pools(sandbox: Sandbox, fleet: FleetSpec, demand: Demand, now: datetime) -> None:
    """Join the nodes of the pools the demand's endpoints take nodes of that run a daemon (today's
    nodes that have joined; a fleet file's, all: `serve --fleet` joins every node it simulates): an
    endpoint takes only such nodes, which cut themselves to its layout. The other nodes stay as the
    fleet registered them."""
    pools = {p for a in demand.asks if isinstance(a, EndpointAsk) for p in a.pools()}
    joined = {n.name for n in fleet.nodes if n.joined}
    nodes = sorted({n for p in fleet.pools if p.name in pools for n in p.nodes if n in joined})
    if nodes:
        sandbox.nodes.join(nodes, now)


def _run(
    name: str, outcomes: list[Outcome], costs: Mapping[str, tuple[Decimal, str] | None], began: float
) -> Run:
    by_tenant: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        by_tenant[o.tenant].append(o)
    tenants = {t: _with_cost(figures(os), costs.get(t)) for t, os in sorted(by_tenant.items())}
    overall = _with_cost(figures(outcomes), _sum_costs(list(costs.values())))
    return Run(name, overall, tenants, tuple(outcomes), round(time.perf_counter() - began, 3))


def _check_tenants(fleet: FleetSpec, changes: PolicySet, demand: Demand) -> None:
    known = {t.id for t in fleet.tenants}
    for what, named in (("the policy set", changes.tenants()), ("the demand", demand.tenants())):
        unknown = sorted(named - known)
        if unknown:
            raise InvalidInput(
                f"{what} names tenant(s) {unknown} that the replayed fleet does not have",
                {"field": "policy" if what == "the policy set" else "demand", "tenants": unknown[:20]},
            )


def _lay_policy(sandbox: Sandbox, policy: PolicySet, now: datetime) -> None:
    """Lay the changes `policy` over the scratch store with the admin use cases; a change they
    refuse is refused with where it came from (`policy.quotas[2]: ...`)."""
    store = sandbox.store

    @contextmanager
    def at(where: str) -> Iterator[None]:
        try:
            yield
        except DomainError as exc:
            raise type(exc)(f"{where}: {exc}", {**exc.details, "at": where}) from None

    for i, pc in enumerate(policy.priority_classes):
        with store.read() as tx:
            there = tx.priority_classes.get(str(pc.get("name")))
        if there is not None:
            raise InvalidInput(
                f"policy.priorityClasses[{i}]: priority class {there.name} already exists in the"
                " replayed deployment; a replay adds priority classes, it does not change them",
                {"field": f"policy.priorityClasses[{i}]"},
            )
        with at(f"policy.priorityClasses[{i}]"):
            priority_classes.create(
                store, REPLAYER, pc.get("name"), pc.get("priority"), pc.get("preemptible", False), now
            )
    for i, q in enumerate(policy.quotas):
        if "poolId" in q:  # a pool row: how much of an atom class the tenant may hold in the pool
            with at(f"policy.quotas[{i}]"):
                quotas.set_quota(
                    store,
                    REPLAYER,
                    str(q.get("tenantId")),
                    str(q.get("poolId")),
                    str(q.get("class")),
                    q.get("limit"),  # type: ignore[arg-type]
                    now,
                )
            continue
        with at(f"policy.quotas[{i}]"):
            class_quotas.set_class_quota(
                store,
                REPLAYER,
                tenant_id=q.get("tenantId"),
                device_class=q.get("deviceClass", q.get("class")),
                scope=q.get("scope", "cluster" if q.get("clusterId") else "fleet"),
                cluster_id=q.get("clusterId"),
                guaranteed_devices=q.get("guaranteedDevices"),
                floor_devices=q.get("floorDevices"),
                over_quota_weight=q.get("overQuotaWeight"),
                now=now,
                given=tuple(q),
            )
    for i, p in enumerate(policy.policies):
        constraints = {
            k: v
            for k, v in p.items()
            if k not in ("name", "tenantId", "poolId", "limits", "subjectType", "subjectId")
        }
        with at(f"policy.policies[{i}]"):
            policies.create(
                store,
                REPLAYER,
                name=str(p.get("name", f"replay-{i + 1}")),
                tenant_id=p.get("tenantId"),
                pool_id=p.get("poolId"),
                limits=p.get("limits"),
                subject_type=p.get("subjectType"),
                subject_id=p.get("subjectId"),
                constraints=constraints,
                now=now,
                new_id=sandbox.ids.policy,
            )
    for i, price in enumerate(policy.prices):
        with at(f"policy.prices[{i}]"):
            prices.set_price(
                store,
                REPLAYER,
                str(price.get("meter")),
                str(price.get("perHour")),
                str(price.get("currency", "USD")),
                now,
            )


# The order of what happens at one instant: what frees devices first, then what asks for them (a
# drain does both: it frees one cluster's devices and asks for others).
_RELEASE, _DELETE, _SCALE, _DRAIN, _ASK = range(5)


def _timeline(demand: Demand, window: Window) -> list[tuple[datetime, int, int, int]]:
    """(instant, kind, request index, scale step) of everything the demand does within the window."""
    steps: list[tuple[datetime, int, int, int]] = []
    for i, ask in enumerate(demand.asks):
        if not window.since <= ask.at < window.until:
            continue
        steps.append((ask.at, _ASK, i, 0))
        if isinstance(ask, EndpointAsk):
            if ask.until is not None and ask.until < window.until:
                steps.append((ask.until, _DELETE, i, 0))
        elif isinstance(ask, WorkloadAsk):
            if ask.until is not None and ask.until < window.until:
                steps.append((ask.until, _DELETE, i, 0))
            for j, (at, _) in enumerate(ask.scales):
                if ask.at <= at < window.until and (ask.until is None or at < ask.until):
                    steps.append((at, _SCALE, i, j))
            for j, (at, _, _) in enumerate(ask.drains):
                if ask.at <= at < window.until and (ask.until is None or at < ask.until):
                    steps.append((at, _DRAIN, i, j))
        else:
            steps.extend(
                (end, _RELEASE, i, 0)
                for end in (ask.release, ask.end)
                if end is not None and end < window.until
            )
    steps.sort()
    return steps


def _drive(sandbox: Sandbox, demand: Demand, window: Window, gauge: _Fragmentation) -> list[_Tracked]:
    tracked = [_Tracked(a) for a in demand.asks]
    clock = _Clock(window.since)
    retrier = Retrier(sandbox, clock)
    gradients = ReplayedDemand(sandbox.store)  # the server's tie-break, over the replayed bookings
    steps = _timeline(demand, window)
    i = 0
    while i < len(steps):
        clock.now = steps[i][0]
        while i < len(steps) and steps[i][0] == clock.now:
            _, kind, index, step = steps[i]
            _act(sandbox, tracked[index], kind, step, clock.now, gradients)
            i += 1
        reconcile_at(sandbox, retrier, clock.now)
        gauge.sample(clock.now)
    clock.now = window.until
    reconcile_at(sandbox, retrier, clock.now)
    gauge.sample(clock.now)
    return tracked


class _Fragmentation:
    """The fleet's fragmentation share, sampled after each instant's passes and averaged over the
    time until the next (`domain.placement.fragmentation.fragmentation_share`): each GPU's free
    share (its bookable atoms not booked now: a GPU's slots each an equal part of it, a MIG GPU's
    free instances apart, each its profile's share and usable only whole; none when a whole-GPU
    booking holds it) against the demand's request sizes.

    Each sample counts again only the GPUs whose bookings changed since the last one
    (`replay_held.HeldAtoms`, from the scratch store's event log), and the fragmentation of only
    their nodes: a trace's instant changes a few GPUs of thousands."""

    def __init__(self, store: StorePort[OpsTx], demand: Demand) -> None:
        self.store = store
        self.milli: dict[str, int] = {}
        """Each kept atom's share of its GPU, in milli-GPUs."""
        self.mig: set[str] = set()
        """The GPUs split into MIG instances: their free capacity is pieces (`fragmentation.Pieces`)."""
        gpus: dict[str, list[str]] = defaultdict(list)
        node_of: dict[str, str] = {}
        with store.read() as tx:
            classes = {d.name: d.cls for d in tx.device_classes.all()}
            nodes = [n.id for n in tx.nodes.page(None, None, None)]
            present = [a for a in (tx.atoms.of_nodes(nodes) if nodes else []) if a.present]
            for a in present:
                if a.bookable:
                    gpus[a.gpu_id].append(a.id)
                    node_of[a.gpu_id] = a.node
                    self.milli[a.id] = milli_of(atom_share(a))
                    if a.cls == "gpu.mig":
                        self.mig.add(a.gpu_id)
            self.held = HeldAtoms({a: gpu for gpu, ids in gpus.items() for a in ids})
            self.held.sync(tx)  # from these atoms on: whether they change is known at the end
        self.fleet_shares = _Shares(store, present)
        self.shapes = request_shapes(demand.asks, classes, self.fleet_shares.by_class)
        self.size = {gpu: len(ids) for gpu, ids in gpus.items()}
        self.node_of = node_of
        self.node_gpus: dict[str, list[str]] = defaultdict(list)  # each node's GPUs, in GPU order
        for gpu in sorted(gpus):
            self.node_gpus[node_of[gpu]].append(gpu)
        self.gpus = gpus
        self.free: dict[str, Free] = {}
        self.free_total = 0
        self.fragments: dict[str, float] = {}
        self.samples: list[tuple[datetime, float]] = []

    def sample(self, now: datetime) -> None:
        if not self.shapes or not self.size:
            return
        with self.store.read() as tx:
            self.held.sync(tx)
        first = not self.free
        changed = set(self.size) if first else self.held.changed(now) & self.size.keys()
        if first:
            self.held.changed(now)
        nodes: set[str] = set()
        for gpu in changed:
            held, whole = self.held.held(gpu, now)
            free = self._free(gpu, held, whole)
            before = self.free.get(gpu)
            if before != free:
                self.free[gpu] = free
                self.free_total += free_of(free) - (0 if before is None else free_of(before))
                nodes.add(self.node_of[gpu])
        for node in nodes:
            self.fragments[node] = node_fragmentation(
                [self.free[g] for g in self.node_gpus[node]], self.shapes
            )
        self.samples.append((now, share_of([self.fragments[n] for n in self.node_gpus], self.free_total)))

    def _free(self, gpu: str, held: set[str], whole: bool) -> Free:
        """The GPU's free capacity: none under a whole-GPU booking; a MIG GPU's free instances
        apart, each its share; else its free atoms as equal parts of it (a GPU's slots)."""
        if whole:
            return () if gpu in self.mig else 0
        ids = self.gpus[gpu]
        if gpu in self.mig:
            return tuple(sorted((self.milli[a] for a in ids if a not in held), reverse=True))
        return WHOLE * (len(ids) - sum(1 for a in ids if a in held)) // len(ids)

    def shares(self) -> _Shares | None:
        """The fleet's shares as read at the start, when no atom has changed since (read now):
        what `measure` would read again."""
        with self.store.read() as tx:
            self.held.sync(tx)
        return None if self.held.atoms_changed else self.fleet_shares

    def mean(self) -> float | None:
        """The time-weighted mean of the samples (each holds until the next); None: none taken."""
        if not self.samples:
            return None
        if len(self.samples) == 1:
            return round(self.samples[0][1], 6)
        total = span = 0.0
        for (at, share), (after, _) in zip(self.samples, self.samples[1:], strict=False):
            seconds = (after - at).total_seconds()
            total += share * seconds
            span += seconds
        return round(total / span, 6) if span > 0 else round(self.samples[-1][1], 6)


def reconcile_at(sandbox: Sandbox, retrier: Retrier, now: datetime) -> None:
    """The reconcilers' passes at one virtual instant, as the server runs them on timers and
    wake-ups: the MIG layout gate, the placement retrier (what waits is placed again, preempting as
    it may; a `Failed` endpoint takes its nodes), and the gate again for what the retrier started,
    until a pass ends no layout change (a node back from an endpoint frees its GPUs for the
    retrier). Each node's daemon takes its layout at once (`settle`)."""
    settle(sandbox, now)
    for _ in range(PASSES):
        retrier.tick()
        if not settle(sandbox, now):
            return
    raise InvalidState(
        f"the replay did not settle at {now.isoformat()}: layout changes kept ending after"
        f" {PASSES} passes of the retrier",
        {"reason": "replay_unsettled", "at": now.isoformat()},
    )


PASSES = 1000
"""The most retrier passes at one instant (another runs only when the gate ended a layout change,
which frees GPUs for it; each ends a node's change, so a fleet settles in far fewer)."""


def settle(sandbox: Sandbox, now: datetime) -> bool:
    """Step every node's layout gate at `now` until it waits; a node granted a new layout is then
    converged by its simulated daemon and stepped again, so a change the bookings let through ends
    at the instant it is granted (a daemon's minutes of reconfiguration are not simulated). Whether
    some change ended."""
    with sandbox.store.read() as tx:
        nodes = sorted(g.node_id for g in tx.mig_layouts.all_rows())
    ended = False
    for node in nodes:
        reported = False
        for _ in range(GATE_STEPS):
            step = mig_gate.step(sandbox.store, node, now)
            if isinstance(step, gate_rules.Apply) or (isinstance(step, gate_rules.Grant) and step.release):
                ended = True
            if step is None:
                break
            if isinstance(step, gate_rules.Wait):
                if reported or not _granted(sandbox, node):
                    break
                sandbox.nodes.converge(node, now)
                reported = True
    return ended


def _granted(sandbox: Sandbox, node: str) -> bool:
    with sandbox.store.read() as tx:
        gate = tx.mig_layouts.of_nodes([node]).get(node)
    return gate is not None and gate.state == gate_rules.GRANTED


def _act(
    sandbox: Sandbox, t: _Tracked, kind: int, step: int, now: datetime, gradients: ReplayedDemand
) -> None:
    ask = t.ask
    try:
        if kind == _ASK and isinstance(ask, WorkloadAsk):
            body: dict[str, Any] = {
                "tenantId": ask.tenant,
                "name": ask.name,
                "shape": dict(ask.shape),
                "replicas": ask.replicas,
            }
            if ask.priority_class is not None:
                body["priorityClass"] = ask.priority_class
            t.scratch_id = workloads.create(sandbox, REPLAYER, body, now).id
        elif kind == _ASK and isinstance(ask, ReservationAsk):
            start = ask.start if ask.start is not None and ask.start > now else now
            asked: dict[str, Any] = {
                "tenantId": ask.tenant,
                "poolId": ask.pool,
                "devices": [dict(d) for d in ask.devices],
                "start": start.isoformat(),
                "duration": f"{max(1, int((ask.end - start).total_seconds()))}s",
                "preemptible": ask.preemptible,
            }
            view = reservations.create(
                sandbox.store,
                sandbox.index,
                REPLAYER,
                asked,
                now,
                sandbox.ids.reservation,
                gradients=gradients,
            )
            t.scratch_id = view.id
        elif kind == _ASK and isinstance(ask, EndpointAsk):
            t.scratch_id = endpoints.create(sandbox.store, REPLAYER, ask.body(), now).record.name
        elif t.scratch_id is None:
            return  # refused when asked: nothing to scale, delete or release
        elif kind == _SCALE and isinstance(ask, WorkloadAsk):
            workloads.scale(sandbox, REPLAYER, t.scratch_id, ask.scales[step][1], now)
        elif kind == _DRAIN and isinstance(ask, WorkloadAsk):
            _, cluster, force = ask.drains[step]
            workloads.drain(sandbox, REPLAYER, t.scratch_id, cluster, now, force=force)
        elif kind == _DELETE and isinstance(ask, EndpointAsk):
            endpoints.delete(sandbox.store, REPLAYER, t.scratch_id, now)
        elif kind == _DELETE:
            workloads.delete(sandbox, REPLAYER, t.scratch_id, now)
        elif kind == _RELEASE and isinstance(ask, ReservationAsk):
            _end_reservation(sandbox, t.scratch_id, now)
    except DomainError as exc:
        if kind == _ASK:
            t.refused_reason = exc.code.lower()
        # a later step of a request the replay already made (a scale refused, a drain refused for
        # stranding replicas it was not forced to, a reservation already ended by preemption)
        # changes nothing: the request keeps what it had


def _end_reservation(sandbox: Sandbox, reservation_id: str, now: datetime) -> None:
    with sandbox.store.read() as tx:
        found = tx.reservations.get(reservation_id)
    if found is None or (found.ends_at is not None and found.ends_at <= now):
        return  # gone already: preempted, or ended
    if found.starts_at > now:
        reservations.cancel(sandbox.store, REPLAYER, reservation_id, now)
    elif found.ends_at is None or found.ends_at > now:
        reservations.release(sandbox.store, REPLAYER, reservation_id, now)


# -- The deployment's own history ---------------------------------------------------------------


@dataclass(frozen=True)
class History:
    """The demand a deployment's event log and ledger hold for a window, with the id each request
    had there (to measure what happened to it in the same way as in a replay)."""

    demand: Demand
    ids: tuple[str, ...]


def history(store: StorePort[OpsTx], window: Window) -> History:
    """The requests made within `window`: each workload created (its device class, count, replicas
    and priority class, its scale steps, its drains and its deletion), each reservation admitted
    (its pool, device lines, window and preemptibility, and its release or cancellation) and each
    endpoint created (its variants, from `endpoint.created`, and its deletion), in log order.

    A reservation refused at admission left nothing in the log, so it is not in the history; an
    endpoint logged before `endpoint.created` carried its request is not either
    (docs/replay.md#what-a-replay-leaves-out)."""
    asks: dict[str, Ask] = {}
    order: list[str] = []
    ids: dict[str, str] = {}
    scales: dict[str, list[tuple[datetime, int]]] = defaultdict(list)
    drains: dict[str, list[tuple[datetime, str, bool]]] = defaultdict(list)
    ended: dict[str, datetime] = {}
    open_endpoints: dict[str, str] = {}  # an endpoint's name -> the key of its ask not yet deleted
    types = (
        WorkloadCreated,
        WorkloadScaled,
        WorkloadDrained,
        WorkloadDeleted,
        ReservationCreated,
        ReservationReleased,
        ReservationCancelled,
        EndpointCreated,
        EndpointDeleted,
    )
    reservation_ends: dict[str, datetime | None] = {}
    for at, event in events_of(store, types, window):
        if at >= window.until:
            continue
        if isinstance(event, WorkloadCreated):
            asks[event.subject] = WorkloadAsk(
                event.subject,
                at,
                event.tenant_id,
                event.name,
                {"deviceClass": event.device_class, "deviceCount": event.device_count},
                event.replicas,
                event.priority_class,
            )
            order.append(event.subject)
        elif isinstance(event, WorkloadScaled) and event.subject in asks:
            scales[event.subject].append((at, event.replicas))
        elif isinstance(event, WorkloadDrained) and event.subject in asks:
            drains[event.subject].append((at, event.cluster_id, event.force))
        elif isinstance(event, EndpointCreated):
            variants = event.spec.get("variants")
            if not isinstance(variants, list) or not variants:
                continue  # logged before the event carried the endpoint's request
            key = f"endpoint:{event.subject}"
            if key in asks:  # a name used again after its deletion
                key = f"{key}#{len(order) + 1}"
            kept = tuple(dict(v) for v in variants if isinstance(v, Mapping))
            asks[key] = EndpointAsk(key, at, event.tenant_id, event.subject, kept)
            ids[key] = event.subject
            open_endpoints[event.subject] = key
            order.append(key)
        elif isinstance(event, EndpointDeleted):
            key = open_endpoints.pop(event.subject, "")
            if key:
                ended[key] = at
        elif isinstance(event, WorkloadDeleted | ReservationReleased | ReservationCancelled):
            ended.setdefault(event.subject, at)
        elif isinstance(event, ReservationCreated):
            reservation_ends[event.subject] = event.ends_at
            order.append(event.subject)
    with store.read() as tx:
        for rid, end in reservation_ends.items():
            r = tx.reservations.get(rid)
            if r is None:
                continue
            asks[rid] = ReservationAsk(
                rid,
                r.created_at,
                r.tenant_id,
                r.pool_id,
                tuple(dict(d) for d in r.devices),
                end or r.ends_at or window.until,
                r.starts_at,
                r.preemptible,
            )
    demand: list[Ask] = []
    made: list[str] = []
    for key in order:
        ask = asks.get(key)
        if ask is None:
            continue
        if isinstance(ask, WorkloadAsk):
            ask = replace(ask, scales=tuple(scales[key]), drains=tuple(drains[key]), until=ended.get(key))
        elif isinstance(ask, EndpointAsk):
            ask = replace(ask, until=ended.get(key))
        else:
            ask = replace(ask, release=ended.get(key))
        demand.append(ask)
        made.append(ids.get(key, key))
    check_size(demand)
    return History(Demand(tuple(demand)), tuple(made))


def recorded(store: StorePort[OpsTx], past: History, window: Window, *, name: str = "recorded") -> Run:
    """What happened to the history's requests in the deployment itself, measured as a replay is."""
    began = time.perf_counter()
    outcomes = measure(store, [(a, i, None) for a, i in zip(past.demand.asks, past.ids, strict=True)], window)
    return _run(name, outcomes, _costs(store, {o.tenant for o in outcomes}, window), began)


# -- Measuring -----------------------------------------------------------------------------------


def events_of(
    store: StorePort[OpsTx], types: Sequence[type[Event]], window: Window
) -> Iterator[tuple[datetime, Event]]:
    """Every event of `types` logged at or after the window's start, in log order (the admin's
    view of the events stream)."""
    reader = Reader(None, frozenset())
    wanted = tuple(types)
    after: LogPosition | None = None
    while True:
        with store.read() as tx:
            page = tx.events.stream(reader, after, PAGE, None, None, window.since)
        for streamed in page:
            if isinstance(streamed.event, wanted) and streamed.at <= window.until:
                yield streamed.at, streamed.event
        if len(page) < PAGE:
            return
        with store.read() as tx:
            after = tx.events.position(page[-1].id)


def measure(
    store: StorePort[OpsTx],
    asks: Sequence[tuple[Ask, str | None, str | None]],
    window: Window,
    *,
    shares: _Shares | None = None,
) -> list[Outcome]:
    """Each request's outcome in `store`, from its log and ledger: `asks` pairs each request with
    the id it got there (None: refused outright, with the reason given); `shares`, the fleet's
    atoms' shares when the caller knows them as they are now."""
    shares = shares if shares is not None else _Shares(store)
    workload_ids = {sid: a for a, sid, _ in asks if isinstance(a, WorkloadAsk) and sid is not None}
    booked: dict[str, dict[str, list[tuple[datetime, int]]]] = defaultdict(lambda: defaultdict(list))
    wanted: dict[str, list[tuple[datetime, int]]] = defaultdict(list)
    reason: dict[str, str | None] = {}
    preempted: dict[str, int] = defaultdict(int)
    classes: dict[str, tuple[str, int]] = {}
    types = (
        WorkloadCreated,
        WorkloadScaled,
        WorkloadDeleted,
        DeploymentUpdated,
        WorkloadDecided,
        WorkloadPreempted,
        ReservationPreempted,
        EndpointCreated,
        EndpointUpdated,
    )
    endpoint_names = {sid for a, sid, _ in asks if isinstance(a, EndpointAsk) and sid is not None}
    took: dict[str, list[tuple[datetime, tuple[str, ...]]]] = defaultdict(list)
    for at, event in events_of(store, types, window):
        if isinstance(event, EndpointCreated | EndpointUpdated):
            if event.subject in endpoint_names and event.nodes:
                took[event.subject].append((at, event.nodes))
        elif isinstance(event, WorkloadCreated) and event.subject in workload_ids:
            wanted[event.subject].append((at, event.replicas))
            classes[event.subject] = (event.device_class, event.device_count)
        elif isinstance(event, WorkloadScaled) and event.subject in workload_ids:
            wanted[event.subject].append((at, event.replicas))
        elif isinstance(event, WorkloadDeleted) and event.subject in workload_ids:
            wanted[event.subject].append((at, 0))
        elif isinstance(event, DeploymentUpdated) and event.workload_id in workload_ids:
            booked[event.workload_id][event.subject].append((at, event.booked_replicas))
        elif isinstance(event, WorkloadDecided) and event.subject in workload_ids:
            reason[event.subject] = event.reason if event.unplaced > 0 else reason.get(event.subject)
        elif isinstance(event, WorkloadPreempted):
            preempted[event.subject] += len(event.allocations)
        elif isinstance(event, ReservationPreempted):
            preempted[event.subject] += 1
    outcomes: list[Outcome] = []
    with store.read() as tx:
        recorded = {
            sid: tx.reservations.get(sid)
            for a, sid, _ in asks
            if isinstance(a, ReservationAsk) and sid is not None
        }
        device_classes = {d.name: d for d in tx.device_classes.all()}
    gpus, per_pool = _gpus_of_nodes(
        store, {p for a, _, _ in asks if isinstance(a, EndpointAsk) for p in a.pools()}
    )
    for ask, sid, refused in asks:
        if isinstance(ask, EndpointAsk):
            share = _per_instance(ask, per_pool)
            outcomes.append(
                _endpoint_outcome(ask, took.get(sid or "", []), gpus, share, window)
                if sid is not None
                else _refused(ask, refused, share, window)
            )
            continue
        if isinstance(ask, WorkloadAsk):
            cls, count = classes.get(sid or "", (str(ask.shape.get("deviceClass", "")), 1))
            dc = device_classes.get(cls)
            share = (shares.of(dc.cls, dc.selector) if dc is not None else 1.0) * count
            outcomes.append(
                _workload_outcome(ask, sid, refused, wanted[sid or ""], booked[sid or ""], share, window)
                if sid is not None
                else _refused(ask, refused, share, window)
            )
            if sid is not None:
                outcomes[-1] = replace(
                    outcomes[-1],
                    preempted=preempted.get(sid, 0),
                    refused_reason=outcomes[-1].refused_reason
                    and (reason.get(sid) or outcomes[-1].refused_reason),
                )
        else:
            share = sum(shares.of_line(d) * _count_of(d) for d in ask.devices)
            r = recorded.get(sid or "")
            if r is None:
                outcomes.append(_refused(ask, refused, share, window))
                continue
            end = min(r.ends_at or window.until, window.until)
            hours = max(0.0, (end - max(r.starts_at, window.since)).total_seconds() / 3600)
            with store.read() as tx:
                held = shares.held(tx.ledger.allocation_bookings(r.id))
            outcomes.append(
                Outcome(
                    ask.key,
                    ask.tenant,
                    granted_hours=round(hours * (held or share), 6),
                    wait_s=0.0,
                    preempted=preempted.get(r.id, 0),
                )
            )
    return outcomes


def _refused(ask: Ask, reason: str | None, share: float, window: Window) -> Outcome:
    if isinstance(ask, EndpointAsk):
        end = min(ask.until or window.until, window.until)
        units = ask.instances()
    elif isinstance(ask, WorkloadAsk):
        end = min(ask.until or window.until, window.until)
        units = ask.replicas
    else:
        end = min(ask.end, window.until)
        units = 1
    hours = max(
        0.0,
        (
            end - max(ask.start if isinstance(ask, ReservationAsk) and ask.start else ask.at, window.since)
        ).total_seconds()
        / 3600,
    )
    return Outcome(
        ask.key,
        ask.tenant,
        refused_hours=round(hours * share * units, 6),
        refused_reason=reason or "refused",
        refused=True,
    )


def _endpoint_outcome(
    ask: EndpointAsk,
    took: Sequence[tuple[datetime, tuple[str, ...]]],
    gpus: Mapping[str, int],
    per_instance: float,
    window: Window,
) -> Outcome:
    """An endpoint's outcome: it asked for its variants' instances from its ask until its deletion,
    and held each node it took (`endpoint.created` or `endpoint.updated` naming its `nodes`) from
    that moment until its deletion: the node is the endpoint's from the start of its cut, whatever
    minutes its daemon takes to repartition it, so a history and its replay count the same. Its
    GPU-hours are each node's GPUs (`gpus`) while held; it waited until it held all its instances;
    what it was short is refused as `insufficient_capacity`, each instance `per_instance` GPUs."""
    end = min(ask.until or window.until, window.until)
    first: dict[str, datetime] = {}
    for at, nodes in took:
        if ask.at <= at < end:
            for node in nodes:
                first.setdefault(node, at)
    since = max(ask.at, window.since)
    granted = sum(
        gpus.get(node, 0) * max(0.0, (end - max(at, since)).total_seconds()) / 3600
        for node, at in first.items()
    )
    wanted = ask.instances()
    starts = sorted(first.values())
    short = 0.0
    last, held = since, 0
    for at in [*starts, end]:
        moment = min(max(at, since), end)
        short += max(0, wanted - held) * (moment - last).total_seconds() / 3600
        last, held = moment, held + 1
    waited = (starts[wanted - 1] - ask.at).total_seconds() if len(starts) >= wanted else None
    return Outcome(
        ask.key,
        ask.tenant,
        granted_hours=round(granted, 6),
        refused_hours=round(short * per_instance, 6),
        refused_reason="insufficient_capacity" if short > 0 else None,
        wait_s=(window.until - ask.at).total_seconds() if waited is None else waited,
        refused=not starts,
    )


def _gpus_of_nodes(store: StorePort[OpsTx], pools: set[str]) -> tuple[dict[str, int], dict[str, float]]:
    """The GPUs of each node of `pools` (what an endpoint's instance there holds), and each pool's
    mean per node (what an instance never held would have)."""
    if not pools:
        return {}, {}
    with store.read() as tx:
        members = tx.pools.members(sorted(pools))
        nodes = sorted({n for found in members.values() for n in found})
        counts = Counter(g.node_id for g in tx.gpus.of_nodes(nodes) if g.present) if nodes else Counter()
    means = {p: _mean([float(counts[n]) for n in found]) or 0.0 for p, found in members.items()}
    return dict(counts), means


def _per_instance(ask: EndpointAsk, per_pool: Mapping[str, float]) -> float:
    """The GPUs one of the endpoint's instances has, on average over its variants' counts: its
    pool's mean per node (1 when the pool has none)."""
    weighted = [
        (per_pool.get(str(v.get("poolId")), 0.0), n)
        for v in ask.variants
        if isinstance(n := v.get("instanceCount"), int) and n > 0
    ]
    total = sum(n for _, n in weighted)
    return (sum(g * n for g, n in weighted) / total if total else 0.0) or 1.0


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _workload_outcome(
    ask: WorkloadAsk | EndpointAsk,
    sid: str,
    refused: str | None,
    wanted: list[tuple[datetime, int]],
    booked: Mapping[str, list[tuple[datetime, int]]],
    share: float,
    window: Window,
) -> Outcome:
    """Integrate the workload's booked and wanted replicas over the window; its wait is from its
    ask until it first held all it asked."""
    changes: list[tuple[datetime, str, int]] = [(at, "", n) for at, n in wanted]
    for dep, points in booked.items():
        changes.extend((at, dep, n) for at, n in points)
    changes.sort(key=lambda c: c[0])
    want = 0
    held: dict[str, int] = {}
    granted = short = 0.0
    waited: float | None = None
    last = ask.at
    for at, dep, n in [*changes, (window.until, "", -1)]:
        span = (min(at, window.until) - last).total_seconds() / 3600
        have = sum(held.values())
        if span > 0:
            granted += min(have, want) * span
            short += max(0, want - have) * span
        last = max(last, min(at, window.until))
        if at >= window.until:
            break
        if dep == "":
            want = n
        else:
            held[dep] = n
        if waited is None and want > 0 and sum(held.values()) >= want:
            waited = (at - ask.at).total_seconds()
    never = waited is None
    return Outcome(
        ask.key,
        ask.tenant,
        granted_hours=round(granted * share, 6),
        refused_hours=round(short * share, 6),
        refused_reason=(refused or "waiting") if short > 0 else None,
        wait_s=(window.until - ask.at).total_seconds() if never else waited,
        refused=never and granted == 0,
    )


class _Shares:
    """The share of a GPU each atom of the fleet is, by the rule every booking bills
    (`domain.fleet.shares.share`: a whole GPU 1; a MIG instance its profile's compute slices over
    its model's, a 3g.40gb of an A100 3/7; a time-slice slot 1/n of its GPU's slots; an MPS slot its
    `mpsUnits` / 100). `of` gives a device's share as the mean over the present atoms a class and
    selector match, leaving out the nodes an endpoint holds (their layout is the endpoint's, not
    what a request of the pool finds): what turns a request's device-hours into GPU-hours."""

    def __init__(self, store: StorePort[OpsTx], present: Sequence[Atom] | None = None) -> None:
        """`present`: the fleet's atoms, all present, when the caller has just read them (at the
        replay's start, before any layout changed)."""
        with store.read() as tx:
            nodes = [n.id for n in tx.nodes.page(None, None, None)]
            serving = set(tx.endpoints.instances_of_nodes(nodes)) if nodes else set()
            if present is None:
                every = tx.atoms.of_nodes(nodes) if nodes else []
                present = [a for a in every if a.present]
            else:
                every = list(present)
        atoms = present
        # Atoms alike (a GPU's slots, a pool's instances of one profile) are read once: a selector is
        # matched against each kind of atom, not against each of a trace's 130,000 slots.
        kinds: dict[tuple[str, tuple[tuple[str, Any], ...]], list[float]] = {}
        sums: dict[str, list[float]] = defaultdict(list)
        for a in atoms:
            if a.node in serving:
                continue
            share = float(atom_share(a))
            key = (a.cls, tuple(sorted((k, v) for k, v in a.attributes.items() if k not in _UNIQUE)))
            found = kinds.setdefault(key, [share, 0.0])
            found[1] += 1
            sums[a.cls].append(share)
        self.kinds = [(cls, dict(attrs), share, n) for (cls, attrs), (share, n) in kinds.items()]
        # every atom, gone ones included: what a booking held
        self.atom = {a.id: (a.cls, float(atom_share(a))) for a in every}
        self.by_class = {cls: sum(v) / len(v) for cls, v in sums.items()} | {"gpu": 1.0}
        self._of: dict[tuple[str, str], float] = {}

    def of(self, cls: str, selector: Selector | None = None) -> float:
        if selector is None or not selector.match_expressions:
            return self.by_class.get(cls, 1.0)
        key = (cls, repr(selector))
        known = self._of.get(key)
        if known is None:
            matched = [
                (share, n) for c, attrs, share, n in self.kinds if c == cls and selector.matches(attrs)
            ]
            count = sum(n for _, n in matched)
            if count:
                known = sum(share * n for share, n in matched) / count
            else:  # no such device in the fleet: a MIG profile's share on the fleet's models, if named
                known = self._named_profile(selector) or self.by_class.get(cls, 1.0)
            self._of[key] = known
        return known

    def _named_profile(self, selector: Selector) -> float | None:
        """The share of the one MIG profile `selector` names (`migProfile In [p]`) on the fleet's
        GPU models that have it, averaged; None when it names none, or no model has it."""
        named = [
            e.values[0]
            for e in selector.match_expressions
            if e.key == "migProfile" and e.op == "In" and len(e.values) == 1
        ]
        if len(named) != 1:
            return None
        models = sorted({str(attrs["gpuModel"]) for _, attrs, _, _ in self.kinds if "gpuModel" in attrs})
        shares = [
            share
            for model in models
            if (share := _mig_share({"migProfile": named[0], "gpuModel": model})) is not None
        ]
        return sum(shares) / len(shares) if shares else None

    def held(self, bookings: Sequence[Booking]) -> float:
        """The share of a GPU an allocation's bookings held: each GPU whole where its `gpu` atom is
        booked, else the sum of its parts booked; 0.0 when none is known."""
        parts: dict[str, float] = defaultdict(float)
        whole: set[str] = set()
        for atom_id, gpu in {b.atom_id: b.gpu_id for b in bookings}.items():
            found = self.atom.get(atom_id)
            if found is None:
                continue
            cls, share = found
            if cls == "gpu":
                whole.add(gpu)
            else:
                parts[gpu] += share
        return len(whole) + sum(share for gpu, share in parts.items() if gpu not in whole)

    def of_line(self, line: Mapping[str, Any]) -> float:
        """One device of a reservation's device line (its class and selector)."""
        try:
            selector = parse_selector(line.get("selector"))
        except DomainError:
            selector = None
        return self.of(str(line.get("class", "gpu")), selector)


_UNIQUE = frozenset({"migUuid", "uuid", "giId", "ciId", "slot", "slotIndex", "placementStart"})
"""Attributes that name one atom alone: left out when atoms alike are grouped (`_Shares`)."""


def _count_of(line: Mapping[str, Any]) -> int:
    """A device line's count as asked (1 when it is none: a line refused for it asked for one)."""
    count = line.get("count", 1)
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1


def _mig_share(attributes: Mapping[str, Any]) -> float | None:
    """A MIG instance of `attributes` (`migProfile`, `gpuModel`) as a share of its GPU, by the
    billing rule; None when the catalog does not know the model or the profile."""
    profile, model_id = attributes.get("migProfile"), attributes.get("gpuModel")
    model = find_model(model_id) if isinstance(model_id, str) else None
    if model is None or not isinstance(profile, str) or not any(p.name == profile for p in model.profiles):
        return None
    return float(share_of_kind("gpu.mig", {"migProfile": profile, "gpuModel": model.id}))


def _costs(
    store: StorePort[OpsTx], tenants: set[str], window: Window
) -> dict[str, tuple[Decimal, str] | None]:
    out: dict[str, tuple[Decimal, str] | None] = {}
    for tenant in sorted(tenants):
        try:
            bill = bills.get_bill(
                store,
                REPLAYER,
                tenant,
                since=window.since.isoformat(),
                until=window.until.isoformat(),
                now=window.until,
            )
        except NotFound:
            out[tenant] = None
            continue
        currencies = {line.currency for line in bill.lines if line.currency is not None}
        out[tenant] = (
            (bill.total, currencies.pop()) if bill.total is not None and len(currencies) == 1 else None
        )
    return out


def _sum_costs(costs: Sequence[tuple[Decimal, str] | None]) -> tuple[Decimal, str] | None:
    known = [c for c in costs if c is not None]
    if not known or len({c[1] for c in known}) != 1:
        return None
    return sum((c[0] for c in known), Decimal(0)), known[0][1]


def _with_cost(f: Figures, cost: tuple[Decimal, str] | None) -> Figures:
    return f if cost is None else replace(f, cost=str(cost[0]), currency=cost[1])


MAX_RUNNING = 2
"""The most replays one server process runs at once: each holds a request thread (and a CPU) for up
to minutes, and a third would make the API's other requests wait for threads."""

_running = threading.BoundedSemaphore(MAX_RUNNING)


@contextmanager
def _one_of_the_running() -> Iterator[None]:
    """Hold one of the process's MAX_RUNNING replay places for the block, or refuse at once."""
    if not _running.acquire(blocking=False):
        raise InvalidState(
            f"{MAX_RUNNING} replays are running on this server already; send this one again when one ends",
            {"reason": "replays_running", "limit": MAX_RUNNING},
        )
    try:
        yield
    finally:
        _running.release()


def replay(
    store: StorePort[OpsTx],
    scratch: Scratch,
    principal: Principal,
    *,
    since: datetime,
    until: datetime,
    demand: object = None,
    fleet: object = None,
    policy: object = None,
    against: object = None,
    fleet_changes: object = None,
) -> Report:
    """`replay.run` (admin): replay `demand` (None: this deployment's own history in the window)
    over `fleet` (None: today's) under today's policy set with `policy`'s changes, and, when
    `against` is given, again with its changes instead; `fleet_changes` (nodes, pools, clusters)
    are laid over the fleet before both runs. The deployment's store is only read. At most
    MAX_RUNNING replays run at once in a process; another is refused (INVALID_STATE), not queued."""
    require_admin(principal, "replay.run")
    with _one_of_the_running():
        window = check_window(since, until)
        spec = today_fleet(store) if fleet is None else _fleet_file(fleet)
        spec = apply_fleet_changes(spec, parse_fleet_changes(fleet_changes))
        check_fleet_size(len(spec.nodes))
        changes = parse_policy_set(policy, "policy")
        other = None if against is None else parse_policy_set(against, "against")
        base = today(store)
        runs: list[Run] = []
        if demand is None:
            past = history(store, window)
            asked = past.demand
            runs.append(recorded(store, past, window))
        else:
            asked = parse_demand(demand)
            check_within(asked, window)
        runs.append(run(scratch, spec, base, changes, asked, window, name="policy"))
        if other is not None:
            runs.append(run(scratch, spec, base, other, asked, window, name="against"))
        return Report(window, size_of(asked.asks), tuple(runs), "history" if demand is None else "file")


def _fleet_file(raw: object) -> FleetSpec:
    if not isinstance(raw, Mapping):
        raise InvalidInput(
            "fleet must be a fleet file as an object (docs/replay.md#what-it-takes)", {"field": "fleet"}
        )
    try:
        return parse_fleet(raw)
    except DomainError as exc:
        raise type(exc)(f"fleet: {exc}", {**exc.details, "at": "fleet"}) from None


__all__ = [
    "MAX_RUNNING",
    "REPLAYER",
    "ReplayedNodes",
    "Report",
    "Run",
    "Sandbox",
    "Scratch",
    "events_of",
    "measure",
    "reconcile_at",
    "refuse_replay",
    "replay",
    "run",
    "settle",
]
