"""The podman adapter: `bcd.runtime.ContainerRuntime` over podman's command line.

One small adapter over the CLI rather than a client of podman's REST socket: the CLI is what every
podman install has (no socket service to enable), and each call is one process with a timeout, so a
hung podman costs one pass, never the daemon. `argv` is the command prefix (`["podman", "--runtime",
"runc"]` where crun refuses the host's cgroups) and `create_args` are added to every create
(`--ulimit nofile=1024:1024`, say): the operator's, never a tenant's.

What a create asks for (docs/bcd.md#running-containers): the deterministic name
(`bcd.containers.container_name`), the three labels, the allocation's CDI device
(`better-compute.io/gpu=<allocation>`), `--cpus` and `--memory` from the spec's resources, its
environment, each port published as `<publish-address>::<port>` (a random host port, read back from
`podman ps`), `--stop-timeout`, `--pull=<policy>` (`never` by default: a node pulls nothing unless
told), and the command: `command` replaces the image's entrypoint (`--entrypoint` as a JSON list),
`args` its command, as Kubernetes does. The image reference was parsed by the server
(`domain.kernel.containers.check_image`) and cannot read as an option; every value is one argv item,
never a shell word.
"""

from __future__ import annotations

import builtins
import json
import os
import selectors
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from better_compute.bcd import cdi
from better_compute.bcd.containers import (
    ALLOCATION_LABEL,
    ATOMS_LABEL,
    JOB_LABEL,
    MAX_LOG_BYTES,
    MAX_LOG_TAIL,
    NODE_LABEL,
    SPEC_LABEL,
    Found,
    NoContainer,
    RuntimeFailure,
    State,
    atoms_label,
    atoms_of_label,
    container_name,
    published,
    spec_digest,
)
from better_compute.domain.fleet.node_agents import EXEC_OUTPUT_MAX, EXEC_TIMED_OUT, ExecResult, cut_output
from better_compute.domain.kernel.containers import ContainerSpec

DEFAULT_ARGV = ("podman",)
PULL_POLICIES = ("never", "missing", "always", "newer")
COMMAND_TIMEOUT = 120.0
"""Seconds a `podman create` may take (one that pulls is bounded by it too)."""
QUICK_TIMEOUT = 20.0
"""Seconds every other podman command may take (`ps`, `inspect`, `start`, `rm`, `logs`; a `stop`
gets its grace period on top): a hung podman costs one pass, never the daemon."""

_IMAGE_MISSING = (
    "image not known",
    "initializing source",
    "manifest unknown",
    "unable to pull",
    "requested access to the resource is denied",
    "name unknown",
)
"""What podman says when the image is not on the node and cannot be pulled (with `--pull=never`:
`image not known`; with a pull: the registry's error)."""

_STATES: dict[str, State] = {
    "created": "created",
    "running": "running",
    "exited": "exited",
    "stopped": "exited",
}


def _fits_env_file(value: str) -> bool:
    """Whether podman's `--env-file` carries `value` as it is: one line (a line break would start
    a line podman reads as another variable, or, without `=`, one taken from podman's own
    environment)."""
    return "\n" not in value and "\r" not in value


def env_file_text(spec: ContainerSpec) -> str:
    """The `--env-file` of `spec`: `NAME=value` a line, for every value that fits one."""
    return "".join(f"{name}={value}\n" for name, value in sorted(spec.env.items()) if _fits_env_file(value))


def _current_first(found: Sequence[Found], node: str) -> list[Found]:
    """An allocation's containers, the one it runs under now first: during a replacement two can
    share an allocation for a moment, and its log is the current one's (its name, running)."""
    return sorted(
        found, key=lambda f: (f.name != container_name(node, f.allocation_id), f.state != "running", f.id)
    )


def _stderr(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if "level=warning" not in line]
    return ("\n".join(lines) or done.stderr).strip()


class PodmanRuntime:
    """The containers of node `node` through podman."""

    def __init__(
        self,
        node: str,
        *,
        argv: Sequence[str] = DEFAULT_ARGV,
        create_args: Sequence[str] = (),
        publish_address: str = "127.0.0.1",
        pull: str = "never",
        stop_timeout: int = 10,
        timeout: float = COMMAND_TIMEOUT,
        quick_timeout: float = QUICK_TIMEOUT,
        env_dir: Path | None = None,
    ) -> None:
        if pull not in PULL_POLICIES:
            raise ValueError(f"pull policy {pull!r} is not one of {', '.join(PULL_POLICIES)}")
        self.node = node
        self.argv = list(argv)
        self.create_args = list(create_args)
        self.publish_address = publish_address
        self.pull = pull
        self.stop_timeout = stop_timeout
        self.timeout = timeout
        self.quick_timeout = quick_timeout
        self.env_dir = env_dir
        """Where a create's `--env-file` is written (0600, removed after the create): bcd's state
        directory; None: the system's temporary directory."""

    def _run(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [*self.argv, *args],
                capture_output=True,
                text=True,
                timeout=timeout or self.quick_timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise RuntimeFailure(f"podman {args[0]} took longer than {exc.timeout:g} s") from None
        except OSError as exc:
            raise RuntimeFailure(f"podman cannot be run ({self.argv[0]}): {exc}") from None

    def _checked(self, *args: str, timeout: float | None = None) -> str:
        done = self._run(*args, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeFailure(f"podman {args[0]}: {_stderr(done)}")
        return done.stdout

    def create_argv(
        self,
        allocation_id: str,
        spec: ContainerSpec,
        *,
        digest: str | None = None,
        atoms: Sequence[str] = (),
        env_file: str | None = None,
    ) -> list[str]:
        """The `podman create` arguments (after the prefix) for `spec` run as `allocation_id` on
        `atoms`; `digest` is its `better-compute.spec` label (`spec_digest`). The environment is
        read from `env_file` (`env_file_text`), never on the command line, which any local user
        reads in /proc; only a value holding a line break, which an env file cannot carry, is
        passed as `--env`."""
        args = [
            "create",
            "--name", container_name(self.node, allocation_id),
            "--label", f"{NODE_LABEL}={self.node}",
            "--label", f"{ALLOCATION_LABEL}={allocation_id}",
            "--label", f"{SPEC_LABEL}={digest or spec_digest(spec, atoms)}",
            "--label", f"{ATOMS_LABEL}={atoms_label(atoms)}",
            "--device", cdi.qualified_name(allocation_id),
            f"--pull={self.pull}",
            "--stop-timeout", str(self.stop_timeout),
        ]  # fmt: skip
        if spec.cpu is not None:
            args += ["--cpus", f"{spec.cpu:g}"]
        if spec.memory_mib is not None:
            args += ["--memory", f"{spec.memory_mib}m"]
        if env_file is not None and env_file_text(spec):
            args += ["--env-file", env_file]
        for name, value in sorted(spec.env.items()):
            if not _fits_env_file(value):
                args += ["--env", f"{name}={value}"]
        for port in published(spec):
            args += ["--publish", f"{self.publish_address}::{port}"]
        if spec.command:
            args += ["--entrypoint", json.dumps(list(spec.command))]
        args += [*self.create_args, spec.image, *spec.args]
        return args

    # -- ContainerRuntime ---------------------------------------------------------------------

    def create(
        self,
        allocation_id: str,
        spec: ContainerSpec,
        *,
        digest: str | None = None,
        atoms: Sequence[str] = (),
    ) -> str:
        text = env_file_text(spec)
        env_file: str | None = None
        if text:
            try:
                if self.env_dir is not None:
                    self.env_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
                handle, env_file = tempfile.mkstemp(prefix=".create-", suffix=".env", dir=self.env_dir)
                with os.fdopen(handle, "w", encoding="utf-8") as out:  # mkstemp: mode 0600
                    out.write(text)
            except OSError as exc:
                raise RuntimeFailure(f"the container's env file cannot be written: {exc}") from None
        try:
            argv = self.create_argv(allocation_id, spec, digest=digest, atoms=atoms, env_file=env_file)
            done = self._run(*argv, timeout=self.timeout)
        finally:
            if env_file is not None:
                Path(env_file).unlink(missing_ok=True)
        if done.returncode != 0:
            said = _stderr(done)
            missing = any(s in said for s in _IMAGE_MISSING)
            raise RuntimeFailure(said, "image-not-found" if missing else "create-failed")
        lines = done.stdout.strip().splitlines()
        if not lines or not lines[-1].strip():
            raise RuntimeFailure("podman create succeeded but printed no container id")
        return lines[-1].strip()

    def start(self, container_id: str) -> None:
        self._checked("start", container_id)

    def stop(self, container_id: str, timeout: int) -> None:
        self._checked("stop", "--time", str(timeout), container_id, timeout=timeout + self.quick_timeout)

    def remove(self, container_id: str) -> None:
        done = self._run("rm", "--force", "--time", "0", container_id)
        if done.returncode != 0 and "no such container" not in done.stderr:
            raise RuntimeFailure(f"podman rm: {_stderr(done)}")

    def list(self) -> list[Found]:
        """This node's containers (by its label), with their state, exit code and published ports;
        an exited one's OOM kill read from `podman inspect`."""
        out = self._checked("ps", "--all", "--filter", f"label={NODE_LABEL}={self.node}", "--format", "json")
        try:
            return self._found(out)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            # Anything podman says that is not what it documents is its failure, not the daemon's.
            raise RuntimeFailure(
                f"podman ps answered what bcd cannot read ({type(exc).__name__}: {exc}): {out[:200]!r}"
            ) from None

    def jobs(self) -> builtins.list[Found]:
        """The containers Slurm jobs run for replicas on this host (by `JOB_LABEL`), read as `list`
        reads this node's own."""
        out = self._checked("ps", "--all", "--filter", f"label={JOB_LABEL}", "--format", "json")
        try:
            return self._found(out, JOB_LABEL)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            raise RuntimeFailure(
                f"podman ps answered what bcd cannot read ({type(exc).__name__}: {exc}): {out[:200]!r}"
            ) from None

    def _found(self, out: str, by: str | None = None) -> builtins.list[Found]:
        """The containers `podman ps` listed in `out`: this node's own (by its node label), or with
        `by`, those carrying that label (its value their allocation)."""
        rows: Any = json.loads(out or "[]") or []
        if not isinstance(rows, list):
            raise TypeError("not a list of containers")
        exited = [str(r["Id"]) for r in rows if _STATES.get(str(r.get("State")), "other") == "exited"]
        oom = self._oom(exited)
        found: list[Found] = []
        for row in rows:
            labels = row.get("Labels") or {}
            if by is not None:
                if not labels.get(by):
                    continue
            elif labels.get(NODE_LABEL) != self.node or ALLOCATION_LABEL not in labels:
                continue
            allocation = str(labels[by or ALLOCATION_LABEL])
            state = _STATES.get(str(row.get("State")), "other")
            ports = {
                int(p["container_port"]): int(p["host_port"])
                for p in row.get("Ports") or []
                if p.get("host_port") and int(p.get("range") or 1) == 1
            }
            names = row.get("Names") or [""]
            found.append(
                Found(
                    id=str(row["Id"]),
                    name=str(names[0]),
                    allocation_id=allocation,
                    spec_digest=str(labels.get(SPEC_LABEL, "")),
                    state=state,
                    exit_code=int(row["ExitCode"]) if state == "exited" else None,
                    oom_killed=oom.get(str(row["Id"]), False),
                    ports=ports,
                    atoms=atoms_of_label(labels.get(ATOMS_LABEL)),
                )
            )
        return found

    def _oom(self, ids: Sequence[str]) -> dict[str, bool]:
        if not ids:
            return {}
        done = self._run("inspect", "--type", "container", "--format", "json", *ids)
        try:
            records: list[dict[str, Any]] = json.loads(done.stdout or "[]") or []
            return {str(r["Id"]): bool((r.get("State") or {}).get("OOMKilled")) for r in records}
        except (ValueError, KeyError, TypeError, AttributeError):
            return {}  # the OOM kill is what it says of an exit, not worth a pass

    def exec(self, container_id: str, argv: Sequence[str], timeout: float) -> int:
        """Run `argv` in the running container; its exit status (podman's own 125-127 when it could
        not run it), or -1 past `timeout`."""
        try:
            done = subprocess.run(
                [*self.argv, "exec", container_id, *argv],
                # Only the exit status is wanted: what a tenant's command prints is never held in
                # bcd's memory (an exec probe printing without end would otherwise fill it).
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return -1
        except OSError as exc:
            raise RuntimeFailure(f"podman cannot be run ({self.argv[0]}): {exc}") from None
        return done.returncode

    def run_in(self, allocation_id: str, argv: Sequence[str], timeout: float) -> ExecResult:
        """Run `argv` in the allocation's container (`podman exec`, no TTY, no stdin) for at most
        `timeout` seconds: its exit code (podman's own 125 when it could not run it, as on a
        container that is not running; 126 not executable; 127 not found), the first
        `EXEC_OUTPUT_MAX` bytes of its stdout and of its stderr. Past `timeout` the `podman exec`
        client is killed and the answer says `timed_out` (exit code `EXEC_TIMED_OUT`); the command
        in the container is not ended by that (podman keeps an exec's process when its client goes)
        and may keep running. `NoContainer` when the node has no container for it."""
        mine = _current_first([f for f in self.list() if f.allocation_id == allocation_id], self.node)
        if not mine:
            raise NoContainer(allocation_id)
        deadline = time.monotonic() + timeout
        kept: dict[int, bytearray] = {}
        try:
            proc = subprocess.Popen(
                [*self.argv, "exec", mine[0].id, *argv],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            raise RuntimeFailure(f"podman cannot be run ({self.argv[0]}): {exc}") from None
        assert proc.stdout is not None and proc.stderr is not None
        out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
        timed_out = False
        with proc, selectors.DefaultSelector() as selector:
            for pipe in (proc.stdout, proc.stderr):
                selector.register(pipe, selectors.EVENT_READ)
                kept[pipe.fileno()] = bytearray()
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                for key, _ in selector.select(left):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        continue
                    room = EXEC_OUTPUT_MAX + 1 - len(kept[key.fd])
                    # What a command prints past the bound is read and dropped, so it is never
                    # held in bcd's memory and never blocks on a full pipe.
                    kept[key.fd] += chunk[: max(0, room)]
            if not timed_out:
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
            if timed_out:
                proc.kill()
                proc.wait()
        out, out_cut = cut_output(bytes(kept[out_fd]))
        err, err_cut = cut_output(bytes(kept[err_fd]))
        code = EXEC_TIMED_OUT if timed_out else proc.returncode
        return ExecResult(code, out, err, out_cut or err_cut, timed_out)

    def logs(self, allocation_id: str, tail: int) -> str:
        """The last `tail` lines (at most `MAX_LOG_TAIL`, and the last `MAX_LOG_BYTES` of them) the
        allocation's container wrote, stdout and stderr together; `NoContainer` when there is none."""
        mine = _current_first([f for f in self.list() if f.allocation_id == allocation_id], self.node)
        if not mine:
            raise NoContainer(allocation_id)
        tail = max(0, min(tail, MAX_LOG_TAIL))
        returncode, out = self._read_bounded([*self.argv, "logs", "--tail", str(tail), mine[0].id])
        if returncode != 0:
            text = out.decode(errors="replace")
            if "no such container" in text:
                raise NoContainer(allocation_id)
            raise RuntimeFailure(f"podman logs: {text.strip()}")
        return out.decode(errors="replace")

    def _read_bounded(self, argv: Sequence[str]) -> tuple[int, bytes]:
        """Run `argv` (stdout and stderr together) under `quick_timeout`, keeping only the last
        `MAX_LOG_BYTES` it writes: `--tail` bounds lines, not their length, and a container's log
        line is its tenant's to make as long as it likes."""
        deadline = time.monotonic() + self.quick_timeout
        kept = bytearray()
        try:
            proc = subprocess.Popen(
                list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        except OSError as exc:
            raise RuntimeFailure(f"podman cannot be run ({self.argv[0]}): {exc}") from None
        assert proc.stdout is not None
        with proc, selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    proc.kill()
                    raise RuntimeFailure(
                        f"podman {argv[len(self.argv)]} took longer than {self.quick_timeout:g} s"
                    )
                if not selector.select(left):
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                kept += chunk
                if len(kept) > 2 * MAX_LOG_BYTES:
                    del kept[:-MAX_LOG_BYTES]
            try:
                returncode = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                raise RuntimeFailure(
                    f"podman {argv[len(self.argv)]} took longer than {self.quick_timeout:g} s"
                ) from None
        return returncode, bytes(kept[-MAX_LOG_BYTES:])
