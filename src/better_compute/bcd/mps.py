"""The gpu-sharing unit for mps pools: the MPS control daemon as a systemd service, the limits it puts
on every client, and the env a slot's container needs to be one of them.

One control daemon per node serves the node's MPS GPUs (`CUDA_VISIBLE_DEVICES`, by uuid), with a pipe
directory of its own that every client must name too, its logs beside it, and a shared-memory
directory that is its `/dev/shm` and each client container's (`BindPaths=`): MPS clients and their
server meet through both.

The limits are set on the daemon's side, where a client's own settings cannot loosen them (NVIDIA's
MPS docs: a client's `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` or `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` "will
only further constrain" what the control daemon set). With the pool's `replicas` R, every client gets
at most 100/R percent of the SMs' threads (`set_default_active_thread_percentage`) and the GPU's
memory/R of device memory on each GPU (`set_default_device_pinned_mem_limit <uuid> <N>M`). The limits
are per client *process*: R clients fill the GPU.

They hold against a workload that uses MPS as a client, not against one that sets out to undo them:
the control daemon takes its commands from a pipe in the pipe directory, which every client must
reach, and a process that can reach it can send `set_active_thread_percentage <server> 100`, new
defaults or `quit` with a front-end of its own. So the node's MPS clients are one trust domain (an
mps pool has one tenant, docs/bcd.md), and `bcd` keeps the daemon up against the rest: the unit
restarts whenever the daemon ends (`Restart=always`; a `quit` ends it cleanly), and `MpsUnit.converge`
starts it again when it finds it inactive.

They are given twice, on purpose. The control commands run as `ExecStartPost=` lines, each time the
daemon starts, since `quit` (every stop) loses them; systemd runs them on its own restarts too, which
`bcd` would never see. They are the documented interface, and both of NVIDIA's own Kubernetes
components (the device plugin's MPS control daemon and the DRA driver's) set their limits this way.
But `ExecStartPost=` runs after the daemon already accepts clients, and a server spawned in between
would keep no limits for as long as it lives; so the same values are also in the daemon's environment
(`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` "at the MPS control daemon
level"), which the daemon reads as it starts. The device is named by uuid, which the MPS docs allow
("a device UUID string or an integer ordinal") and which no `CUDA_VISIBLE_DEVICES` remapping or CUDA
device order can point at another GPU; a limit for an id the server does not have is ignored.

The GPUs must be in `exclusive-process` compute mode before the daemon serves them (the host
converger sets it, `bcd/host.py`), so the unit is never enabled at boot: a reboot sets the compute
mode back to `default`, and only `bcd` starts the daemon, after setting it again.

Starting and stopping go through a `Runner`, so the unit is rendered and driven the same way in
tests (a recording runner) and on a node (systemctl).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

UNIT_NAME = "bcd-mps.service"
CONTROL = "/usr/bin/nvidia-cuda-mps-control"
EXCLUSIVE_RECORD = "exclusive-process.json"
"""The file, beside the MPS directories, naming the GPUs `bcd` put in exclusive-process."""

RESTART_SEC = 1
"""Seconds systemd waits before it starts the daemon again after it ended. systemd's own start limit
(5 starts in 10 s) still applies: a daemon that keeps ending is left failed for the rest of that
window, and `bcd` starts it again on a later pass (`MpsUnit.converge`)."""

DIRECTORY_MODE = 0o755
"""The pipe, log and shared-memory directories: root's, readable by clients (as NVIDIA's device
plugin and DRA driver make theirs). The shared-memory directory gets a tmpfs mounted on it, mode
1777 like the host's `/dev/shm`."""

_SAFE_PATH = re.compile(r"/[A-Za-z0-9._/+-]*")
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


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


@dataclass(frozen=True, slots=True)
class MpsGpu:
    """A GPU the daemon serves, and its memory, which the pool's replicas share."""

    uuid: str
    memory_mib: int


def active_thread_percentage(replicas: int) -> int:
    """Each client's share of the SMs' threads: 100/R, rounded down (the same share as a slot's
    `mpsUnits`), at least 1."""
    _check_replicas(replicas)
    return max(1, 100 // replicas)


def pinned_memory_mib(memory_mib: int, replicas: int) -> int:
    """Each client's device memory on a GPU of `memory_mib`: memory/R in MiB, at least 1."""
    _check_replicas(replicas)
    if memory_mib < 1:
        raise ValueError(f"a GPU's memory must be at least 1 MiB, not {memory_mib}")
    return max(1, memory_mib // replicas)


def control_commands(gpus: Sequence[MpsGpu], replicas: int) -> list[str]:
    """What `nvidia-cuda-mps-control` is told after each start: the default limits of every client."""
    return [
        f"set_default_active_thread_percentage {active_thread_percentage(replicas)}",
        *(
            f"set_default_device_pinned_mem_limit {g.uuid} {pinned_memory_mib(g.memory_mib, replicas)}M"
            for g in gpus
        ),
    ]


def unit_text(gpus: Sequence[MpsGpu], replicas: int, paths: MpsPaths, control: str = CONTROL) -> str:
    """`bcd-mps.service`: `nvidia-cuda-mps-control -d` for these GPUs, its clients limited to
    1/`replicas` of each, `/dev/shm` its shared-memory directory, stopped with its `quit`."""
    if not gpus:
        raise ValueError("an MPS daemon needs at least one GPU")
    for gpu in gpus:
        if not _SAFE_ID.fullmatch(gpu.uuid):
            raise ValueError(f"{gpu.uuid!r} is not a GPU uuid a systemd unit can carry")
    pipe, log, shm, ctl = (
        _unit_path(p) for p in (paths.pipe_directory, paths.log_directory, paths.shm_directory, Path(control))
    )
    env = {
        "CUDA_VISIBLE_DEVICES": ",".join(g.uuid for g in gpus),
        "CUDA_MPS_PIPE_DIRECTORY": pipe,
        "CUDA_MPS_LOG_DIRECTORY": log,
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(active_thread_percentage(replicas)),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": ",".join(
            f"{g.uuid}={pinned_memory_mib(g.memory_mib, replicas)}M" for g in gpus
        ),
    }
    environment = "".join(f"Environment={shlex.quote(f'{k}={v}')}\n" for k, v in env.items())
    mount = f"mountpoint -q {shm} || mount -t tmpfs -o mode=1777,nosuid,nodev,noexec bcd-mps-shm {shm}"
    posts = "".join(
        f"ExecStartPost=/bin/sh -c {shlex.quote(f'echo {c} | {ctl}')}\n"
        for c in control_commands(gpus, replicas)
    )
    quit_ = f"echo quit | {ctl}"
    return (
        "[Unit]\n"
        "Description=better-compute MPS control daemon\n"
        "After=nvidia-persistenced.service\n"
        "\n"
        "[Service]\n"
        "Type=forking\n"
        f"{environment}"
        # `+`: outside the unit's mount namespace, so the directory exists (and the tmpfs is mounted,
        # once: client containers keep the one they bound) before `BindPaths=` needs it.
        f"ExecStartPre=+/bin/mkdir -p -m {DIRECTORY_MODE:04o} {pipe} {log} {shm}\n"
        f"ExecStartPre=+/bin/sh -c {shlex.quote(mount)}\n"
        f"BindPaths={shm}:/dev/shm\n"
        f"ExecStart={ctl} -d\n"
        f"{posts}"
        # `-`: systemd runs the stop command also after the daemon ended by itself (a `quit` sent
        # through the pipe), when there is nothing left to tell it; that must not fail the unit.
        f"ExecStop=-/bin/sh -c {shlex.quote(quit_)}\n"
        # `always`: a `quit` ends the daemon with status 0, which `on-failure` would leave down. A
        # stop systemd makes itself (`systemctl stop`, `restart`, `disable --now`) is never restarted.
        "Restart=always\n"
        f"RestartSec={RESTART_SEC}\n"
    )


def client_env(paths: MpsPaths, mps_units: int) -> dict[str, str]:
    """What a slot's container needs to be a client of the node's daemon, at its booked share (which
    can only tighten the daemon's per-client limit, never loosen it)."""
    if not 1 <= mps_units <= 100:
        raise ValueError(f"mpsUnits must be 1 to 100, not {mps_units}")
    return {
        "CUDA_MPS_PIPE_DIRECTORY": str(paths.pipe_directory),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(mps_units),
    }


def _check_replicas(replicas: int) -> None:
    if not 1 <= replicas <= 100:
        raise ValueError(f"replicas must be 1 to 100, not {replicas}")


def _unit_path(path: Path) -> str:
    """`path` as a unit file can carry it: absolute, and nothing systemd would read as a quote, a
    specifier (`%`), a variable (`$`), a separator (whitespace, `:` in `BindPaths=`) or a new line."""
    text = str(path)
    if not _SAFE_PATH.fullmatch(text):
        raise ValueError(
            f"{text!r} cannot go into a systemd unit: an absolute path of letters, digits and ._/+- only"
        )
    return text


class Runner(Protocol):
    """Runs a command on the node (systemctl in production, a recorder in tests), and says whether a
    unit is active."""

    def run(self, argv: Sequence[str]) -> None: ...

    def active(self, unit: str) -> bool:
        """Whether the unit is active now (`systemctl is-active`)."""
        ...


class CommandFailed(RuntimeError):
    """A command of the unit's (systemctl) did not succeed; the message is its own."""


class SystemdRunner:
    """systemctl, with a failure raised as the command's own message."""

    def run(self, argv: Sequence[str]) -> None:
        done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise CommandFailed(f"{' '.join(argv)} failed: {done.stderr.strip() or done.returncode}")

    def active(self, unit: str) -> bool:
        """`systemctl is-active`: only `active` is (it exits 0); a unit activating, inactive, failed
        or unknown is not, and neither is any unit where systemctl cannot run."""
        try:
            done = subprocess.run(
                ["systemctl", "is-active", "--quiet", "--", unit], capture_output=True, text=True, check=False
            )
        except OSError:
            return False
        return done.returncode == 0


RESTORABLE_MODES = ("default", "prohibited")
"""The compute modes `bcd` gives a GPU back in: those it can find a GPU in before it sets
exclusive-process (it never changes a GPU already exclusive-process, nor one whose mode is unknown)."""


class ExclusiveRecord:
    """The GPUs `bcd` itself put in exclusive-process, each with the compute mode it had before, kept
    in a file so that a restarted `bcd` still gives each its mode back once it leaves the mps pool,
    and never touches a GPU an operator set. Written whole (a temporary file renamed over it). A GPU
    is added before its mode is changed and taken out after it is changed back, so a crash in between
    errs towards giving it back. A file that cannot be read counts as naming no GPU (its GPUs keep
    their mode until a reboot resets it: the safe side, since exclusive-process only keeps other
    processes off the GPU).

    The file is `{"gpus": [uuid...], "modes": {uuid: mode}}`; one an earlier `bcd` wrote has the
    list only, and its GPUs go back to `default`, as that `bcd` would have given them back. The list
    is still written, so an earlier `bcd` run on the same state still gives the GPUs back."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def modes(self) -> dict[str, str]:
        """By GPU uuid, the compute mode it had before `bcd` set exclusive-process."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        listed, modes = data.get("gpus"), data.get("modes")
        if not isinstance(listed, list):
            return {}
        if not isinstance(modes, dict):
            modes = {}
        gpus = [g for g in listed if isinstance(g, str)]
        return {g: modes[g] if modes.get(g) in RESTORABLE_MODES else "default" for g in gpus}

    def gpus(self) -> set[str]:
        return set(self.modes())

    def add(self, gpu: str, before: str) -> None:
        """Name `gpu`, which was in compute mode `before` (one of `RESTORABLE_MODES`)."""
        if before not in RESTORABLE_MODES:
            raise ValueError(f"{before!r} is not a compute mode bcd gives a GPU back in")
        held = self.modes()
        if held.get(gpu) != before:
            self._write({**held, gpu: before})

    def discard(self, gpu: str) -> None:
        held = self.modes()
        if gpu in held:
            del held[gpu]
            self._write(held)

    def _write(self, modes: dict[str, str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f".{self.path.name}.partial")
        data = {"gpus": sorted(modes), "modes": dict(sorted(modes.items()))}
        partial.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        partial.replace(self.path)


class MpsUnit:
    """Keeps `bcd-mps.service` as the node's MPS GPUs need it: written and started while there are
    any, stopped and removed when there are none. Writing the same unit twice does nothing; a changed
    unit (GPUs, replicas, memory) is restarted, and so is one whose GPUs had to be put back in
    exclusive-process. One found inactive (its daemon told `quit` through the pipe directory, or left
    failed by systemd's start limit) is started again. It is never enabled (a boot link an older
    `bcd` made is removed): after a reboot the first pass of `bcd` starts it, once the compute modes
    are set again. The caller sets the compute modes before each `converge`, so a start always
    finds them set."""

    def __init__(
        self,
        unit_dir: Path,
        paths: MpsPaths,
        runner: Runner,
        *,
        control: str = CONTROL,
        record: Path | None = None,
    ) -> None:
        self.path = unit_dir / UNIT_NAME
        self.paths = paths
        self.runner = runner
        self.control = control
        self.exclusive = ExclusiveRecord(record or paths.pipe_directory.parent / EXCLUSIVE_RECORD)
        self._started = False
        """This process has started the unit as it is written (a new `bcd` starts it once: after a
        reboot nothing else does; on a running daemon `systemctl start` does nothing)."""
        self._restart = False
        """The unit changed, or its GPUs' compute mode did, since the daemon last (re)started: kept
        across a failed `systemctl`, so the next pass restarts it still."""
        self.found_inactive = False
        """The last `converge` found the unit it had started inactive, and started it again."""

    def converge(self, gpus: Sequence[MpsGpu], replicas: int = 1, *, restart: bool = False) -> bool:
        """Make the unit serve exactly `gpus`, each client limited to 1/`replicas` of each; `restart`:
        restart it even when it is unchanged (a GPU's compute mode was set again). A unit this process
        started and finds inactive now is started again (`found_inactive`). True when anything
        changed. A failing `systemctl` raises `CommandFailed`."""
        self.found_inactive = False
        if not gpus:
            self._started = self._restart = False
            if not self.path.exists():
                return False
            self.runner.run(["systemctl", "disable", "--now", UNIT_NAME])
            self.path.unlink()
            self.runner.run(["systemctl", "daemon-reload"])
            return True
        text = unit_text(sorted(gpus, key=lambda g: g.uuid), replicas, self.paths, self.control)
        self._make_directories()
        if restart:
            self._restart = True
        if not (self.path.exists() and self.path.read_text(encoding="utf-8") == text):
            self._restart = True
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_name(f".{UNIT_NAME}.partial")
            partial.write_text(text, encoding="utf-8")
            partial.replace(self.path)
            self.runner.run(["systemctl", "daemon-reload"])
            self.runner.run(["systemctl", "disable", UNIT_NAME])
        if self._restart:
            self.runner.run(["systemctl", "restart", UNIT_NAME])
        elif not self._started:
            self.runner.run(["systemctl", "start", UNIT_NAME])
        elif not self.runner.active(UNIT_NAME):
            self.found_inactive = True
            self.runner.run(["systemctl", "start", UNIT_NAME])
        else:
            return False
        self._started, self._restart = True, False
        return True

    def _make_directories(self) -> None:
        for directory in (self.paths.pipe_directory, self.paths.log_directory, self.paths.shm_directory):
            directory.mkdir(parents=True, exist_ok=True)
            # Once its tmpfs is mounted, the shared-memory directory's mode (1777) is the mount's.
            if directory.stat().st_mode & 0o7777 != DIRECTORY_MODE and not directory.is_mount():
                directory.chmod(DIRECTORY_MODE)
