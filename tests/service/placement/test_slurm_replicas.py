"""Workload replicas on a Slurm cluster run as Slurm jobs, through the follower over the in-memory
Slurm (tests/slurm_fake.py), on SQLite and PostgreSQL: the job that holds a replica's GRES runs its
container, Slurm picks the card and the booking follows it, the deployment's phase comes from the
jobs' states with Slurm's words, an ended job is followed by a new one, and scaling down or deleting
cancels jobs while scaling up submits them (docs/slurm.md#replicas-as-jobs)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from better_compute.domain.fleet.events import ReplicaReadinessChanged
from better_compute.domain.fleet.node_reports import ReplicaReported, SignedRequest, signed_bytes
from better_compute.domain.fleet.replica_states import READY_LEASE, RuntimeState
from better_compute.domain.fleet.slurm_gres import gres_slots
from better_compute.domain.fleet.slurm_holds import hold_job_name
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.entrypoints.ids import RandomIds
from better_compute.service.fleet import clusters, joining, node_reports
from better_compute.service.gate import node_spec
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.ledger.slurm_holds import RERUN_AFTER, PassReport, follow
from better_compute.service.placement import workloads
from better_compute.service.placement.placement_stock import Stock
from better_compute.service.placement.slurm_replicas import ReplicaCommands
from better_compute.service.placement.workloads import WorkloadView
from better_compute.storage.store import Store
from tests.builders import T0
from tests.slurm_fake import FakeSlurm

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="admin")
ACCOUNT = "bc-holds"
SERVER = {"image": "localhost/llm:1", "command": ["serve"], "args": ["--port", "8080"]}
FLEET = {
    "tenants": [{"id": "acme"}],
    "deviceClasses": [
        {
            "name": "h100",
            "class": "gpu",
            "selector": {"matchExpressions": [{"key": "gpuModel", "op": "In", "values": ["H100-80GB"]}]},
        }
    ],
    "clusters": [
        {"name": "s1", "region": "r1", "nodes": [{"name": "sn", "gpus": {"model": "H100-80GB", "count": 2}}]}
    ],
    "pools": [{"name": "p1", "cluster": "s1", "mode": "exclusive", "owner": "acme", "nodes": ["sn"]}],
}


@dataclass
class World:
    store: Store
    slurm: FakeSlurm
    wiring: workloads.Wiring[Any]
    now: datetime
    key: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)
    sequence: int = 0

    def follow(self) -> PassReport:
        cluster = clusters.get(self.store, "s1")
        return follow(self.store, cluster, self.slurm, self.now, ReplicaCommands(self.store))

    def tick(self, seconds: int = 1) -> None:
        self.now += timedelta(seconds=seconds)
        self.slurm.advance(seconds)

    def create(self, replicas: int, *, container: bool = True) -> WorkloadView:
        shape: dict[str, object] = {"deviceClass": "h100", "deviceCount": 1}
        if container:
            shape["container"] = SERVER
        body = {"tenantId": "acme", "name": "llm", "shape": shape, "replicas": replicas}
        return workloads.create(self.wiring, ADMIN, body, self.now)

    def join(self) -> None:
        """`bcd` on the Slurm node joins, to report on the containers the jobs run there."""
        raw = self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        issued = joining.issue_in_process(self.store, "sn", self.now)
        joining.join(self.store, "sn", issued.token, base64.b64encode(raw).decode(), self.now)

    def report(self, allocation_id: str, state: RuntimeState) -> None:
        """A signed `ReplicaState` report of the node's `bcd`, as the report route accepts it."""
        self.sequence += 1
        at = int(self.now.timestamp())
        target, body = "/v1/nodes/sn/reports", b"{}"
        signature = self.key.sign(signed_bytes("POST", target, "sn", at, self.sequence, body))
        signed = SignedRequest("sn", at, self.sequence, signature, "POST", target, body)
        said = ReplicaReported("sn", allocation_id, state)
        node_reports.accept(self.store, signed, lambda _: said, self.now)

    def readiness_changes(self) -> int:
        with self.store.read() as tx:
            counts, _ = tx.events.count_by_type(None)
        return counts.get(ReplicaReadinessChanged.TYPE, 0)

    def view(self, workload_id: str) -> WorkloadView:
        return workloads.get(self.store, ADMIN, workload_id, self.now)

    def slots(self) -> list[str]:
        with self.store.read() as tx:
            found = gres_slots("sn", tx.gpus.of_nodes(["sn"]), tx.atoms.of_nodes(["sn"]))
        return [s.atom_id or "" for s in found]

    def atoms_of(self, allocation_id: str) -> list[str]:
        with self.store.read() as tx:
            return [b.atom_id for b in tx.ledger.allocation_bookings(allocation_id)]


@pytest.fixture
def world(store: Store) -> World:
    settings = {"controller": "ctl", "partitions": ["ours"], "account": ACCOUNT, "accounts": {}}
    clusters.create(store, ADMIN, "s1", "r1", [], "slurm", settings, T0)
    load_fleet(store, parse_fleet(FLEET), T0)
    slurm = FakeSlurm(nodes={"sn": ["h100_80gb", "h100_80gb"]}, default_account="someone")
    wiring = workloads.Wiring(store, BookingIndex(), Stock(), RandomIds())
    return World(store, slurm, wiring, T0)


def _phase(w: World, workload_id: str) -> tuple[str, str]:
    [d] = w.view(workload_id).deployments
    return d.phase, d.deployment.message


def test_a_replica_runs_its_container_as_its_slurm_job_on_the_card_slurm_picked(world: World) -> None:
    made = world.create(1)
    [allocation] = [a for d in made.deployments for a in _replicas(world, d.deployment.id)]
    [(submitted_for, job_id)] = world.follow().submitted
    assert submitted_for == allocation
    job = world.slurm.job(job_id)
    assert (job.name, job.account, job.required_nodes) == (hold_job_name(allocation), ACCOUNT, "sn")
    script = world.slurm.script(job_id)
    assert "exec podman run --rm --name bc-slurm-" + allocation in script
    assert f"--device better-compute.io/gpu={allocation}" in script and "localhost/llm:1" in script
    assert _phase(world, made.id) == ("admitted", f"Slurm job {job_id} PENDING")

    world.tick()
    world.follow()
    card = world.slots()[world.slurm.job(job_id).gres[0].indices[0]]
    assert world.atoms_of(allocation) == [card]
    # Its job runs the container, which its node has not said is ready: placed; bcd is told no
    # container to start (it would run twice), only the replica's devices and the container to watch.
    assert _phase(world, made.id) == ("placed", f"Slurm job {job_id} RUNNING")
    spec = node_spec.read(world.store, "sn", world.now).spec
    [assigned] = [a for a in spec.assignments if a.allocation_id == allocation]
    assert assigned.container is None and assigned.job_container is not None
    assert assigned.job_container.image == "localhost/llm:1"
    assert world.follow().submitted == []  # adopted, not submitted again


def test_a_replica_without_a_container_holds_and_runs_when_its_job_does(world: World) -> None:
    made = world.create(1, container=False)
    [(_, job_id)] = world.follow().submitted
    assert world.slurm.script(job_id) == "sleep infinity"
    world.tick()
    world.follow()
    assert _phase(world, made.id)[0] == "running"


def test_an_ended_replica_job_is_followed_by_a_new_one_and_its_failure_shown(world: World) -> None:
    made = world.create(1)
    [(allocation, job_id)] = world.follow().submitted
    world.tick()
    world.follow()
    world.slurm.fail(job_id)
    world.tick()
    report = world.follow()
    # The replica keeps its booking, and its failure is shown for a while before its next job.
    assert (report.ended, report.submitted) == ([], [])
    assert world.atoms_of(allocation) != []
    assert _phase(world, made.id) == ("admitted", f"Slurm job {job_id} FAILED")
    world.tick(int(RERUN_AFTER.total_seconds()) - 2)
    assert world.follow().submitted == []
    world.tick(2)
    [(again_for, again)] = world.follow().submitted
    assert again_for == allocation and again != job_id
    assert _phase(world, made.id) == ("admitted", f"Slurm job {again} PENDING")
    world.tick()
    world.follow()
    assert _phase(world, made.id) == ("placed", f"Slurm job {again} RUNNING")


def test_a_slurm_replica_is_placed_until_its_node_says_its_container_is_ready_and_back_when_not(
    world: World,
) -> None:
    """The same readiness rule and events as a replica `bcd` runs: the job RUNNING is `placed`
    until the node's `bcd`, watching the container the job runs, reports it `ready` (one
    `replica.readiness_changed`); `running` then, and `placed` again once it reports it not ready
    (another), or it is gone (the job's `--rm`), or the node falls silent past the ready lease."""
    world.join()
    made = world.create(1)
    [(allocation, job_id)] = world.follow().submitted
    world.tick()
    world.follow()
    assert _phase(world, made.id) == ("placed", f"Slurm job {job_id} RUNNING")
    before = world.readiness_changes()
    world.report(allocation, "created")
    assert _phase(world, made.id)[0] == "placed"
    world.report(allocation, "ready")
    assert _phase(world, made.id) == ("running", "")
    assert world.readiness_changes() == before + 1
    world.report(allocation, "not-ready")
    assert _phase(world, made.id) == ("placed", f"Slurm job {job_id} RUNNING")
    assert world.readiness_changes() == before + 2
    world.report(allocation, "ready")
    assert _phase(world, made.id)[0] == "running"
    world.report(allocation, "removed")
    assert _phase(world, made.id)[0] == "placed"
    assert world.readiness_changes() == before + 4
    world.report(allocation, "ready")
    world.tick(int(READY_LEASE.total_seconds()))  # the node silent since: it vouches no more
    world.follow()
    assert _phase(world, made.id)[0] == "placed"


def test_scaling_submits_and_cancels_jobs_and_delete_cancels_the_rest(world: World) -> None:
    made = world.create(1)
    [(_, first)] = world.follow().submitted
    world.tick()
    world.follow()
    workloads.scale(world.wiring, ADMIN, made.id, 2, world.now)
    [(_, second)] = world.follow().submitted
    world.tick()
    world.follow()
    assert {world.slurm.job(j).state for j in (first, second)} == {"RUNNING"}
    assert _phase(world, made.id)[0] == "placed"  # no node has said a container is ready
    workloads.scale(world.wiring, ADMIN, made.id, 1, world.now)
    cancelled = world.follow().cancelled
    assert len(cancelled) == 1 and cancelled[0] in (first, second)
    workloads.delete(world.wiring, ADMIN, made.id, world.now)
    [left] = {first, second} - set(cancelled)
    assert world.follow().cancelled == [left]
    assert world.slurm.job(left).state == "CANCELLED"


def _replicas(w: World, deployment_id: str) -> list[str]:
    with w.store.read() as tx:
        return [a for _, a in tx.workloads.replicas_of([deployment_id])[deployment_id]]
