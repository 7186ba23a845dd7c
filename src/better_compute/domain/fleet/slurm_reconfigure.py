"""When a node's GRES lines may change under Slurm: only once no job holds a GRES that changes.

A layout change through the gate cuts a node's GPUs another way, so the node's `gres.conf` lines
(`domain.fleet.slurm_gres`) change. gres.conf(5) says changes of a device's files take a drained node
and `scontrol reconfigure`: a job holding a GRES whose line changes would otherwise find its index
naming another device (Slurm numbers a node's GRES of one name in gres.conf order, and
`scontrol show job -d` reports `GRES=gpu:3g.40gb:1(IDX:1)` against that numbering).

`plan` compares the lines Slurm has with the lines the node's atoms now make, device by device, and
answers one step (docs/slurm.md#layout-changes):

- `Unchanged`: the lines are the same (a node we drained for a change already made is resumed:
  `resume` True), unless its drain reason says the reconfigure is pending (RECONFIGURE_REASON): then
  `Rewrite` again;
- `Drain`: the lines differ and the node is not drained yet, or a job still holds a GRES whose device
  changes: Slurm starts nothing more there while it waits (`scontrol update ... state=drain`);
- `Rewrite`: the node is drained and no job holds a changing GRES: write the new lines, `scontrol
  reconfigure`, and resume the node if the drain was ours;
- `Restart`: the lines are written but slurmctld still has other GRES types or counts for the node
  than its node line says: Slurm 22.05 takes a change of `Gres=` in slurm.conf, or of a `Type`, only
  when slurmctld and slurmd restart (checked against the real daemons: `scontrol reconfigure` leaves
  the node's `Gres` as it was and refuses jobs for the new type). The node stays drained, with a
  reason saying so, until an operator has put the node line in slurm.conf and restarted them.

Draining comes before the rewrite even when no job holds a changing GRES, because a job could start on
one between reading the jobs and reconfiguring; once drained, nothing new starts. The reason we drain
with starts with DRAIN_REASON, so a node drained by an operator for something else is never resumed
by us.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from better_compute.domain.fleet.slurm import SlurmJob, SlurmNode, in_hostlist

DRAIN_REASON = "better-compute: GRES layout change"
"""How our drains start (`sinfo -R` shows it); the one reason we resume a node from."""

RECONFIGURE_REASON = f"{DRAIN_REASON}, reconfigure pending"
"""The drain reason while gres.conf is written and `scontrol reconfigure` has not yet succeeded: kept
in Slurm (read back with the node), so a node whose reconfigure failed, or whose bcd died between
the two, is reconfigured again, never resumed on lines slurmd has not read."""

_NAME = re.compile(r"(?:^|\s)Name=(\S+)")
_COUNT = re.compile(r"(?:^|\s)Count=(\d+)")
_NODE = re.compile(r"(?:^|\s)NodeName=(\S+)")


@dataclass(frozen=True)
class Unchanged:
    """Nothing to change; `resume` when the node is still drained by us for a change already made."""

    node: str
    resume: bool = False


@dataclass(frozen=True)
class Drain:
    """Drain the node with `reason`; `holders` are the jobs holding a GRES that changes (none: the
    node is drained first so nothing new starts before the rewrite)."""

    node: str
    reason: str
    holders: tuple[int, ...]


@dataclass(frozen=True)
class Rewrite:
    """Write `gres_conf`, `scontrol reconfigure`, then resume the node."""

    node: str
    gres_conf: str


@dataclass(frozen=True)
class Restart:
    """Keep the node drained with `reason`: slurmctld and slurmd must restart to take `gres`."""

    node: str
    reason: str
    gres: str


GresStep = Unchanged | Drain | Rewrite | Restart

RESTART_REASON = f"{DRAIN_REASON}, restart slurmctld and slurmd for Gres"


def gres_counts(text: str) -> dict[tuple[str, str | None], int]:
    """A node's `Gres=` (`gpu:3g.40gb:2,shard:3g.40gb:4(S:0)`) or a node line's as counts per (name,
    type). A shard's type is dropped: Slurm names shards by the type of their GPU, our node line
    does not."""
    counts: dict[tuple[str, str | None], int] = {}
    for item in re.sub(r"\([^)]*\)", "", text).split(","):
        parts = item.strip().split(":")
        if not item.strip() or item.strip() == "(null)":
            continue
        if len(parts) == 1 or not parts[-1].isdigit():
            parts.append("1")
        name, type_, count = parts[0], (parts[1] if len(parts) == 3 else None), int(parts[-1])
        key = (name, None if name == "shard" else type_)
        counts[key] = counts.get(key, 0) + count
    return counts


def devices(gres_conf: str, node: str) -> dict[str, list[str]]:
    """The node's devices per GRES name, in Slurm's index order: each `Name=` line of the node is one
    device, or `Count=` of them (a shard line), each named by its whole line. Comments and other
    nodes' lines are left out; a line without `NodeName=` counts for every node."""
    found: dict[str, list[str]] = {}
    for raw in gres_conf.splitlines():
        line = raw.split("#", 1)[0].strip()
        name = _NAME.search(line)
        if not line or name is None:
            continue
        owner = _NODE.search(line)
        if owner is not None and owner.group(1) != node:
            continue
        count = _COUNT.search(line)
        text = " ".join(line.split())
        found.setdefault(name.group(1), []).extend([text] * (int(count.group(1)) if count else 1))
    return found


def changing(current: str, wanted: str, node: str) -> dict[str, frozenset[int]]:
    """Per GRES name, the indices whose device differs between the two gres.conf texts (an index
    present in one only counts as changing)."""
    before, after = devices(current, node), devices(wanted, node)
    changed: dict[str, frozenset[int]] = {}
    for name in before.keys() | after.keys():
        old, new = before.get(name, []), after.get(name, [])
        indices = frozenset(
            i for i in range(max(len(old), len(new))) if i >= len(old) or i >= len(new) or old[i] != new[i]
        )
        if indices:
            changed[name] = indices
    return changed


def holders(jobs: Iterable[SlurmJob], node: str, changed: dict[str, frozenset[int]]) -> tuple[int, ...]:
    """The jobs not finished that hold, on `node`, a GRES index that changes (sorted ids)."""
    found = {
        job.job_id
        for job in jobs
        if not job.finished
        for held in job.gres
        if in_hostlist(node, held.node) and set(held.indices) & changed.get(held.name, frozenset())
    }
    return tuple(sorted(found))


def plan(
    slurm: SlurmNode,
    *,
    current: str,
    wanted: str,
    wanted_gres: str,
    jobs: Sequence[SlurmJob],
) -> GresStep:
    """The next step for the node `slurm` (as slurmctld has it): `current` is the gres.conf written,
    `wanted` the one the atoms make, `wanted_gres` their node line's `Gres=` value, `jobs` those
    slurmctld knows."""
    node, drained = slurm.name, slurm.drained
    ours = slurm.reason.startswith(DRAIN_REASON)
    changed = changing(current, wanted, node)
    if not changed and current.strip() == wanted.strip():
        if drained and slurm.reason.startswith(RECONFIGURE_REASON):
            return Rewrite(node, wanted)  # written, but the reconfigure is not known to have run
        if gres_counts(slurm.gres) != gres_counts(wanted_gres):
            return Restart(node, f"{RESTART_REASON} {wanted_gres}", wanted_gres)
        return Unchanged(node, resume=drained and ours)
    if not changed:
        # Only comments, order of other nodes' lines or spacing differ: no device moves.
        return Rewrite(node, wanted)
    held = holders(jobs, node, changed)
    if held:
        waiting = ",".join(str(job) for job in held[:5]) + (" ..." if len(held) > 5 else "")
        return Drain(node, f"{DRAIN_REASON}, waiting for job(s) {waiting}", held)
    if not drained:
        return Drain(node, DRAIN_REASON, ())
    return Rewrite(node, wanted)
