"""A fleet whose Slurm cluster is the real Slurm of tests/slurm/cluster.py, for the end-to-end tests.

The fleet's node is the Slurm node (the host's name) with one H100 cut `mixed:2x3g.40gb`: its two
MIG instances are the node's two `gpu:3g.40gb` GRES lines, index 0 and 1, as the fixture's
gres.conf lists two. `fleet` (tests/slurm/conftest.py) makes one per test, with reservation ids new
to this Slurm, and cancels every job of the partition afterwards."""

from __future__ import annotations

import itertools
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from better_compute.domain.fleet.slurm_gres import gres_slots
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
        return reservations.create(self.store, self.index, OWNER, body, now_utc(), lambda: next(self.ids))

    def follow(self) -> PassReport:
        return follow(self.store, clusters.get(self.store, "s1"), self.slurm, now_utc())

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


def now_utc() -> datetime:
    return datetime.now(UTC)


def make_fleet(store: Store, slurm_cluster: Cluster, slurm: SlurmCommands) -> Iterator[Fleet]:
    # The fixture's slurmdbd knows no account of ours: Slurm runs every job of root under `root`.
    settings = {"controller": "localhost", "partitions": [slurm_cluster.partition], "account": "root"}
    clusters.create(store, ADMIN, "s1", "r1", [], "slurm", settings, now_utc())
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
    load_fleet(store, parse_fleet(spec), now_utc() - timedelta(minutes=1))
    quotas.set_quota(store, ADMIN, "platform", "p1", "gpu.mig", 8, now_utc())
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
