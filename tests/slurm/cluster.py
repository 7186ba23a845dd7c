"""A real single-node Slurm on localhost, in a directory of its own, for the tests that talk to Slurm.

`start_cluster` writes a munge key and starts `munged` on its own socket; makes a MariaDB database of its
own and starts `slurmdbd` on it (a reservation that holds GRES needs `AccountingStorageTRES`, which
slurmctld accepts only with slurmdbd); writes `slurm.conf` and `gres.conf` (fake GPU device files made
with `mknod`: character devices of NVIDIA's major number, 195); starts `slurmctld` and `slurmd` in the
foreground as children of this process; and waits, polling `scontrol show node` under a deadline, until
the node is idle. `Cluster.stop` cancels what still runs, ends the daemons by pid (SIGTERM, then SIGKILL
after a grace period), ends any process still carrying this cluster's `SLURM_CONF` (the `slurmstepd`s
and job processes, which slurmd detaches), and drops the database, so nothing is left behind. Every
Slurm command finds this cluster through `SLURM_CONF` (`Cluster.env`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = (
    "munged",
    "slurmdbd",
    "slurmctld",
    "slurmd",
    "sbatch",
    "scontrol",
    "squeue",
    "scancel",
    "sinfo",
    "mysql",
)
"""What `start_cluster` needs (Debian 12: `slurmctld slurmd slurmdbd slurm-client munge`, MariaDB's client)."""

MARIADB = os.environ.get("BC_TEST_MARIADB", "127.0.0.1:3306")
"""Where MariaDB listens (host:port); its `root` user needs no password from there, as this machine's has."""

START_TIMEOUT = 60.0
STOP_TIMEOUT = 5.0
COMMAND_TIMEOUT = 15.0
POLL = 0.1
NVIDIA_MAJOR = 195
"""The character-device major number of /dev/nvidia<N> (NVIDIA's driver)."""

_SEARCH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def missing_binaries() -> list[str]:
    """The commands of BINARIES not found (the daemons live in /usr/sbin)."""
    return [name for name in BINARIES if shutil.which(name, path=_SEARCH) is None]


def _binary(name: str) -> str:
    found = shutil.which(name, path=_SEARCH)
    if found is None:
        raise FileNotFoundError(name)
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _mysql(sql: str) -> subprocess.CompletedProcess[str]:
    host, _, port = MARIADB.partition(":")
    return subprocess.run(
        [_binary("mysql"), "-h", host, "-P", port or "3306", "-u", "root", "-e", sql],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )


def mariadb_problem() -> str | None:
    """Why MariaDB cannot hold this cluster's accounting, or None when it can."""
    if shutil.which("mysql", path=_SEARCH) is None:
        return "the `mysql` client is not installed"
    result = _mysql("SELECT 1")
    return None if result.returncode == 0 else f"MariaDB at {MARIADB}: {result.stderr.strip()}"


@dataclass
class Cluster:
    """A running Slurm: its directory, names, and the processes `stop` ends."""

    root: Path
    cluster_name: str
    node: str
    partition: str
    gpu_type: str
    gpus: int
    database: str
    shards: int = 0
    """Shards counted on the first GPU's device file (gres.conf `Name=shard Count=`), 0: none."""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment a Slurm command needs to reach this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def logs(self) -> str:
        """The daemons' logs, for a failure's message."""
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted((self.root / "log").glob("*.log"))
        )

    def stop(self) -> None:
        """Cancel every job, end the daemons (newest first) and any process left with this SLURM_CONF."""
        if self.processes and all(process.poll() is None for process in self.processes):
            with contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run(
                    ["scancel", f"--partition={self.partition}"],
                    env=self.env,
                    capture_output=True,
                    timeout=COMMAND_TIMEOUT,
                    check=False,
                )
        _end(list(reversed(self.processes)))
        self.processes.clear()
        _end_pids(_pids_with_env(f"SLURM_CONF={self.conf}"))
        _mysql(f"DROP DATABASE IF EXISTS `{self.database}`")


def restart_slurm(cluster: Cluster) -> None:
    """Stop slurmctld and slurmd (munged and slurmdbd stay) and start them again, as an operator does
    after changing a node's `Gres=` in slurm.conf; returns once slurmd has registered."""
    daemons = cluster.processes[2:]
    _end(list(reversed(daemons)))
    del cluster.processes[2:]
    _start(cluster, [_binary("slurmctld"), "-D", "-i"], "slurmctld.out")
    _start(cluster, [_binary("slurmd"), "-D", "-N", cluster.node], "slurmd.out")

    def registered() -> bool:
        state = _node_state(cluster)
        return bool(state) and not state.startswith(("UNKNOWN", "DOWN")) and "NOT_RESPONDING" not in state

    _wait(cluster, f"node {cluster.node} registered again", registered, time.monotonic() + START_TIMEOUT)


def _end(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT)


def _pids_with_env(entry: str) -> list[int]:
    """The processes whose environment holds `entry` (this process and its ancestors excepted)."""
    needle = entry.encode() + b"\0"
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes() + b"\0"
        except OSError:
            continue
        if needle in environ:
            found.append(int(proc.name))
    return found


def _end_pids(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if Path(f"/proc/{pid}").exists() and not _zombie(pid)]
        if pids:
            time.sleep(POLL)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _slurm_conf(cluster: Cluster, ports: dict[str, int], munge_socket: Path) -> str:
    root = cluster.root
    return f"""\
ClusterName={cluster.cluster_name}
SlurmctldHost=localhost
SlurmctldPort={ports["slurmctld"]}
SlurmdPort={ports["slurmd"]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes={"gpu,shard" if cluster.shards else "gpu"}
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={ports["slurmdbd"]}
AccountingStoragePass={munge_socket}
AccountingStorageTRES=gres/gpu,gres/gpu:{cluster.gpu_type}{",gres/shard" if cluster.shards else ""}
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MinJobAge=300
NodeName={cluster.node} NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 Gres=gpu:{cluster.gpu_type}:{cluster.gpus}{f",shard:{cluster.shards}" if cluster.shards else ""} State=UNKNOWN
PartitionName={cluster.partition} Nodes={cluster.node} Default=YES MaxTime=INFINITE State=UP
"""


def _slurmdbd_conf(cluster: Cluster, port: int, munge_socket: Path) -> str:
    host, _, db_port = MARIADB.partition(":")
    return f"""\
AuthType=auth/munge
AuthInfo=socket={munge_socket}
DbdHost=localhost
DbdPort={port}
SlurmUser=root
PidFile={cluster.root}/run/slurmdbd.pid
LogFile={cluster.root}/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost={host}
StoragePort={db_port or 3306}
StorageUser=root
StorageLoc={cluster.database}
"""


def _gres_conf(cluster: Cluster, devices: list[Path]) -> str:
    lines = ["AutoDetect=off"]
    lines += [f"NodeName={cluster.node} Name=gpu Type={cluster.gpu_type} File={device}" for device in devices]
    if cluster.shards:
        lines.append(f"NodeName={cluster.node} Name=shard Count={cluster.shards} File={devices[0]}")
    return "\n".join(lines) + "\n"


def _wait(cluster: Cluster, what: str, ready: Callable[[], bool], deadline: float) -> None:
    """Poll `ready` until it holds, failing at once if a daemon exits and at `deadline` otherwise."""
    while time.monotonic() < deadline:
        for process in cluster.processes:
            if process.poll() is not None:
                name = process.args[0] if isinstance(process.args, list) else process.args
                raise RuntimeError(f"{name!s} exited ({process.returncode}) before {what}\n{cluster.logs()}")
        if ready():
            return
        time.sleep(POLL)
    raise TimeoutError(f"no {what} within {START_TIMEOUT}s\n{cluster.logs()}")


def _scontrol(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_binary("scontrol"), *args],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )


def _node_state(cluster: Cluster) -> str:
    for word in _scontrol(cluster, "-o", "show", "node", cluster.node).stdout.split():
        if word.startswith("State="):
            return word.removeprefix("State=")
    return ""


def _listening(port: int) -> Callable[[], bool]:
    def ready() -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    return ready


def _start(cluster: Cluster, args: list[str], log: str) -> None:
    with open(cluster.root / "log" / log, "ab") as out:  # the child keeps its own descriptor
        cluster.processes.append(
            subprocess.Popen(
                args, env=cluster.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        )


def start_cluster(root: Path, *, gpu_type: str = "3g.40gb", gpus: int = 2, shards: int = 0) -> Cluster:
    """Start munged, slurmdbd, slurmctld and slurmd under `root` and wait until the node is idle.

    On any failure what was already started is stopped before the error goes up."""
    cluster = Cluster(
        root=root,
        cluster_name="bctest",
        node=socket.gethostname().split(".")[0],
        partition="ours",
        gpu_type=gpu_type,
        gpus=gpus,
        database=f"bc_slurm_{uuid.uuid4().hex[:12]}",
        shards=shards,
    )
    for name in ("etc", "state", "spool", "log", "run", "munge", "dev", "jobs"):
        (root / name).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o700)
    (root / "run").chmod(0o755)  # munged's socket must be reachable by every user
    devices = []
    for index in range(gpus):
        device = root / "dev" / f"nvidia{index}"
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, index))
        devices.append(device)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    os.chown(key, os.getuid(), os.getgid())
    munge_socket = root / "run" / "munge.socket"
    ports = {name: _free_port() for name in ("slurmctld", "slurmd", "slurmdbd")}
    cluster.conf.write_text(_slurm_conf(cluster, ports, munge_socket))
    dbd_conf = root / "etc" / "slurmdbd.conf"
    dbd_conf.write_text(_slurmdbd_conf(cluster, ports["slurmdbd"], munge_socket))
    dbd_conf.chmod(0o600)  # slurmdbd refuses a configuration others may read
    (root / "etc" / "gres.conf").write_text(_gres_conf(cluster, devices))
    deadline = time.monotonic() + START_TIMEOUT
    try:
        created = _mysql(f"CREATE DATABASE `{cluster.database}`")
        if created.returncode != 0:
            raise RuntimeError(f"MariaDB at {MARIADB}: {created.stderr.strip()}")
        _start(
            cluster,
            [
                _binary("munged"),
                "--foreground",
                "--force",
                f"--socket={munge_socket}",
                f"--key-file={key}",
                f"--pid-file={root}/munge/munged.pid",
                f"--log-file={root}/log/munged.log",
                f"--seed-file={root}/munge/munged.seed",
            ],
            "munged.out",
        )
        _wait(cluster, "munged's socket", munge_socket.exists, deadline)
        _start(cluster, [_binary("slurmdbd"), "-D"], "slurmdbd.out")
        _wait(cluster, "slurmdbd listening", _listening(ports["slurmdbd"]), deadline)
        _start(cluster, [_binary("slurmctld"), "-D", "-i"], "slurmctld.out")
        _start(cluster, [_binary("slurmd"), "-D", "-N", cluster.node], "slurmd.out")
        _wait(cluster, f"node {cluster.node} idle", lambda: _node_state(cluster).startswith("IDLE"), deadline)
    except BaseException:
        cluster.stop()
        raise
    return cluster
