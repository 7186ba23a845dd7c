"""`--slurm-gres-conf PATH`: the node's gres.conf, written by `bcd` from its own atoms, and Slurm told
of a change only once no job holds a GRES that changes (docs/slurm.md#layout-changes).

Each pass makes the node's lines (`domain.fleet.slurm_gres.report_gres`) and follows the planner of
`domain.fleet.slurm_reconfigure` one step or two: drain the node in Slurm while a running job holds a
GRES whose device changes; once drained and free of such jobs, write the file atomically (a temporary
file in the same directory, flushed, then renamed over it, so slurmd never reads half a file),
`scontrol reconfigure`, and resume the node. When the lines are what the file holds already, nothing is
written and nothing is asked of Slurm but the node's state.

Slurm is reached through `SlurmNodeControl`, which the Slurm adapter (`better_compute.slurm.commands`,
wired by the entry point) satisfies; bcd knows no command line.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Protocol

from better_compute.bcd.logs import Log
from better_compute.domain.fleet.slurm import SlurmJob, SlurmNode
from better_compute.domain.fleet.slurm_gres import SlurmGres
from better_compute.domain.fleet.slurm_reconfigure import (
    DRAIN_REASON,
    RECONFIGURE_REASON,
    Drain,
    GresStep,
    Restart,
    Unchanged,
    plan,
)


class SlurmNodeControl(Protocol):
    """What bcd asks of Slurm about its own node (a part of the server's `SlurmControl` port)."""

    def node(self, name: str) -> SlurmNode: ...

    def jobs_on(self, node: str) -> tuple[SlurmJob, ...]: ...

    def drain(self, node: str, reason: str) -> None: ...

    def resume(self, node: str) -> None: ...

    def reconfigure(self) -> None: ...


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text` in one rename (mode 0644: slurmd reads it, anyone may)."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


class SlurmGresConf:
    """The node's gres.conf at `path`, kept to the node's atoms under Slurm named `slurm_node`."""

    def __init__(self, path: Path, slurm_node: str, control: SlurmNodeControl, log: Log) -> None:
        self.path = path
        self.slurm_node = slurm_node
        self.control = control
        self.log = log

    def _current(self) -> str:
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""

    def _plan(self, wanted: SlurmGres) -> tuple[GresStep, SlurmNode]:
        node = self.control.node(self.slurm_node)
        jobs = self.control.jobs_on(self.slurm_node)
        gres = wanted.node_line.partition(" Gres=")[2]
        return plan(node, current=self._current(), wanted=wanted.gres_conf, wanted_gres=gres, jobs=jobs), node

    def converge(self, wanted: SlurmGres) -> tuple[GresStep, ...]:
        """One pass; the steps taken, in order. After a first drain or a rewrite the planner is asked
        again, so a node no job holds a changing GRES on is drained, rewritten, reconfigured and
        resumed in one pass; a drain waiting for jobs ends the pass (the next one looks again)."""
        taken: list[GresStep] = []
        step, node = self._plan(wanted)
        for _ in range(4):
            taken.append(step)
            if isinstance(step, Unchanged):
                if step.resume:
                    self.control.resume(self.slurm_node)
                    self.log.info("slurm.resumed", node=self.slurm_node)
                break
            if isinstance(step, Drain | Restart):
                if node.drained and not node.reason.startswith(DRAIN_REASON):
                    break  # drained by someone else for their own reason: kept, and never resumed by us
                if not node.drained or node.reason != step.reason:
                    self.control.drain(self.slurm_node, step.reason)
                    self.log.warning("slurm.drained", node=self.slurm_node, reason=step.reason)
                if isinstance(step, Restart) or step.holders:
                    break
                # Drained, with no job on a changing GRES: asked again, it is the rewrite.
            else:
                # A drain of ours says the reconfigure is pending until it has run, so a failure
                # (or a crash) after the write leaves the node drained and reconfigured next pass.
                pending = node.drained and node.reason.startswith(DRAIN_REASON)
                if pending and node.reason != RECONFIGURE_REASON:
                    self.control.drain(self.slurm_node, RECONFIGURE_REASON)
                write_atomically(self.path, step.gres_conf)
                self.control.reconfigure()
                if pending:
                    self.control.drain(self.slurm_node, DRAIN_REASON)
                self.log.info("slurm.reconfigured", node=self.slurm_node, path=str(self.path))
            step, node = self._plan(wanted)
        return tuple(taken)
