"""Tests against a real Slurm on localhost (tests/slurm/cluster.py), all in the suite's serial group.

Without the Slurm binaries or MariaDB the tests skip and say which is missing; under CI (`CI=true`,
as `.ci/run` sets, and it installs the packages) they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from better_compute.slurm.commands import SlurmCommands
from better_compute.storage.store import Store
from tests.conftest import mark_serial
from tests.slurm.cluster import Cluster, mariadb_problem, missing_binaries, start_cluster
from tests.slurm.fleet import Fleet, make_fleet

_DIR = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here starts or uses real daemons: the serial group."""
    mark_serial(items, _DIR)


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail(f"Slurm tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="package")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A single-node Slurm with two fake `gpu:3g.40gb` devices, stopped by pid once tests/slurm is done.

    One cluster for every module that takes it as it is (starting and stopping one takes about 7 s):
    each test leaves it as it found it, its jobs cancelled and finished and its Slurm reservations
    deleted, and names its jobs and reservation ids afresh where earlier ones (which slurmctld keeps
    for MinJobAge) could be mistaken for its own. A module that changes the cluster's configuration,
    or wants another shape, overrides `slurm_cluster` with a module-scoped one of its own
    (`running_cluster`)."""
    yield from running_cluster(tmp_path_factory)


def running_cluster(tmp_path_factory: pytest.TempPathFactory, *, shards: int = 0) -> Iterator[Cluster]:
    """Start a cluster (or skip, or fail under CI, saying what is missing), yield it, stop it by pid;
    a module wanting another shape, or changing the cluster, overrides `slurm_cluster` with this."""
    missing = missing_binaries()
    if missing:
        _unavailable(
            f"Slurm is not installed ({', '.join(missing)} missing; Debian: "
            "slurmctld slurmd slurmdbd slurm-client munge mariadb-client)"
        )
    if os.geteuid() != 0:
        _unavailable("starting slurmd and making device files with mknod need root")
    problem = mariadb_problem()
    if problem:
        _unavailable(f"slurmdbd needs MariaDB: {problem}")
    cluster = start_cluster(tmp_path_factory.mktemp("slurm"), shards=shards)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: Cluster) -> SlurmCommands:
    """The adapter, pointed at the test cluster through SLURM_CONF."""
    return SlurmCommands(env=slurm_cluster.env)


@pytest.fixture
def fleet(store: Store, slurm_cluster: Cluster, slurm: SlurmCommands) -> Iterator[Fleet]:
    """A fleet whose Slurm cluster `s1` is the test Slurm (tests/slurm/fleet.py)."""
    yield from make_fleet(store, slurm_cluster, slurm)
