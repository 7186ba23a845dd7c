"""What the in-memory Slurm does that the contract test cannot wait for on a real one: time limits,
`MinJobAge` forgetting, and 22.05's refusal of reservations holding GRES."""

from __future__ import annotations

import pytest

from better_compute.service.fleet.slurm import HoldRequest, SlurmJobUnknown, SlurmRefused
from tests.slurm_fake import MIN_JOB_AGE, FakeSlurm


def hold(seconds: int | None = 90, begin: int = 0, gres_type: str = "3g.40gb") -> HoldRequest:
    return HoldRequest("bc.rsv-1", "bc", "ours", "n1", ((gres_type, 1),), begin, seconds)


def test_a_running_hold_times_out_at_its_limit_rounded_up_to_minutes_and_is_forgotten_later() -> None:
    slurm = FakeSlurm(nodes={"n1": ["3g.40gb"]})
    job_id = slurm.submit_hold(hold(seconds=90))
    slurm.advance(1)
    assert slurm.job(job_id).state == "RUNNING"
    assert slurm.job(job_id).time_limit_minutes == 2
    slurm.advance(119)  # started at 1: its limit is up at 121
    assert slurm.job(job_id).state == "RUNNING"
    slurm.advance(1)
    assert (slurm.job(job_id).state, slurm.job(job_id).gres) == ("TIMEOUT", ())
    slurm.advance(MIN_JOB_AGE - 1)
    assert slurm.job(job_id).finished
    slurm.advance(1)
    with pytest.raises(SlurmJobUnknown):
        slurm.job(job_id)
    assert slurm.jobs(["ours"]) == []


def test_a_hold_begins_at_its_begin_time_on_the_first_free_index_of_its_type() -> None:
    slurm = FakeSlurm(nodes={"n1": ["a100_80gb", "3g.40gb", "3g.40gb"]})
    job_id = slurm.submit_hold(hold(begin=10))
    slurm.advance(9)
    assert (slurm.job(job_id).state, slurm.job(job_id).reason) == ("PENDING", "BeginTime")
    slurm.advance(1)
    assert slurm.job(job_id).gres[0].indices == (1,)


def test_a_hold_of_a_type_the_node_lacks_is_refused_at_submission() -> None:
    slurm = FakeSlurm(nodes={"n1": ["3g.40gb"]})
    with pytest.raises(SlurmRefused, match="node configuration is not available"):
        slurm.submit_hold(hold(gres_type="7g.80gb"))


def test_a_reservation_holding_gres_is_refused_as_slurm_22_05_refuses_it() -> None:
    slurm = FakeSlurm(nodes={"n1": ["3g.40gb"]})
    with pytest.raises(SlurmRefused, match="not supported with reservations"):
        slurm.create_reservation("r", nodes="n1", users="root", duration_minutes=5, tres={"gres/gpu": 1})
