"""Reading Slurm's documented output: `sbatch --parsable`, `scontrol -o show job -d`, reservations."""

from __future__ import annotations

import pytest

from better_compute.domain.fleet.slurm import (
    GresAllocation,
    SlurmOutputUnreadable,
    SlurmRecordAmbiguous,
    gres_request,
    parse_fields,
    parse_gres,
    parse_indices,
    parse_job,
    parse_jobs,
    parse_reservation,
    parse_submitted,
    reservation_arguments,
)

RUNNING_JOB = (
    "JobId=71701 JobName=hostname UserId=da(1000) GroupId=da(1000) MCS_label=N/A Priority=66264 Nice=0 "
    "Account=none QOS=normal JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 "
    "BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:03 TimeLimit=UNLIMITED Partition=debug "
    "AllocNode:Sid=snowflake:4702 ReqNodeList=(null) ExcNodeList=(null) NodeList=snowflake0 "
    "BatchHost=snowflake0 NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* "
    "TRES=cpu=1,node=1,billing=1,gres/gpu=1,gres/gpu:3g.40gb=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* "
    "CoreSpec=* JOB_GRES=gpu:3g.40gb:1   Nodes=snowflake0 CPU_IDs=0 Mem=0 GRES=gpu:3g.40gb:1(IDX:1) "
    "MinCPUsNode=1 Features=(null) Command=(null) WorkDir=/tmp StdOut=/dev/null Power= "
    "TresPerNode=gres:gpu:3g.40gb:1"
)
"""`scontrol -o show job -d` of a running job: scontrol(1)'s example fields, with a job's GRES detail."""


def test_a_running_jobs_state_and_the_gres_index_slurm_chose() -> None:
    job = parse_job(RUNNING_JOB)
    assert (job.job_id, job.state, job.reason, job.nodes) == (71701, "RUNNING", "None", "snowflake0")
    assert job.gres == (GresAllocation("snowflake0", "gpu", "3g.40gb", 1, (1,)),)
    assert not job.finished


def test_a_pending_job_holds_no_gres_and_says_why() -> None:
    job = parse_job(
        "JobId=7 JobName=wrap JobState=PENDING Reason=Resources Dependency=(null) NodeList= NumNodes=1"
    )
    assert (job.state, job.reason, job.nodes, job.gres) == ("PENDING", "Resources", "", ())


def test_a_multi_node_job_has_gres_per_node() -> None:
    line = (
        "JobId=9 JobState=RUNNING Reason=None NodeList=n[1-2] "
        "Nodes=n1 CPU_IDs=0-1 Mem=0 GRES=gpu:a100:2(IDX:0-1) "
        "Nodes=n2 CPU_IDs=0 Mem=0 GRES=gpu:a100:3(IDX:0,2-3)"
    )
    assert parse_job(line).gres == (
        GresAllocation("n1", "gpu", "a100", 2, (0, 1)),
        GresAllocation("n2", "gpu", "a100", 3, (0, 2, 3)),
    )


def test_gres_lists_split_outside_the_index_parentheses() -> None:
    assert parse_gres("n1", "gpu:1(IDX:0,2),gpu:3g.40gb:1(IDX:4)") == (
        GresAllocation("n1", "gpu", None, 1, (0, 2)),
        GresAllocation("n1", "gpu", "3g.40gb", 1, (4,)),
    )
    assert parse_gres("n1", "(null)") == ()


@pytest.mark.parametrize(
    ("text", "indices"), [("0", (0,)), ("0-2", (0, 1, 2)), ("1,3-4", (1, 3, 4)), ("N/A", ())]
)
def test_index_lists(text: str, indices: tuple[int, ...]) -> None:
    assert parse_indices(text) == indices


@pytest.mark.parametrize(
    "line", ["", "garbage", "JobId=x JobState=RUNNING", "JobId=1 JobState=DANCING", "JobId=1"]
)
def test_an_unreadable_job_record_is_refused_not_guessed(line: str) -> None:
    with pytest.raises(SlurmOutputUnreadable):
        parse_job(line)


def test_an_unreadable_gres_is_refused() -> None:
    with pytest.raises(SlurmOutputUnreadable):
        parse_gres("n1", "gpu:a100:one(IDX:0)")
    with pytest.raises(SlurmOutputUnreadable):
        parse_indices("0-")


def test_values_keep_spaces_and_equals_signs() -> None:
    fields = parse_fields("Reason=Job's account not permitted TRES=cpu=1,node=1 Command=/bin/sleep 60")
    assert fields == [
        ("Reason", "Job's account not permitted"),
        ("TRES", "cpu=1,node=1"),
        ("Command", "/bin/sleep 60"),
    ]


@pytest.mark.parametrize(("output", "job_id"), [("12\n", 12), ("12;west\n", 12)])
def test_sbatch_parsable_prints_the_id_and_maybe_the_cluster(output: str, job_id: int) -> None:
    assert parse_submitted(output) == job_id


def test_sbatch_output_without_an_id_is_refused() -> None:
    with pytest.raises(SlurmOutputUnreadable):
        parse_submitted("sbatch: error: Batch job submission failed\n")


def test_a_reservation_record() -> None:
    line = (
        "ReservationName=bc-1 StartTime=2026-12-07T04:00:00 EndTime=2026-12-07T04:10:00 Duration=00:10:00 "
        "Nodes=vm NodeCnt=1 CoreCnt=2 Features=(null) PartitionName=(null) Flags=SPEC_NODES "
        "TRES=cpu=2 Users=root Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE BurstBuffer=(null) "
        "Watts=n/a MaxStartDelay=(null)"
    )
    reservation = parse_reservation(line)
    assert (reservation.name, reservation.nodes, reservation.tres, reservation.users) == (
        "bc-1",
        "vm",
        "cpu=2",
        "root",
    )


def test_reservation_arguments_hold_nodes_or_tres() -> None:
    assert reservation_arguments("r1", nodes="vm", users="root", duration_minutes=10, tres=None) == [
        "ReservationName=r1",
        "StartTime=now",
        "Duration=10",
        "Nodes=vm",
        "Users=root",
    ]
    assert (
        reservation_arguments(
            "r1", nodes="vm", users="root", duration_minutes=10, tres={"gres/gpu:3g.40gb": 1, "cpu": 2}
        )[-1]
        == "TRES=gres/gpu:3g.40gb=1,cpu=2"
    )


@pytest.mark.parametrize(
    ("name", "minutes", "tres"),
    [
        ("r 1", 10, None),
        ("r=1", 10, None),
        ("r1", 0, None),
        ("r1", 10, {"gres/gpu": 0}),
        ("r1", 10, {"gres/gpu,cpu": 1}),
    ],
)
def test_reservation_arguments_refuse_what_would_split_into_other_words(
    name: str, minutes: int, tres: dict[str, int] | None
) -> None:
    with pytest.raises(ValueError, match=r"."):
        reservation_arguments(name, nodes="vm", users="root", duration_minutes=minutes, tres=tres)


def test_gres_request() -> None:
    assert gres_request("gpu", "3g.40gb", 1) == "gpu:3g.40gb:1"
    assert gres_request("gpu", None, 2) == "gpu:2"
    with pytest.raises(ValueError, match="at least 1"):
        gres_request("gpu", None, 0)
    with pytest.raises(ValueError, match="GRES type"):
        gres_request("gpu", "a100,shard:2", 1)


_FORGED = "JobId=77 JobName=bc.rsv-1 Account=bc-holds ReqNodeList=snowflake0"


@pytest.mark.parametrize(
    "record",
    [
        RUNNING_JOB.replace("JobName=hostname", f"JobName=train {_FORGED}"),
        RUNNING_JOB.replace("JobName=hostname", "JobName=bc.rsv-1 Partition=ours"),
        RUNNING_JOB.replace("JobName=hostname", "JobName=bc.rsv-1 Whatever=1"),
        RUNNING_JOB.replace("StdOut=/dev/null", f"StdOut=/tmp/o {_FORGED}"),
        RUNNING_JOB.replace("WorkDir=/tmp", "WorkDir=/tmp JobState=CANCELLED"),
        RUNNING_JOB.replace(
            "StdOut=/dev/null", "StdOut=/tmp/o Nodes=snowflake0 CPU_IDs=0 Mem=0 GRES=gpu:3g.40gb:1(IDX:0)"
        ),
        RUNNING_JOB.replace("JobName=hostname", "JobName=x Nodes=snowflake0 GRES=gpu:3g.40gb:1(IDX:0)"),
        RUNNING_JOB.replace(
            "Command=(null)", "Command=(null) MinCPUsNode=1 Nodes=n9 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:0)"
        ),
    ],
)
def test_field_injection_in_scontrol_show_job_is_refused(record: str) -> None:
    with pytest.raises(SlurmRecordAmbiguous):
        parse_job(record)


def test_field_injection_leaves_out_one_record_and_reads_the_others() -> None:
    forged = RUNNING_JOB.replace("StdOut=/dev/null", f"StdOut=/tmp/o {_FORGED}").replace("71701", "901")
    unreadable: list[str] = []
    jobs = parse_jobs(f"{forged}\n{RUNNING_JOB}\n", unreadable)
    assert [job.job_id for job in jobs] == [71701] and len(unreadable) == 1
    with pytest.raises(SlurmRecordAmbiguous):
        parse_jobs(f"{forged}\n{RUNNING_JOB}\n")


def test_free_text_with_spaces_but_no_keys_reads_whole() -> None:
    job = parse_job(
        RUNNING_JOB.replace("JobName=hostname", "JobName=my job, v2").replace(
            "StdOut=/dev/null", "StdOut=/tmp/a b"
        )
    )
    assert (job.name, job.account, job.job_id) == ("my job, v2", "none", 71701)
