"""A Slurm that cannot be asked: the adapter says so as `SlurmUnreachable`, never as a hang or a crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from better_compute.service.fleet.slurm import SlurmUnreachable
from better_compute.slurm.commands import SlurmCommands


def test_missing_commands_are_unreachable(tmp_path: Path) -> None:
    slurm = SlurmCommands(env={"PATH": str(tmp_path)})
    with pytest.raises(SlurmUnreachable, match="scontrol is not installed"):
        slurm.job(1)


def test_a_command_that_does_not_answer_in_time_is_unreachable(tmp_path: Path) -> None:
    """A controller that does not answer leaves scontrol waiting on its socket: here, a scontrol that
    waits; the adapter kills it at the timeout."""
    scontrol = tmp_path / "scontrol"
    scontrol.write_text("#!/bin/sh\nexec /bin/sleep 30\n")
    scontrol.chmod(0o755)
    slurm = SlurmCommands(env={"PATH": str(tmp_path)}, timeout=0.3)
    with pytest.raises(SlurmUnreachable, match=r"scontrol -o did not answer in 0.3s"):
        slurm.job(1)
