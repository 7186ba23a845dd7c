"""Reading `sacct` and `scontrol show node`: lines captured from Slurm 22.05.8 (Debian 12) with slurmdbd
(`SLURM_TIME_FORMAT=%s`, `--parsable2 --noheader --allocations`)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from better_compute.domain.fleet.slurm import (
    SACCT_FIELDS,
    SlurmOutputUnreadable,
    check_reason,
    in_hostlist,
    parse_jobs,
    parse_node,
    parse_sacct,
    parse_tres,
    sacct_arguments,
)

# AccountingStorageTRES=gres/gpu,gres/gpu:3g.40gb,gres/shard: a typed GPU counts under both names.
SACCT = """\
1|root|billing=1,cpu=1,gres/gpu:3g.40gb=1,gres/gpu=1,node=1|1796621137|1796621139|2|COMPLETED|wrap
2|root|billing=1,cpu=1,gres/gpu:3g.40gb=2,gres/gpu=2,node=1|1796621140|Unknown|3|RUNNING|train|a|b
3|root||Unknown|Unknown|0|PENDING|wrap
5|research|billing=1,cpu=1,gres/shard=2,mem=1000M,node=1|1796621169|1796621171|2|CANCELLED by 0|shard
"""
# AccountingStorageTRES without GRES: sacct records none.
SACCT_UNTRACKED = "7|root|billing=1,cpu=1,node=1|1796621184|1796621185|1|COMPLETED|wrap\n"

NODE = (
    "NodeName=vm Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.28 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:3g.40gb:2,shard:3g.40gb:4 NodeAddr=127.0.0.1 "
    "NodeHostName=vm Version=22.05.8 OS=Linux 6.18.44 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1000 AllocMem=0 "
    "FreeMem=23025 Sockets=2 Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
    "MCS_label=N/A Partitions=ours  BootTime=2026-12-07T05:20:16 SlurmdStartTime=2026-12-07T05:26:01 "
    "LastBusyTime=2026-12-07T05:26:02 CfgTRES=cpu=2,mem=1000M,billing=2,gres/gpu=2,gres/shard=4 AllocTRES= "
    "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s "
    "Reason=better-compute: GRES layout change, waiting for job(s) 4 [root@2026-12-07T05:33:10]"
)


def _at(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def test_sacct_lines_read_as_records_with_gres_counts_times_and_states() -> None:
    done, running, pending, cancelled = parse_sacct(SACCT)
    assert (done.job_id, done.account, done.name, done.state) == (1, "root", "wrap", "COMPLETED")
    assert (done.start, done.end, done.elapsed_seconds) == (_at(1796621137), _at(1796621139), 2)
    assert (done.gres("gpu"), done.gres("gpu", "3g.40gb"), done.gres("shard")) == (1, 1, 0)
    assert (running.end, running.gres("gpu"), running.name) == (None, 2, "train|a|b")
    assert (pending.start, pending.tres, pending.gres()) == (None, (), 0)
    assert (cancelled.state, cancelled.gres("shard"), cancelled.account) == ("CANCELLED", 2, "research")
    (untracked,) = parse_sacct(SACCT_UNTRACKED)
    assert untracked.gres("gpu") == 0


def test_held_seconds_are_clipped_to_the_period_and_a_running_job_runs_to_now() -> None:
    done, running, pending, _ = parse_sacct(SACCT)
    assert done.held(_at(0), _at(2_000_000_000), _at(2_000_000_000)) == 2
    assert done.held(_at(1796621138), _at(2_000_000_000), _at(2_000_000_000)) == 1
    assert done.held(_at(1796621139), _at(2_000_000_000), _at(2_000_000_000)) == 0
    assert running.held(_at(0), _at(1796621150), _at(1796621145)) == 5
    assert pending.held(_at(0), _at(2_000_000_000), _at(2_000_000_000)) == 0


@pytest.mark.parametrize(
    "line",
    [
        "1|root|gres/gpu=1|1|2|1|COMPLETED",  # a field short
        "x|root|gres/gpu=1|1|2|1|COMPLETED|wrap",
        "1|root|gres/gpu=one|1|2|1|COMPLETED|wrap",
        "1|root|gres/gpu|1|2|1|COMPLETED|wrap",
        "1|root|gres/gpu=1|2026-12-07T05:25:37|2|1|COMPLETED|wrap",  # not epoch: SLURM_TIME_FORMAT unset
        "1|root|gres/gpu=1|1|2|1|DONE|wrap",
    ],
)
def test_sacct_output_out_of_its_format_is_refused(line: str) -> None:
    with pytest.raises(SlurmOutputUnreadable):
        parse_sacct(line)


def test_tres_keeps_units_it_does_not_count() -> None:
    assert parse_tres("cpu=1,mem=1000M,gres/gpu=2") == (("cpu", "1"), ("mem", "1000M"), ("gres/gpu", "2"))


def test_sacct_is_asked_for_allocations_of_all_users_in_utc_with_the_name_last() -> None:
    arguments = sacct_arguments(
        datetime(2030, 1, 1, tzinfo=UTC), datetime(2030, 2, 1, tzinfo=UTC), accounts=("research",)
    )
    assert arguments == [
        "sacct",
        "--allusers",
        "--allocations",
        "--parsable2",
        "--noheader",
        "--format=JobIDRaw,Account,AllocTRES,Start,End,ElapsedRaw,State,JobName",
        "--starttime=2030-01-01T00:00:00",
        "--endtime=2030-02-01T00:00:00",
        "--accounts=research",
    ]
    assert SACCT_FIELDS[-1] == "JobName"
    with pytest.raises(ValueError, match="empty"):
        sacct_arguments(datetime(2030, 1, 1, tzinfo=UTC), datetime(2030, 1, 1, tzinfo=UTC))
    with pytest.raises(ValueError, match="zone"):
        sacct_arguments(datetime(2030, 1, 1), datetime(2030, 2, 1))  # noqa: DTZ001
    with pytest.raises(ValueError):
        sacct_arguments(datetime(2030, 1, 1, tzinfo=UTC), datetime(2030, 2, 1, tzinfo=UTC), accounts=("a,b",))


def test_a_node_reads_its_state_gres_and_reason_without_who_set_it() -> None:
    node = parse_node(NODE)
    assert (node.name, node.state, node.gres, node.drained) == (
        "vm",
        "IDLE+DRAIN",
        "gpu:3g.40gb:2,shard:3g.40gb:4",
        True,
    )
    assert node.reason == "better-compute: GRES layout change, waiting for job(s) 4"
    assert not parse_node("NodeName=vm State=MIXED Gres=gpu:1").drained
    with pytest.raises(SlurmOutputUnreadable):
        parse_node("Arch=x86_64 Gres=gpu:1")


def test_every_job_and_no_job() -> None:
    assert parse_jobs("No jobs in the system\n") == []
    jobs = parse_jobs("JobId=1 JobState=RUNNING NodeList=vm\n\nJobId=2 JobState=PENDING\n")
    assert [(j.job_id, j.state) for j in jobs] == [(1, "RUNNING"), (2, "PENDING")]


@pytest.mark.parametrize("reason", ["", "a=b", "x" * 201, "line\nbreak"])
def test_a_drain_reason_that_scontrol_would_misread_is_refused(reason: str) -> None:
    with pytest.raises(ValueError):
        check_reason(reason)


@pytest.mark.parametrize(
    ("node", "hostlist", "named"),
    [
        ("vm", "vm", True),
        ("vm", "vm2", False),
        ("n2", "n[1-3]", True),
        ("n4", "n[1-3,7]", False),
        ("n7", "n[1-3,7]", True),
        ("gpu-a02", "gpu-a[01-02],gpu-b1", True),
        ("gpu-a2", "gpu-a[01-02]", False),
        ("gpu-b1", "gpu-a[01-02],gpu-b1", True),
        ("n1x", "n[1-2]x", True),
        ("anything", "r[1-2]n[1-2]", True),  # two brackets: not read, so rather named
    ],
)
def test_a_host_list_names_its_nodes(node: str, hostlist: str, named: bool) -> None:
    assert in_hostlist(node, hostlist) is named
