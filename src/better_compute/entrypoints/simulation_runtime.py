"""Which container runtime `serve --fleet`'s simulated nodes use (`--runtime auto|podman|fake`): a
small module of its own, read when the command line is parsed, before anything heavy is imported."""

from __future__ import annotations

import enum
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

NVIDIA_DRIVER = Path("/proc/driver/nvidia")
"""Present where the NVIDIA kernel module is loaded."""


PODMAN_CREATE_ARGS = ("--ulimit=nofile=1024:1024", "--ulimit=nproc=1024:1024")
"""What `serve --fleet` adds to every simulated container's `podman create` under podman, before
`--container-arg`s (a later `--ulimit` of the same kind wins): modest open-file and process limits
that any host allows. Without them podman asks runc for its own defaults, which a server that may not
raise its limits (one that is itself in a container, say) cannot give, and every create fails with
"error setting rlimit ... operation not permitted". The walkthrough's model server needs far fewer."""


class SimulationRuntime(enum.StrEnum):
    """What `serve --fleet --runtime` takes."""

    auto = "auto"
    podman = "podman"
    fake = "fake"


@dataclass(frozen=True)
class RuntimeChoice:
    """The runtime the simulated nodes run containers with, and why (the line `serve` prints)."""

    kind: Literal["podman", "fake"]
    reason: str


def choose_runtime(
    asked: SimulationRuntime, *, podman: str, podman_on_path: bool, root: bool, nvidia_driver: bool
) -> RuntimeChoice:
    """The simulated nodes' container runtime. podman needs its binary (`podman`) on PATH, root (the
    simulated driver makes device nodes, and the specs go to /var/run/cdi) and no NVIDIA driver on
    the machine: the simulated device nodes carry the driver's own numbers (195, ...), so on a GPU
    machine a container would be handed a real GPU. `auto` takes podman when all three hold, else
    the fake, saying why; asked for by name, podman that cannot be had is a ValueError saying why."""
    missing = [
        why
        for why, lacking in (
            (f"{podman} is not on PATH", not podman_on_path),
            ("the server is not root (device nodes need mknod)", not root),
            (f"an NVIDIA driver is loaded ({NVIDIA_DRIVER}): simulated device nodes would be a real GPU's",
             nvidia_driver),
        )
        if lacking
    ]  # fmt: skip
    if asked is SimulationRuntime.fake:
        return RuntimeChoice("fake", "asked for (--runtime fake)")
    if asked is SimulationRuntime.podman:
        if missing:
            raise ValueError(f"--runtime podman: {'; '.join(missing)}")
        return RuntimeChoice("podman", "asked for (--runtime podman)")
    if missing:
        return RuntimeChoice("fake", "; ".join(missing))
    return RuntimeChoice("podman", f"{podman} is on PATH, the server is root and no NVIDIA driver is loaded")


def choose_runtime_here(asked: SimulationRuntime, podman: Sequence[str]) -> RuntimeChoice:
    """`choose_runtime` with this machine's answers."""
    return choose_runtime(
        asked,
        podman=podman[0],
        podman_on_path=shutil.which(podman[0]) is not None,
        root=os.geteuid() == 0,
        nvidia_driver=NVIDIA_DRIVER.exists(),
    )


__all__ = [
    "NVIDIA_DRIVER",
    "PODMAN_CREATE_ARGS",
    "RuntimeChoice",
    "SimulationRuntime",
    "choose_runtime",
    "choose_runtime_here",
]
