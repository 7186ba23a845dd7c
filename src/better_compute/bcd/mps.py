"""The gpu-sharing unit for mps pools: the MPS control daemon as a systemd service, and the env a
slot's container needs to be one of its clients.

One control daemon per node serves the node's MPS GPUs (`CUDA_VISIBLE_DEVICES`), with a pipe
directory of its own that every client must name too, and its logs beside it. A slot's share of the
GPU (`mpsUnits`, out of 100) becomes the client's `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, which can only
tighten what the daemon allows, so a slot never takes more SMs than it was booked for.

Starting and stopping go through a `Runner`, so the unit is rendered and driven the same way in
tests (a recording runner) and on a node (systemctl).
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

UNIT_NAME = "bcd-mps.service"
CONTROL = "/usr/bin/nvidia-cuda-mps-control"


@dataclass(frozen=True, slots=True)
class MpsPaths:
    """Where the daemon and its clients meet: the pipe directory and the shared-memory directory
    (the daemon's `/dev/shm`, which each client container mounts as its own), and where the daemon
    logs."""

    pipe_directory: Path
    log_directory: Path
    shm_directory: Path

    @classmethod
    def under(cls, root: Path) -> MpsPaths:
        return cls(root / "pipe", root / "log", root / "shm")


def unit_text(gpu_uuids: Sequence[str], paths: MpsPaths, control: str = CONTROL) -> str:
    """`bcd-mps.service`: `nvidia-cuda-mps-control -d` for these GPUs, stopped with its `quit`."""
    if not gpu_uuids:
        raise ValueError("an MPS daemon needs at least one GPU")
    env = {
        "CUDA_VISIBLE_DEVICES": ",".join(gpu_uuids),
        "CUDA_MPS_PIPE_DIRECTORY": str(paths.pipe_directory),
        "CUDA_MPS_LOG_DIRECTORY": str(paths.log_directory),
    }
    environment = "\n".join(f"Environment={shlex.quote(f'{k}={v}')}" for k, v in env.items())
    quit_command = f"/bin/sh -c {shlex.quote(f'echo quit | {control}')}"
    return (
        "[Unit]\n"
        "Description=better-compute MPS control daemon\n"
        "After=nvidia-persistenced.service\n"
        "\n"
        "[Service]\n"
        "Type=forking\n"
        f"{environment}\n"
        f"ExecStartPre=/bin/mkdir -p {shlex.quote(str(paths.pipe_directory))} "
        f"{shlex.quote(str(paths.log_directory))}\n"
        f"ExecStart={control} -d\n"
        f"ExecStop={quit_command}\n"
        "Restart=on-failure\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def client_env(paths: MpsPaths, mps_units: int) -> dict[str, str]:
    """What a slot's container needs to be a client of the node's daemon, at its booked share."""
    if not 1 <= mps_units <= 100:
        raise ValueError(f"mpsUnits must be 1 to 100, not {mps_units}")
    return {
        "CUDA_MPS_PIPE_DIRECTORY": str(paths.pipe_directory),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(mps_units),
    }


class Runner(Protocol):
    """Runs a command on the node (systemctl in production, a recorder in tests)."""

    def run(self, argv: Sequence[str]) -> None: ...


class SystemdRunner:
    """systemctl, with a failure raised as the command's own message."""

    def run(self, argv: Sequence[str]) -> None:
        done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip() or done.returncode}")


class MpsUnit:
    """Keeps `bcd-mps.service` as the node's MPS GPUs need it: written and started while there are
    any, stopped and disabled when there are none. Writing the same unit twice does nothing."""

    def __init__(self, unit_dir: Path, paths: MpsPaths, runner: Runner) -> None:
        self.path = unit_dir / UNIT_NAME
        self.paths = paths
        self.runner = runner

    def converge(self, gpu_uuids: Sequence[str]) -> bool:
        """Make the unit serve exactly `gpu_uuids`; True when anything changed."""
        if not gpu_uuids:
            if not self.path.exists():
                return False
            self.runner.run(["systemctl", "disable", "--now", UNIT_NAME])
            self.path.unlink()
            self.runner.run(["systemctl", "daemon-reload"])
            return True
        text = unit_text(sorted(gpu_uuids), self.paths)
        if self.path.exists() and self.path.read_text(encoding="utf-8") == text:
            return False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(text, encoding="utf-8")
        self.runner.run(["systemctl", "daemon-reload"])
        self.runner.run(["systemctl", "enable", UNIT_NAME])
        self.runner.run(["systemctl", "restart", UNIT_NAME])
        return True
