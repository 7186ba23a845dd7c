"""`doctor.run` (admin): read the fleet once, ask `domain.ops.doctor` what needs an operator, and log
the run (`doctor.run`, with its counts by code)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from better_compute.domain.endpoints.endpoints import copy_of
from better_compute.domain.gate.records import MigLayoutGate
from better_compute.domain.ops.doctor import (
    DEFAULT_MIG_WAITING_DAYS,
    STUCK_AFTER,
    EndpointFacts,
    Finding,
    FleetFacts,
    GateHolder,
    ReplicaProblem,
    counts,
    diagnose,
    mig_waiting_nodes,
)
from better_compute.domain.ops.events import DoctorRun
from better_compute.domain.tenancy.credentials import Principal, require_admin
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ops.ports import OpsTx

MAX_OVERLAPS = 100
"""The most overlapping pairs the ledger self-check reports (there should be none at all)."""

MAX_TERMINATING = 1000
"""The most stuck terminating replicas one run reports (oldest first)."""

MAX_WAITING_NODES = 1000
"""The most gated nodes whose holders one run reads for `capacity.mig.waiting` (oldest request
first): a run costs the same on a pool of any size."""
MAX_STRANDED = 1000
"""The most stranded bookings one run reads (in booking order; one finding per allocation)."""


MAX_PROBLEMS = 1000
"""The most containers that do not run one run reports (`replica.*`, oldest report first)."""

MAX_ENDPOINTS = 1000
"""The most `Failed` or `Updating` endpoints one run looks at for `endpoint.waiting` (oldest
first), and the most being cut."""

_CHUNK = 500
"""Atom ids per `live_on` query (an IN list)."""


def run(
    store: StorePort[OpsTx],
    principal: Principal,
    now: datetime,
    silent_after: timedelta,
    *,
    mig_waiting_after: timedelta = timedelta(days=DEFAULT_MIG_WAITING_DAYS),
) -> list[Finding]:
    """Every finding about the fleet at `now` (admin only), sorted; `silent_after` is how long
    without a signed report or spec read makes a joined node silent, `mig_waiting_after` how long a
    layout change may wait from its request. Appends one `doctor.run` event."""
    require_admin(principal, "doctor.run")
    with store.read() as tx:
        gates = tx.mig_layouts.all_rows()
        facts = FleetFacts(
            nodes=tx.nodes.page(None, None, None),
            gpus=tx.gpus.page(None, None, None),
            pools=tx.pools.all(),
            quotas=tx.quotas.find(None, None),
            gates=gates,
            partition_holds=tx.ledger.partition_holds(now),
            overlaps=tx.ledger.overlaps(MAX_OVERLAPS),
            family_overlaps=tx.ledger.family_overlaps(now, MAX_OVERLAPS),
            stranded=tx.ledger.stranded(now, MAX_STRANDED),
            terminating=tx.workloads.terminating_since(now - STUCK_AFTER, MAX_TERMINATING),
            gate_holders=_gate_holders(tx, gates, now, mig_waiting_after),
            endpoints=_endpoints(tx, gates),
            replica_problems=_replica_problems(tx),
        )
    findings = diagnose(facts, now, silent_after, mig_waiting_after=mig_waiting_after)
    with store.begin() as tx:
        tx.events.append(DoctorRun("fleet", findings=len(findings), counts=counts(findings)), now)
    return findings


def _replica_problems(tx: OpsTx) -> list[ReplicaProblem]:
    """The containers nodes say do not run (at most `MAX_PROBLEMS`, oldest report first), each with
    the workload or endpoint it belongs to."""
    states = tx.replica_states.problems(MAX_PROBLEMS)
    owners: dict[str, str] = {
        r.allocation_id: f"workload {r.workload_id} (tenant {r.tenant_id}, cluster {r.cluster_id})"
        for r in tx.workloads.running([s.allocation_id for s in states])
    }
    for s in states:
        copy = copy_of(s.allocation_id)
        if copy is not None:
            component = tx.components.get(copy[0])
            if component is not None:
                owners[s.allocation_id] = f"endpoint {component.endpoint} component {component.name}"
    return [ReplicaProblem(s, owners.get(s.allocation_id)) for s in states]


def _gate_holders(
    tx: OpsTx, gates: Sequence[MigLayoutGate], now: datetime, after: timedelta
) -> list[GateHolder]:
    """Tenants' live bookings, now or later, on the nodes whose change may wait past `after`."""
    nodes = mig_waiting_nodes(gates, now, after)[:MAX_WAITING_NODES]
    if not nodes:
        return []
    node_of = {a.id: a.node for a in tx.atoms.of_nodes(nodes)}
    ids = sorted(node_of)
    return [
        GateHolder(node_of[b.atom_id], b.allocation_id, b.tenant_id, b.ends_at)
        for i in range(0, len(ids), _CHUNK)
        for b in tx.ledger.live_on(ids[i : i + _CHUNK], now)
        if b.tenant_id is not None
    ]


def _endpoints(tx: OpsTx, gates: Sequence[MigLayoutGate]) -> list[EndpointFacts]:
    """Endpoints that may be waiting, with their nodes: those stored `Failed` or `Updating`, and
    those with an instance under a layout change (a `Creating` one is stored so for good, and shown
    `InService` once none is: reading every one would read every endpoint ever made)."""
    found = {r.name: r for r in tx.endpoints.by_status(["Failed", "Updating"], MAX_ENDPOINTS)}
    cutting = tx.endpoints.instances_of_nodes([g.node_id for g in gates])
    for name in sorted({i.endpoint for i in cutting.values()} - set(found))[:MAX_ENDPOINTS]:
        record = tx.endpoints.get(name)
        if record is not None:
            found[name] = record
    nodes = tx.endpoints.instances_of_endpoints(sorted(found))
    return [EndpointFacts(r, tuple(i.node_id for i in nodes[n])) for n, r in sorted(found.items())]
