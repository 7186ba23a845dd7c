"""What Slurm's commands print, read as values: job ids, job states, the GRES indices Slurm chose.

A Slurm cluster picks its own cards (docs/slurm.md#talking-to-slurm): we ask it for GRES and read back
what it gave. These functions read the documented output of `sbatch --parsable` ("the job id number and
the cluster name if present ... separated by a semicolon", sbatch(1)) and of `scontrol -o show job -d`
and `scontrol -o show reservation` (one record a line of `Key=Value` words, scontrol(1)), and write the
arguments of `scontrol create reservation`. They are pure so the adapter stays a thin pipe and the rules
are tested without a Slurm.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

JOB_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "CONFIGURING",
        "COMPLETING",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PENDING",
        "PREEMPTED",
        "RUNNING",
        "RESV_DEL_HOLD",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "REQUEUED",
        "RESIZING",
        "REVOKED",
        "SIGNALING",
        "SPECIAL_EXIT",
        "STAGE_OUT",
        "STOPPED",
        "SUSPENDED",
        "TIMEOUT",
    }
)
"""Every job state squeue(1) lists under JOB STATE CODES, by its long name (what scontrol shows)."""

FINISHED_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    }
)
"""The states after which a job holds nothing and runs no more."""

_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")
_GRES = re.compile(r"^(?P<name>[^:()]+)(?::(?P<type>[^:()]+))?:(?P<count>\d+)(?:\(IDX:(?P<idx>[^)]*)\))?$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class SlurmOutputUnreadable(ValueError):
    """Slurm printed something that is not the documented format: the adapter must not guess."""


class SlurmRecordAmbiguous(SlurmOutputUnreadable):
    """A job record whose `Key=` words do not sit where Slurm prints them: a free-text field a user
    sets (job name, comment, output paths, working directory) carries words that read as keys, so which
    value is Slurm's cannot be told. Such a record is not trusted at all (docs/slurm.md#what-is-trusted)."""


_ONCE = (
    "JobId",
    "JobName",
    "UserId",
    "Account",
    "JobState",
    "Reason",
    "TimeLimit",
    "Partition",
    "ReqNodeList",
    "NodeList",
    "MinCPUsNode",
)
"""Keys Slurm prints once a job record: a second one is a forgery in a free-text field."""

_DETAIL = ("Nodes", "CPU_IDs", "Mem", "GRES")
"""The keys of one `-d` detail group, in Slurm's order; the groups sit together just before
`MinCPUsNode` (slurm_sprint_job_info), after every field a user writes but the job name."""


def _check_positions(keys: list[str], line: str) -> None:
    """Refuse a record whose keys are not where Slurm prints them (SlurmRecordAmbiguous).

    The only free text before the fields read is the job name, which Slurm follows with `UserId`;
    every other free-text field (Comment, Command, WorkDir, StdOut, ...) comes after `MinCPUsNode`.
    So a forged key shows up as a key printed twice, a job name not followed by `UserId`, or detail
    words away from the one run of detail groups before `MinCPUsNode`."""
    where = f"job record {line[:80]!r}..."
    for key in _ONCE:
        if keys.count(key) > 1:
            raise SlurmRecordAmbiguous(f"{key}= appears {keys.count(key)} times in {where}")
    if "JobName" in keys and "UserId" in keys and keys[keys.index("JobName") + 1] != "UserId":
        raise SlurmRecordAmbiguous(f"the job name carries Key= words in {where}")
    positions = [i for i, key in enumerate(keys) if key in _DETAIL]
    if not positions:
        return
    first, last = positions[0], positions[-1]
    if positions != list(range(first, last + 1)):
        raise SlurmRecordAmbiguous(f"node detail words outside the node detail in {where}")
    expected = 0
    for key in keys[first : last + 1]:
        order = _DETAIL.index(key)
        if order == 0:
            expected = 1
        elif order < expected or expected == 0:
            raise SlurmRecordAmbiguous(f"node detail words out of order in {where}")
        else:
            expected = order + 1
    if "MinCPUsNode" in keys and keys.index("MinCPUsNode") != last + 1:
        raise SlurmRecordAmbiguous(f"node detail words away from Slurm's node detail in {where}")


@dataclass(frozen=True)
class GresAllocation:
    """GRES one job holds on one node: `GRES=gpu:3g.40gb:1(IDX:0)` is ("gpu", "3g.40gb", 1, (0,))."""

    node: str
    name: str
    type: str | None
    count: int
    indices: tuple[int, ...]


@dataclass(frozen=True)
class SlurmJob:
    """A job as `scontrol show job -d` reports it."""

    job_id: int
    state: str
    reason: str
    nodes: str
    gres: tuple[GresAllocation, ...]
    name: str = ""
    account: str = ""
    partition: str = ""
    time_limit_minutes: int | None = None
    """`TimeLimit` in minutes; None for `UNLIMITED` (or a job record without one)."""
    required_nodes: str = ""
    """`ReqNodeList`: the nodes the job asked for (`--nodelist`), `(null)` read as empty."""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES


@dataclass(frozen=True)
class SlurmReservation:
    """A reservation as `scontrol show reservation` reports it (TRES as Slurm normalised it)."""

    name: str
    nodes: str
    tres: str
    users: str


def parse_fields(line: str) -> list[tuple[str, str]]:
    """The `Key=Value` words of one `scontrol -o` record, in order; a key may repeat (one per node).

    A value runs to the next word that is a key, so values with spaces (`Reason`, `Command`) and with
    `=` inside (`TRES=cpu=1,node=1`) stay whole."""
    matches = list(_KEY.finditer(line))
    if not matches or line[: matches[0].start()].strip():
        raise SlurmOutputUnreadable(f"not a Key=Value record: {line[:120]!r}")
    fields = []
    for here, after in zip(matches, [*matches[1:], None], strict=True):
        end = after.start() if after is not None else len(line)
        fields.append((here.group(1), line[here.end() : end].strip()))
    return fields


def parse_indices(text: str) -> tuple[int, ...]:
    """`0`, `0-1`, `0,2-3` → the indices; `N/A` → none."""
    if text in {"", "N/A"}:
        return ()
    indices: list[int] = []
    for part in text.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise SlurmOutputUnreadable(f"not a GRES index list: {text!r}")
        indices.extend(range(int(low), int(high) + 1) if dash else [int(low)])
    return tuple(indices)


def parse_gres(node: str, text: str) -> tuple[GresAllocation, ...]:
    """A node's `GRES=` value of `scontrol show job -d`: comma-separated `name[:type]:count(IDX:list)`.

    Commas also separate the indices inside the parentheses, so the list is split outside them."""
    items, depth, start = [], 0, 0
    for position, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(text[start:position])
            start = position + 1
    items.append(text[start:])
    allocations = []
    for item in (item.strip() for item in items):
        if not item or item == "(null)":
            continue
        match = _GRES.match(item)
        if match is None:
            raise SlurmOutputUnreadable(f"not a GRES allocation: {item!r}")
        allocations.append(
            GresAllocation(
                node=node,
                name=match["name"],
                type=match["type"],
                count=int(match["count"]),
                indices=parse_indices(match["idx"] or ""),
            )
        )
    return tuple(allocations)


def parse_job(line: str) -> SlurmJob:
    """One record of `scontrol -o show job -d <id>`: its state and, per node, the GRES indices held.

    A user sets free text that Slurm prints inside the record (`--job-name`, `--comment`, `--output`):
    the record is read only when every key is where Slurm prints it (`_check_positions`)."""
    fields = parse_fields(line)
    _check_positions([key for key, _ in fields], line)
    values = dict(fields)
    try:
        job_id, state = int(values["JobId"]), values["JobState"]
    except (KeyError, ValueError) as exc:
        raise SlurmOutputUnreadable(f"a job record without JobId or JobState: {line[:120]!r}") from exc
    if state not in JOB_STATES:
        raise SlurmOutputUnreadable(f"unknown job state {state!r}")
    gres: list[GresAllocation] = []
    node = ""
    for key, value in fields:
        if key == "Nodes":  # the -d lines: `Nodes=<list> CPU_IDs=... Mem=... GRES=<allocations>`
            node = value
        elif key == "GRES" and node:
            gres.extend(parse_gres(node, value))
    return SlurmJob(
        job_id=job_id,
        state=state,
        reason=values.get("Reason", "None"),
        nodes=values.get("NodeList", ""),
        gres=tuple(gres),
        name=values.get("JobName", ""),
        account=values.get("Account", ""),
        partition=values.get("Partition", ""),
        time_limit_minutes=parse_time_limit(values.get("TimeLimit", "UNLIMITED")),
        required_nodes="" if values.get("ReqNodeList", "(null)") == "(null)" else values["ReqNodeList"],
    )


NO_JOBS = "No jobs in the system"
"""What `scontrol show job` prints when slurmctld knows no job."""


def parse_jobs(output: str, unreadable: list[str] | None = None) -> list[SlurmJob]:
    """Every record of `scontrol -o show job -d`, one a line; none for "No jobs in the system".

    With `unreadable`, a record that cannot be read is left out and why is appended there (one job a
    user shaped must not blind the reader to every other job); without, it raises."""
    lines = [line for line in output.splitlines() if line.strip()]
    if len(lines) == 1 and lines[0].strip() == NO_JOBS:
        return []
    jobs = []
    for line in lines:
        try:
            jobs.append(parse_job(line))
        except SlurmOutputUnreadable as exc:
            if unreadable is None:
                raise
            unreadable.append(str(exc))
    return jobs


def parse_time_limit(text: str) -> int | None:
    """`TimeLimit` of scontrol (`[days-]hours:minutes:seconds`, `minutes:seconds`) in whole minutes,
    rounded up; None for `UNLIMITED`, `INFINITE` or `Partition_Limit`."""
    if text in {"UNLIMITED", "INFINITE", "Partition_Limit", "NONE"}:
        return None
    days, dash, rest = text.partition("-")
    if not dash:
        days, rest = "0", text
    parts = rest.split(":")
    if not days.isdigit() or not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3:
        raise SlurmOutputUnreadable(f"not a time limit: {text!r}")
    numbers = [int(p) for p in parts]
    while len(numbers) < 3:
        numbers.insert(0, 0)
    hours, minutes, seconds = numbers
    return int(days) * 1440 + hours * 60 + minutes + (1 if seconds else 0)


def parse_submitted(output: str) -> int:
    """The job id of `sbatch --parsable`: `<id>` or `<id>;<cluster>`."""
    job_id = output.strip().split(";", 1)[0]
    if not job_id.isdigit():
        raise SlurmOutputUnreadable(f"sbatch --parsable printed {output.strip()[:120]!r}, not a job id")
    return int(job_id)


def parse_reservation(line: str) -> SlurmReservation:
    """One record of `scontrol -o show reservation <name>`."""
    values = dict(parse_fields(line))
    if "ReservationName" not in values:
        raise SlurmOutputUnreadable(f"a reservation record without ReservationName: {line[:120]!r}")
    return SlurmReservation(
        name=values["ReservationName"],
        nodes=values.get("Nodes", ""),
        tres=values.get("TRES", ""),
        users=values.get("Users", ""),
    )


def check_name(what: str, name: str) -> str:
    """A name passed to Slurm as one word: letters, digits, `.`, `_`, `-` (no spaces, `=` or commas)."""
    if not _NAME.match(name):
        raise ValueError(f"{what} {name!r}: 1-64 of letters, digits, '.', '_', '-'")
    return name


def gres_request(name: str, type_: str | None, count: int) -> str:
    """`--gres` of sbatch: `gpu:3g.40gb:1`."""
    check_name("GRES", name)
    if count < 1:
        raise ValueError(f"GRES count {count}: at least 1")
    return f"{name}:{check_name('GRES type', type_)}:{count}" if type_ else f"{name}:{count}"


def tres_spec(tres: Mapping[str, int]) -> str:
    """`TRES=` of `scontrol create reservation`: `gres/gpu:3g.40gb=1,cpu=2`, in the order given."""
    if not tres:
        raise ValueError("a reservation holds at least one TRES")
    parts = []
    for key, count in tres.items():
        if not re.fullmatch(r"[A-Za-z]+(/[A-Za-z0-9._-]+(:[A-Za-z0-9._-]+)?)?", key) or count < 1:
            raise ValueError(f"TRES {key}={count}: a TRES name and a count of at least 1")
        parts.append(f"{key}={count}")
    return ",".join(parts)


def reservation_arguments(
    name: str,
    *,
    nodes: str,
    users: str,
    duration_minutes: int,
    tres: Mapping[str, int] | None,
    start: str = "now",
) -> list[str]:
    """The arguments after `scontrol create reservation`. Without `tres` the reservation holds the whole
    nodes; with it, only those TRES on them."""
    if duration_minutes < 1:
        raise ValueError(f"duration {duration_minutes} minutes: at least 1")
    arguments = [
        f"ReservationName={check_name('reservation', name)}",
        f"StartTime={start}",
        f"Duration={duration_minutes}",
        f"Nodes={nodes}",
        f"Users={users}",
    ]
    if tres:
        arguments.append(f"TRES={tres_spec(tres)}")
    return arguments


# -- accounting (sacct) ---------------------------------------------------------------------------

SACCT_FIELDS = ("JobIDRaw", "Account", "AllocTRES", "Start", "End", "ElapsedRaw", "State", "JobName")
"""The `--format` of `sacct` read by `parse_sacct`. `JobIDRaw` is numeric for every job (an array task's
`JobID` is `12_3`); `ElapsedRaw` is the run time in seconds; `JobName` comes last, since it is the one
field a user writes and may hold the `|` that separates the others."""

SACCT_TIME_FORMAT = "%s"
"""`SLURM_TIME_FORMAT` for sacct: times as seconds since the epoch, so no time zone is guessed at."""

_UNKNOWN_TIMES = frozenset({"Unknown", "None", ""})


@dataclass(frozen=True)
class SlurmAccountingRecord:
    """One job allocation as `sacct -X` reports it from slurmdbd (a job slurmctld forgot included).

    `tres` is `AllocTRES` as Slurm wrote it (`gres/gpu:3g.40gb=1`, `mem=1000M`), empty for a job that
    never started. `start` is None until it starts, `end` None while it runs (both UTC)."""

    job_id: int
    name: str
    account: str
    tres: tuple[tuple[str, str], ...]
    start: datetime | None
    end: datetime | None
    elapsed_seconds: int
    state: str

    def gres(self, name: str = "gpu", type_: str | None = None) -> int:
        """How many of a GRES the job held: `gres/gpu` (every type together) or `gres/gpu:<type>`.

        Slurm 22.05 records a GRES only if `AccountingStorageTRES` names it (`gres/gpu`), and a type
        only if it names the type too (`gres/gpu:3g.40gb`); a job given a typed GPU counts under both
        (docs/slurm.md#accounting)."""
        key = f"gres/{name}" if type_ is None else f"gres/{name}:{type_}"
        for tres, count in self.tres:
            if tres == key:
                return int(count)
        return 0

    def held(self, period_start: datetime, period_end: datetime, now: datetime) -> int:
        """Whole seconds of the job's allocation inside `[period_start, period_end)`: from its start to
        its end (a running job up to `now`); 0 for a job that never started."""
        if self.start is None:
            return 0
        end = self.end if self.end is not None else now
        low, high = max(self.start, period_start), min(end, period_end)
        return max(0, int((high - low).total_seconds()))


def _sacct_time(text: str, field: str) -> datetime | None:
    if text in _UNKNOWN_TIMES:
        return None
    if not text.isdigit():
        raise SlurmOutputUnreadable(f"sacct {field} {text!r} is not seconds since the epoch")
    return datetime.fromtimestamp(int(text), tz=UTC)


def parse_tres(text: str) -> tuple[tuple[str, str], ...]:
    """`billing=1,cpu=1,gres/gpu:3g.40gb=1,gres/gpu=1,mem=1000M,node=1` → its pairs, in order; a
    `gres/` count must be a whole number."""
    if not text:
        return ()
    pairs = []
    for part in text.split(","):
        key, equals, value = part.partition("=")
        if not equals or not key or not value:
            raise SlurmOutputUnreadable(f"not a TRES list: {text[:120]!r}")
        if key.startswith("gres/") and not value.isdigit():
            raise SlurmOutputUnreadable(f"GRES count {part!r} is not a whole number")
        pairs.append((key, value))
    return tuple(pairs)


def parse_sacct_line(line: str) -> SlurmAccountingRecord:
    """One line of `sacct --parsable2 --noheader --format=<SACCT_FIELDS>` under `SLURM_TIME_FORMAT=%s`."""
    parts = line.split("|", len(SACCT_FIELDS) - 1)
    if len(parts) != len(SACCT_FIELDS):
        raise SlurmOutputUnreadable(
            f"sacct line of {len(parts)} fields, not {len(SACCT_FIELDS)}: {line[:120]!r}"
        )
    job_id, account, tres, start, end, elapsed, state, name = parts
    # A cancelled job's state reads `CANCELLED by <uid>`.
    state = state.split(" ", 1)[0]
    if not job_id.isdigit() or not elapsed.isdigit():
        raise SlurmOutputUnreadable(f"sacct job id {job_id!r} or elapsed {elapsed!r} is not a number")
    if state not in JOB_STATES:
        raise SlurmOutputUnreadable(f"unknown job state {state!r}")
    return SlurmAccountingRecord(
        job_id=int(job_id),
        name=name,
        account=account,
        tres=parse_tres(tres),
        start=_sacct_time(start, "Start"),
        end=_sacct_time(end, "End"),
        elapsed_seconds=int(elapsed),
        state=state,
    )


def parse_sacct(output: str) -> tuple[SlurmAccountingRecord, ...]:
    """Every line of sacct's output (see `parse_sacct_line`), in sacct's order."""
    return tuple(parse_sacct_line(line) for line in output.splitlines() if line.strip())


def sacct_arguments(start: datetime, end: datetime, *, accounts: tuple[str, ...] = ()) -> list[str]:
    """`sacct` asking for the allocations (`-X`, no steps) of every user that were pending or ran in
    `[start, end)`, in UTC (the adapter runs it with `TZ=UTC`): sacct's own window also lists jobs
    that only waited in it, so callers clip to the window (`SlurmAccountingRecord.held`)."""
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError("sacct's window needs times with a zone")
    if end <= start:
        raise ValueError(f"sacct's window {start.isoformat()} to {end.isoformat()} is empty")
    arguments = [
        "sacct",
        "--allusers",
        "--allocations",
        "--parsable2",
        "--noheader",
        f"--format={','.join(SACCT_FIELDS)}",
        f"--starttime={_sacct_when(start)}",
        f"--endtime={_sacct_when(end)}",
    ]
    if accounts:
        arguments.append(f"--accounts={','.join(check_name('account', a) for a in accounts)}")
    return arguments


def _sacct_when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


# -- nodes (scontrol show node) -------------------------------------------------------------------


@dataclass(frozen=True)
class SlurmNode:
    """A node as `scontrol -o show node` reports it: `state` is Slurm's words joined by `+`
    (`IDLE+DRAIN`, `MIXED`), `gres` the configured GRES (`gpu:3g.40gb:2,shard:3g.40gb:4`)."""

    name: str
    state: str
    reason: str
    gres: str

    @property
    def drained(self) -> bool:
        """Whether Slurm starts no new job here (`DRAIN` is a flag on the base state: a node still
        running jobs reads `MIXED+DRAIN`, Slurm's "draining")."""
        return "DRAIN" in self.state.split("+")


def parse_node(line: str) -> SlurmNode:
    """One record of `scontrol -o show node <name>`."""
    values = dict(parse_fields(line))
    if "NodeName" not in values or "State" not in values:
        raise SlurmOutputUnreadable(f"a node record without NodeName or State: {line[:120]!r}")
    reason = values.get("Reason", "")
    # scontrol appends who set the reason and when: `Reason=gres change [root@2030-01-01T00:00:00]`.
    reason = re.sub(r"\s*\[[^\]]*@[^\]]*\]$", "", reason)
    return SlurmNode(
        name=values["NodeName"], state=values["State"], reason=reason, gres=values.get("Gres", "(null)")
    )


MAX_REASON = 200
"""The longest drain reason written: Slurm keeps it whole, people read it in `sinfo -R`."""


def check_reason(reason: str) -> str:
    """A drain reason passed as one `reason=` word's value: printable, no `=` (scontrol would read the
    rest as another key), at most MAX_REASON characters."""
    if not reason or len(reason) > MAX_REASON or "=" in reason or not reason.isprintable():
        raise ValueError(f"drain reason {reason[:80]!r}: 1-{MAX_REASON} printable characters, no '='")
    return reason


_HOSTLIST_PART = re.compile(r"^(?P<head>[^\[\]]*)\[(?P<ranges>[^\[\]]+)\](?P<tail>[^\[\]]*)$")


def in_hostlist(node: str, hostlist: str) -> bool:
    """Whether Slurm's host list `hostlist` (`n1`, `n[1-3,7]`, `gpu-a[01-02],gpu-b1`) names `node`.

    A form not read here (two brackets in one name) answers True: a caller deciding whether a job may
    hold something on the node must rather wait for a job than miss one."""
    parts, depth, start = [], 0, 0
    for position, char in enumerate(hostlist):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(hostlist[start:position])
            start = position + 1
    parts.append(hostlist[start:])
    for part in (p.strip() for p in parts):
        if "[" not in part:
            if part == node:
                return True
            continue
        match = _HOSTLIST_PART.match(part)
        if match is None:
            return True
        head, tail = match["head"], match["tail"]
        if not (node.startswith(head) and node.endswith(tail) and len(node) > len(head) + len(tail)):
            continue
        number = node[len(head) : len(node) - len(tail) if tail else None]
        for item in match["ranges"].split(","):
            low, dash, high = item.partition("-")
            if not low.isdigit() or (dash and not high.isdigit()):
                return True
            if not number.isdigit():
                continue
            width = len(low) if low.startswith("0") else 0
            if width and len(number) != width:
                continue
            if int(low) <= int(number) <= int(high if dash else low):
                return True
    return False
