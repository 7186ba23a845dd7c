"""A node's GRES lines changed under a real Slurm: drained while a job holds a GRES that changes, then
rewritten, reconfigured and resumed once none does (bcd's `--slurm-gres-conf`, docs/slurm.md)."""

from __future__ import annotations

import io
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from better_compute.bcd.logs import Log
from better_compute.bcd.slurm_gres_conf import SlurmGresConf
from better_compute.domain.fleet.slurm import SlurmJob
from better_compute.domain.fleet.slurm_gres import SlurmGres
from better_compute.domain.fleet.slurm_reconfigure import DRAIN_REASON, Drain, Restart, Rewrite, Unchanged
from better_compute.service.fleet.slurm import JobRequest
from better_compute.slurm.commands import SlurmCommands
from tests.slurm.cluster import NVIDIA_MAJOR, Cluster, restart_slurm
from tests.slurm.conftest import running_cluster

DEADLINE = 20.0
POLL = 0.1


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A cluster of this module's own: its tests rewrite gres.conf and slurm.conf and restart the
    daemons, which the package's shared cluster must not see."""
    yield from running_cluster(tmp_path_factory)


def _until(check: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + DEADLINE
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL)
    return True


def _job(slurm: SlurmCommands, gres_type: str = "3g.40gb") -> int:
    return slurm.submit(
        JobRequest(name="holder", command="sleep 120", gres_name="gpu", gres_type=gres_type, gres_count=1)
    )


def _running(slurm: SlurmCommands, job_id: int) -> SlurmJob:
    assert _until(lambda: slurm.job(job_id).state == "RUNNING"), slurm.job(job_id)
    return slurm.job(job_id)


def _ended(slurm: SlurmCommands, job_id: int) -> None:
    slurm.cancel(job_id)
    assert _until(lambda: slurm.job(job_id).finished)


def _device(cluster: Cluster, index: int) -> Path:
    path = cluster.root / "dev" / f"nvidia{index}"
    if not path.exists():
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, index))
    return path


def _lines(cluster: Cluster, *devices: tuple[str, int]) -> SlurmGres:
    conf = ["AutoDetect=off"]
    counts: dict[str, int] = {}
    for type_, index in devices:
        conf.append(f"NodeName={cluster.node} Name=gpu Type={type_} File={_device(cluster, index)}")
        counts[type_] = counts.get(type_, 0) + 1
    gres = ",".join(f"gpu:{type_}:{n}" for type_, n in counts.items())
    return SlurmGres(gres_conf="\n".join(conf) + "\n", node_line=f"NodeName={cluster.node} Gres={gres}")


@pytest.fixture
def keeper(slurm_cluster: Cluster, slurm: SlurmCommands) -> SlurmGresConf:
    return SlurmGresConf(
        slurm_cluster.root / "etc" / "gres.conf", slurm_cluster.node, slurm, Log(io.StringIO())
    )


def test_a_changing_gres_held_by_a_job_drains_the_node_and_waits_then_is_rewritten_and_resumed(
    slurm_cluster: Cluster, slurm: SlurmCommands, keeper: SlurmGresConf
) -> None:
    conf = slurm_cluster.root / "etc" / "gres.conf"
    before = conf.read_text()
    first, second = _job(slurm), _job(slurm)
    held = {_running(slurm, job).gres[0].indices: job for job in (first, second)}
    assert set(held) == {(0,), (1,)}
    _ended(slurm, held[(0,)])  # the job left holds index 1, the device that changes
    holder = held[(1,)]

    wanted = _lines(slurm_cluster, ("3g.40gb", 0), ("3g.40gb", 2))  # index 1 moves to nvidia2
    steps = keeper.converge(wanted)
    assert steps == (Drain(slurm_cluster.node, f"{DRAIN_REASON}, waiting for job(s) {holder}", (holder,)),)
    node = slurm.node(slurm_cluster.node)
    assert node.drained and node.reason.startswith(DRAIN_REASON)
    assert conf.read_text() == before  # not rewritten, not reconfigured
    # A second pass while the job runs changes nothing.
    assert keeper.converge(wanted) == steps

    _ended(slurm, holder)
    steps = keeper.converge(wanted)
    assert steps == (
        Rewrite(slurm_cluster.node, wanted.gres_conf),
        Unchanged(slurm_cluster.node, resume=True),
    )
    assert conf.read_text() == wanted.gres_conf
    # slurmd registers again after the reconfigure (`IDLE+NOT_RESPONDING` a moment).
    assert _until(lambda: slurm.node(slurm_cluster.node).state == "IDLE"), slurm.node(slurm_cluster.node)
    assert slurm.node(slurm_cluster.node).gres == "gpu:3g.40gb:2"
    # And now nothing to do.
    assert keeper.converge(wanted) == (Unchanged(slurm_cluster.node),)
    # A job runs on the rewritten lines.
    job = _job(slurm)
    assert _running(slurm, job).gres[0].indices in {(0,), (1,)}
    _ended(slurm, job)


def test_a_new_gres_type_is_written_and_the_node_kept_drained_until_slurm_restarts(
    slurm_cluster: Cluster, slurm: SlurmCommands, keeper: SlurmGresConf
) -> None:
    wanted = _lines(slurm_cluster, ("3g.40gb", 0), ("2g.20gb", 2))
    steps = keeper.converge(wanted)
    restart = Restart(
        slurm_cluster.node,
        f"{DRAIN_REASON}, restart slurmctld and slurmd for Gres gpu:3g.40gb:1,gpu:2g.20gb:1",
        "gpu:3g.40gb:1,gpu:2g.20gb:1",
    )
    assert steps == (
        Drain(slurm_cluster.node, DRAIN_REASON, ()),
        Rewrite(slurm_cluster.node, wanted.gres_conf),
        restart,
    )
    # scontrol reconfigure does not take a new type: slurmctld knows no 2g.20gb on the node (once
    # slurmd registers the new lines it keeps the 3g.40gb it can match and flags the node
    # INVALID_REG), and the node stays drained, saying why.
    node = slurm.node(slurm_cluster.node)
    assert "2g.20gb" not in node.gres and node.drained and node.reason == restart.reason

    # The operator puts the node line in slurm.conf and restarts the daemons.
    text = slurm_cluster.conf.read_text().replace("Gres=gpu:3g.40gb:2", "Gres=gpu:3g.40gb:1,gpu:2g.20gb:1")
    slurm_cluster.conf.write_text(text)
    restart_slurm(slurm_cluster)
    assert slurm.node(slurm_cluster.node).gres == "gpu:3g.40gb:1,gpu:2g.20gb:1"
    # slurmctld kept the drain and its reason across the restart (its state files): ours, so resumed.
    assert keeper.converge(wanted) == (Unchanged(slurm_cluster.node, resume=True),)
    assert _until(lambda: slurm.node(slurm_cluster.node).state == "IDLE"), slurm.node(slurm_cluster.node)
    job = _job(slurm, "2g.20gb")
    assert _running(slurm, job).gres[0].type == "2g.20gb"
    _ended(slurm, job)
