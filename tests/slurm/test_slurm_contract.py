"""The same assertions against the in-memory Slurm (tests/slurm_fake.py) and a real one (tests/slurm):
holding jobs pend for their begin time and for resources, run on GRES indices Slurm picks among the
free ones, end when cancelled, and are listed with what makes them ours (name, account, node). If
the fake and Slurm disagree, one of these fails for the real one."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from better_compute.domain.fleet.slurm import SlurmJob
from better_compute.service.fleet.slurm import HoldRequest, JobRequest, SlurmControl, SlurmJobUnknown
from tests.slurm_fake import FakeSlurm

DEADLINE = 20.0


@dataclass
class Driver:
    """A Slurm to assert against, and how to let time pass in it."""

    control: SlurmControl
    node: str
    partition: str
    account: str
    settle: Callable[[], None]
    rounds: int
    submitted: list[int]

    def hold(self, name: str, *, begin: int = 0, seconds: int | None = 150) -> int:
        job_id = self.control.submit_hold(
            HoldRequest(
                name=name,
                account=self.account,
                partition=self.partition,
                node=self.node,
                gres=(("3g.40gb", 1),),
                begin_seconds=begin,
                time_limit_seconds=seconds,
            )
        )
        self.submitted.append(job_id)
        return job_id

    def until(self, job_id: int, done: Callable[[SlurmJob], bool]) -> SlurmJob:
        job = self.control.job(job_id)
        for _ in range(self.rounds):
            if done(job):
                break
            self.settle()
            job = self.control.job(job_id)
        return job


@pytest.fixture(params=["fake", "real"])
def slurm_driver(request: pytest.FixtureRequest) -> Iterator[Driver]:
    if request.param == "fake":
        fake = FakeSlurm(nodes={"node-a": ["3g.40gb", "3g.40gb"]})
        driver = Driver(fake, "node-a", "ours", "root", lambda: fake.advance(1), 30, [])
    else:
        cluster = request.getfixturevalue("slurm_cluster")
        real = request.getfixturevalue("slurm")
        rounds = int(DEADLINE / 0.1)
        driver = Driver(real, cluster.node, cluster.partition, "root", lambda: time.sleep(0.1), rounds, [])
    yield driver
    for job_id in driver.submitted:
        driver.control.cancel(job_id)
    for job_id in driver.submitted:
        assert driver.until(job_id, lambda job: job.finished).finished


def test_holds_run_on_distinct_indices_and_a_third_waits_for_resources(slurm_driver: Driver) -> None:
    first, second = slurm_driver.hold("bc.rsv-1"), slurm_driver.hold("bc.rsv-2")
    running = [slurm_driver.until(j, lambda job: job.state == "RUNNING") for j in (first, second)]
    assert [job.state for job in running] == ["RUNNING", "RUNNING"]
    assert sorted(i for job in running for i in job.gres[0].indices) == [0, 1]
    assert {(g.name, g.type, g.count, g.node) for job in running for g in job.gres} == {
        ("gpu", "3g.40gb", 1, slurm_driver.node)
    }
    third = slurm_driver.hold("bc.rsv-3")
    waiting = slurm_driver.until(third, lambda job: job.reason == "Resources")
    assert (waiting.state, waiting.reason, waiting.gres) == ("PENDING", "Resources", ())
    slurm_driver.control.cancel(first)
    assert slurm_driver.until(first, lambda job: job.finished).state == "CANCELLED"
    started = slurm_driver.until(third, lambda job: job.state == "RUNNING")
    assert started.gres[0].indices == running[0].gres[0].indices  # the card the cancelled job let go


def test_a_hold_waits_for_its_begin_time_and_cancelling_twice_is_silent(slurm_driver: Driver) -> None:
    later = slurm_driver.hold("bc.rsv-later", begin=3600)
    job = slurm_driver.control.job(later)
    assert (job.state, job.reason, job.gres) == ("PENDING", "BeginTime", ())
    slurm_driver.control.cancel(later)
    assert slurm_driver.until(later, lambda job: job.finished).state == "CANCELLED"
    slurm_driver.control.cancel(later)


def test_jobs_lists_holds_with_what_makes_them_ours(slurm_driver: Driver) -> None:
    held = slurm_driver.hold("bc.rsv-listed", seconds=150)
    slurm_driver.until(held, lambda job: job.state == "RUNNING")
    direct = slurm_driver.control.submit(
        JobRequest(name="direct", command="sleep 60", gres_name="gpu", gres_type="3g.40gb", gres_count=1)
    )
    slurm_driver.submitted.append(direct)
    listed = {job.job_id: job for job in slurm_driver.control.jobs([slurm_driver.partition])}
    assert slurm_driver.control.jobs(["elsewhere"]) == []
    ours = listed[held]
    assert (ours.name, ours.account, ours.partition, ours.required_nodes) == (
        "bc.rsv-listed",
        slurm_driver.account,
        slurm_driver.partition,
        slurm_driver.node,
    )
    assert ours.time_limit_minutes == 3  # 150 s, rounded up to whole minutes
    assert (listed[direct].name, listed[direct].required_nodes) == ("direct", "")


def test_an_unknown_job_is_unknown_and_cancelling_it_is_silent(slurm_driver: Driver) -> None:
    with pytest.raises(SlurmJobUnknown):
        slurm_driver.control.job(987654)
    slurm_driver.control.cancel(987654)
