"""End to end against the real Slurm (tests/slurm/cluster.py): a reservation of a `3g.40gb` on the
Slurm node becomes a holding job, a step run in it sees its GRES, and a job submitted directly with
`sbatch --gres=gpu:3g.40gb:1` is booked as an external hold that our admission then refuses.

The fleet's node is the Slurm node (the host's name) with one H100 cut `mixed:2x3g.40gb`: its two
MIG instances are the node's two `gpu:3g.40gb` GRES lines, index 0 and 1, as the fixture's
gres.conf lists two."""

from __future__ import annotations

import itertools
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from better_compute.domain.fleet.slurm_gres import gres_slots
from better_compute.domain.kernel.errors import AllBusy
from better_compute.domain.ledger.reservations import ReservationStatus
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import clusters
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.ledger.reservations import ReservationView
from better_compute.service.ledger.slurm_holds import PassReport, follow
from better_compute.service.tenancy import quotas
from better_compute.slurm.commands import SlurmCommands
from better_compute.storage.store import Store
from tests.slurm.cluster import Cluster

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="admin")
OWNER = Principal(tenant_id="platform", is_admin=False, credential_id="owner")
DEADLINE = 20.0
MIG = [
    {
        "class": "gpu.mig",
        "count": 1,
        "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]},
    }
]


@dataclass
class Fleet:
    store: Store
    slurm: SlurmCommands
    cluster: Cluster
    index: BookingIndex
    ids: Iterator[str]

    def reserve(self) -> ReservationView:
        body = {"poolId": "p1", "devices": MIG, "duration": "1h"}
        return reservations.create(self.store, self.index, OWNER, body, _now(), lambda: next(self.ids))

    def follow(self) -> PassReport:
        return follow(self.store, clusters.get(self.store, "s1"), self.slurm, _now())

    def until(self, what: str, done: Callable[[PassReport], bool]) -> PassReport:
        deadline = time.monotonic() + DEADLINE
        while True:
            report = self.follow()
            if done(report):
                return report
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} in {DEADLINE}s: {report}\n{self.cluster.logs()}")
            time.sleep(0.2)

    def slots(self) -> list[str]:
        node = self.cluster.node
        with self.store.read() as tx:
            return [
                s.atom_id or "" for s in gres_slots(node, tx.gpus.of_nodes([node]), tx.atoms.of_nodes([node]))
            ]

    def run(self, *arguments: str) -> str:
        done = subprocess.run(
            list(arguments), env=self.cluster.env, capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0, f"{arguments}: {done.stderr}"
        return done.stdout


def _now() -> datetime:
    return datetime.now(UTC)


@pytest.fixture
def fleet(store: Store, slurm_cluster: Cluster, slurm: SlurmCommands) -> Iterator[Fleet]:
    # The fixture's slurmdbd knows no account of ours: Slurm runs every job of root under `root`.
    settings = {"controller": "localhost", "partitions": [slurm_cluster.partition], "account": "root"}
    clusters.create(store, ADMIN, "s1", "r1", [], "slurm", settings, _now())
    spec = {
        "tenants": [{"id": "platform"}],
        "clusters": [
            {
                "name": "s1",
                "region": "r1",
                "nodes": [{"name": slurm_cluster.node, "gpus": {"model": "H100-80GB", "count": 1}}],
            }
        ],
        "pools": [
            {
                "name": "p1",
                "cluster": "s1",
                "mode": "mig",
                "owner": "platform",
                "policy": {"migLayout": "mixed:2x3g.40gb"},
                "nodes": [slurm_cluster.node],
            }
        ],
    }
    load_fleet(store, parse_fleet(spec), _now() - timedelta(minutes=1))
    quotas.set_quota(store, ADMIN, "platform", "p1", "gpu.mig", 8, _now())
    # Ids new to this Slurm: a job of an earlier test stays known to slurmctld for MinJobAge.
    run = uuid.uuid4().hex[:8]
    made = Fleet(store, slurm, slurm_cluster, BookingIndex(), (f"rsv-{run}-{n}" for n in itertools.count(1)))
    yield made
    subprocess.run(["scancel", f"--partition={slurm_cluster.partition}"], env=slurm_cluster.env, check=False)
    deadline = time.monotonic() + DEADLINE
    while slurm.jobs([slurm_cluster.partition]) and any(
        not j.finished for j in slurm.jobs([slurm_cluster.partition])
    ):
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)


def test_a_reservation_on_the_slurm_node_is_a_holding_job_whose_step_sees_its_gres(fleet: Fleet) -> None:
    made = fleet.reserve()
    [(allocation, job_id)] = fleet.follow().submitted
    assert allocation == made.id
    fleet.until("running holding job", lambda _: fleet.slurm.job(job_id).state == "RUNNING")
    fleet.follow()
    shown = reservations.get(fleet.store, OWNER, made.id, _now())
    assert shown.status == ReservationStatus.ACTIVE
    [index] = fleet.slurm.job(job_id).gres[0].indices
    assert [a.id for a in shown.atoms] == [fleet.slots()[index]]  # bound to the card Slurm gave
    step = fleet.run("srun", f"--jobid={job_id}", "--overlap", "env")
    seen = dict(line.split("=", 1) for line in step.splitlines() if "=" in line)
    gres_env = {k: v for k, v in seen.items() if "GPU" in k or "CUDA" in k}
    print(f"holding job {job_id} on GRES index {index}; its step sees {gres_env}")
    # Slurm's index of the card (with AutoDetect=off, not a MIG uuid: docs/slurm.md), and the one
    # device the step may use.
    assert (seen.get("SLURM_STEP_GPUS"), seen.get("CUDA_VISIBLE_DEVICES")) == (str(index), "0")
    reservations.release(fleet.store, OWNER, made.id, _now())
    assert fleet.follow().cancelled == [job_id]
    fleet.until("cancelled holding job", lambda _: fleet.slurm.job(job_id).finished)


def test_a_job_submitted_directly_is_booked_and_admission_refuses_its_card(fleet: Fleet) -> None:
    direct = int(
        fleet.run("sbatch", "--parsable", "--gres=gpu:3g.40gb:1", "--output=/dev/null", "--wrap", "sleep 120")
        .strip()
        .split(";")[0]
    )
    report = fleet.until("external hold", lambda r: bool(r.booked_external))
    assert report.booked_external == [f"slurm:s1:{direct}"]
    [index] = fleet.slurm.job(direct).gres[0].indices
    with fleet.store.read() as tx:
        [booking] = tx.ledger.allocation_bookings(f"slurm:s1:{direct}")
    assert (booking.atom_id, booking.tenant_id) == (fleet.slots()[index], "external")
    ours = fleet.reserve()  # the other card
    assert [a.id for a in ours.atoms] == [fleet.slots()[1 - index]]
    with pytest.raises(AllBusy):
        fleet.reserve()  # both cards held: ours and the direct job's
    fleet.run("scancel", str(direct))
    fleet.until("external hold ended", lambda r: r.ended_external == [f"slurm:s1:{direct}"])


def test_a_direct_job_running_before_it_is_read_back_keeps_its_card_and_ours_takes_the_other(
    fleet: Fleet,
) -> None:
    """ADR 0015's second race window on the real Slurm: admission counts the direct job's card as
    free for a moment; the follower then books the direct job's card and moves our pending booking
    off it, and our holding job runs on the other card."""
    direct = int(
        fleet.run("sbatch", "--parsable", "--gres=gpu:3g.40gb:1", "--output=/dev/null", "--wrap", "sleep 120")
        .strip()
        .split(";")[0]
    )
    deadline = time.monotonic() + DEADLINE
    while fleet.slurm.job(direct).state != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.1)
    [direct_index] = fleet.slurm.job(direct).gres[0].indices
    made = fleet.reserve()  # the ledger does not know the direct job yet
    fleet.until(
        "both mirrored",
        lambda r: (
            any(
                j.state == "RUNNING"
                for j in fleet.slurm.jobs([fleet.cluster.partition])
                if j.job_id != direct
            )
            and not r.rebound
            and not r.submitted
        ),
    )
    slots = fleet.slots()
    with fleet.store.read() as tx:
        held = {b.atom_id: b.allocation_id for b in tx.ledger.live_on(slots, _now())}
    assert held == {slots[direct_index]: f"slurm:s1:{direct}", slots[1 - direct_index]: made.id}
    ours = next(j for j in fleet.slurm.jobs([fleet.cluster.partition]) if j.name == f"bc.{made.id}")
    assert ours.state == "RUNNING" and ours.gres[0].indices == (1 - direct_index,)
