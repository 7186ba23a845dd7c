"""`bcd run --slurm-gres-conf`: each pass writes the node's gres.conf from its own atoms, the lines the
server's `nodes.slurmGres` gives for the node, and tells Slurm only when the node is free to change.

Slurm here is a fake that keeps a node's state as scontrol(1) documents it (`State=IDLE`, `DRAIN` a
flag on it that `State=RESUME` clears, the reason kept); the real daemons are tests/slurm's."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from better_compute.bcd.slurm_gres_conf import SlurmGresConf
from better_compute.domain.fleet.slurm import GresAllocation, SlurmJob, SlurmNode
from better_compute.domain.fleet.slurm_reconfigure import DRAIN_REASON, gres_counts
from better_compute.storage.store import Store
from tests.node_world import NodeWorld


class Slurm:
    """One node as slurmctld keeps it, its slurm.conf node line already matching the gres.conf `conf`
    (an operator put it there): at reconfigure its `Gres` is what that file lists, counted per type."""

    def __init__(self, name: str, conf: Path) -> None:
        self.state = SlurmNode(name=name, state="IDLE", reason="", gres="(null)")
        self.conf = conf
        self.jobs: list[SlurmJob] = []
        self.calls: list[str] = []

    def node(self, name: str) -> SlurmNode:
        return self.state

    def jobs_on(self, node: str) -> tuple[SlurmJob, ...]:
        return tuple(self.jobs)

    def drain(self, node: str, reason: str) -> None:
        self.calls.append("drain")
        self.state = dataclasses.replace(self.state, state="IDLE+DRAIN", reason=reason)

    def resume(self, node: str) -> None:
        self.calls.append("resume")
        self.state = dataclasses.replace(self.state, state="IDLE", reason="")

    def reconfigure(self) -> None:
        self.calls.append("reconfigure")
        counts: dict[str, int] = {}
        for line in self.conf.read_text().splitlines():
            found = re.search(r" Name=gpu Type=(\S+)", line)
            if found:
                counts[found.group(1)] = counts.get(found.group(1), 0) + 1
        gres = ",".join(f"gpu:{type_}:{n}" for type_, n in counts.items())
        self.state = dataclasses.replace(self.state, gres=gres)


@pytest.fixture
def world(store: Store, tmp_path: Path) -> NodeWorld:
    return NodeWorld(store, tmp_path)


def test_a_pass_writes_the_lines_the_server_gives_and_a_held_change_waits(
    world: NodeWorld, tmp_path: Path
) -> None:
    daemon, _ = world.daemon("n-1")
    conf = tmp_path / "gres.conf"
    slurm = Slurm("n-1", conf)
    daemon.slurm_gres = SlurmGresConf(conf, "n-1", slurm, daemon.log)
    daemon.step(False)

    served = world.http.get("/v1/nodes/n-1/slurm-gres", headers=world.admin)
    assert served.status_code == 200, served.text
    assert conf.read_text() == served.json()["gresConf"]
    assert " Name=gpu Type=" in conf.read_text() and slurm.state.gres.startswith("gpu:")
    assert gres_counts(slurm.state.gres) == gres_counts(served.json()["nodeLine"].partition(" Gres=")[2])
    # Drained, the reason saying a reconfigure is pending while it is, then the plain reason, resumed.
    assert slurm.calls == ["drain", "drain", "reconfigure", "drain", "resume"]
    assert slurm.state.state == "IDLE"
    daemon.step(False)
    assert slurm.calls == [
        "drain",
        "drain",
        "reconfigure",
        "drain",
        "resume",
    ]  # nothing changed: nothing asked

    # Another layout's lines while a job holds the first GPU: drained, not written.
    before = conf.read_text()
    slurm.jobs = [
        SlurmJob(
            job_id=42,
            state="RUNNING",
            reason="None",
            nodes="n-1",
            gres=(GresAllocation(node="n-1", name="gpu", type=None, count=1, indices=(0,)),),
        )
    ]
    conf.write_text(before.replace("/dev/nvidia0", "/dev/nvidia9"))
    daemon.step(False)
    assert slurm.state.reason == f"{DRAIN_REASON}, waiting for job(s) 42"
    assert "/dev/nvidia9" in conf.read_text() and slurm.calls[-1] == "drain"
    slurm.jobs = []
    daemon.step(False)
    assert conf.read_text() == before and slurm.state.state == "IDLE"


def test_bcd_resumes_a_node_never_reconfigured_if_scontrol_reconfigure_fails_no_more(tmp_path: Path) -> None:
    """`scontrol reconfigure` fails after gres.conf was written: the node stays drained, its reason
    saying the reconfigure is pending, and the next pass reconfigures it before resuming it."""
    from better_compute.bcd.slurm_gres_conf import SlurmNodeControl
    from better_compute.domain.fleet.slurm_gres import SlurmGres
    from better_compute.domain.fleet.slurm_reconfigure import RECONFIGURE_REASON

    old = (
        "AutoDetect=off\n"
        "NodeName=n1 Name=gpu Type=3g.40gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21\n"
        "NodeName=n1 Name=gpu Type=3g.40gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap30\n"
    )
    new = old.replace("cap21", "cap39")  # same types and counts, one instance made again
    conf = tmp_path / "gres.conf"
    conf.write_text(old)

    class Failing(Slurm):
        failures = 1

        def reconfigure(self) -> None:
            if self.failures:
                self.failures -= 1
                self.calls.append("reconfigure failed")
                raise RuntimeError("slurm_reconfigure error: Socket timed out on send/recv operation")
            super().reconfigure()

    slurm = Failing("n1", conf)
    slurm.state = dataclasses.replace(slurm.state, gres="gpu:3g.40gb:2")  # slurmctld has the old file

    class Log:
        def info(self, *args: object, **fields: object) -> None: ...

        def warning(self, *args: object, **fields: object) -> None: ...

    control: SlurmNodeControl = slurm
    keeper = SlurmGresConf(conf, "n1", control, Log())  # type: ignore[arg-type]
    wanted = SlurmGres(new, "NodeName=n1 Gres=gpu:3g.40gb:2")
    with pytest.raises(RuntimeError):
        keeper.converge(wanted)
    assert conf.read_text() == new
    assert slurm.state.drained and slurm.state.reason == RECONFIGURE_REASON
    keeper.converge(wanted)
    assert slurm.calls[-3:] == ["reconfigure", "drain", "resume"]
    assert slurm.state.state == "IDLE" and "resume" not in slurm.calls[: slurm.calls.index("reconfigure")]
