"""The `bcd` node daemon console script: where the real or the fake GPU backend is chosen."""

from __future__ import annotations

import enum
import json
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from better_compute.cli.errors import CliGroup
from better_compute.cli.version import VersionOption
from better_compute.entrypoints.podman_options import PodmanOption

if TYPE_CHECKING:
    from better_compute.bcd.logs import Log
    from better_compute.bcd.runtime import ContainerRuntime
    from better_compute.bcd.slurm_gres_conf import SlurmGresConf

bcd_app = typer.Typer(
    name="bcd",
    help="better-compute node daemon.",
    no_args_is_help=True,
    add_completion=False,
    # The CLI's error format and exit classes (cli/errors.py): `error: ...`, usage 2, a closed pipe
    # quiet, flags without `<bool>`.
    cls=CliGroup,
)


class NvmlKind(enum.StrEnum):
    real = "real"
    fake = "fake"


class RuntimeKind(enum.StrEnum):
    auto = "auto"
    podman = "podman"
    none = "none"
    fake = "fake"


@bcd_app.callback()
def _root(version: VersionOption = False) -> None:
    """better-compute node daemon.

    A callback makes `bcd` a group even while it has one command, so `bcd version` is that command
    (Typer runs a lone command as the app itself, which took `version` for an extra argument).
    """


@bcd_app.command()
def version() -> None:
    """Print the daemon's version."""
    from better_compute import __version__

    typer.echo(__version__)


def _fail(message: str, status: int = 1) -> NoReturn:
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(status)


@bcd_app.command()
def inventory(
    as_json: Annotated[bool, typer.Option("--json", help="Print the node report as JSON.")] = False,
    nvml: Annotated[
        NvmlKind, typer.Option("--nvml", help="GPU backend: the driver's NVML, or a node of a fleet file.")
    ] = NvmlKind.real,
    fleet: Annotated[
        Path | None, typer.Option("--fleet", help="Fleet file the fake backend reads the node from.")
    ] = None,
    node: Annotated[
        str | None, typer.Option("--node", help="Node name (with --nvml fake: a node of the fleet file).")
    ] = None,
) -> None:
    """Print this node's GPUs as the daemon reports them. Read-only: it never changes MIG mode,
    creates or destroys instances, or resets a GPU, so it is safe on a node in service."""
    from better_compute.bcd.gpu import GpuBackend, GpuError
    from better_compute.bcd.inventory import report_json, report_of
    from better_compute.domain.kernel.errors import DomainError

    backend: GpuBackend
    try:
        if nvml is NvmlKind.fake:
            if fleet is None or node is None:
                _fail("--nvml fake needs --fleet FILE and --node NAME", 2)
            from better_compute.bcd.fake import FakeNode
            from better_compute.bcd.fleet_file import read_fleet

            backend = FakeNode.from_fleet(read_fleet(fleet), node)
        else:
            if fleet is not None:
                _fail("--fleet is for --nvml fake", 2)
            from better_compute.bcd.nvml import NvmlBackend

            backend = NvmlBackend()
        name = node or socket.gethostname()
        try:
            gpus = backend.list_gpus()
        finally:
            backend.close()
    except (GpuError, DomainError) as exc:
        _fail(str(exc))
    for line in getattr(backend, "unreadable", ()):  # GPUs NVML counts but would not name
        sys.stderr.write(f"warning: {line}\n")
    report = report_of(name, gpus)
    if as_json:
        sys.stdout.write(json.dumps(report_json(report), indent=2) + "\n")
        return
    from better_compute.bcd.inventory_table import inventory_lines

    sys.stdout.write("".join(f"{line}\n" for line in inventory_lines(name, gpus)))


@bcd_app.command()
def join(
    server: Annotated[str, typer.Option("--server", help="The control plane's URL.")],
    token: Annotated[str, typer.Option("--token", help="A join token from `nodes.joinToken`.")],
    node: Annotated[str, typer.Option("--node", help="This node's id, as the fleet names it.")],
    state_dir: Annotated[
        Path, typer.Option("--state-dir", help="Where the node's key and identity are kept.")
    ] = Path("/var/lib/bcd"),
) -> None:
    """Join the fleet: make this node's Ed25519 key, register its public half with a one-time join
    token, and keep the identity under the state directory (the private key in mode 0600)."""
    from better_compute.bcd.joining import join as join_node
    from better_compute.client import ComputeError

    try:
        identity = join_node(server, token, node, state_dir)
    except ComputeError as error:
        typer.echo(f"bcd join: {error}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"joined {identity.node} to {identity.server}; identity in {state_dir}")


@bcd_app.command()
def run(
    state_dir: Annotated[
        Path,
        typer.Option("--state-dir", help="Where `bcd join` kept the identity; the queue lives here too."),
    ] = Path("/var/lib/bcd"),
    nvml: Annotated[
        NvmlKind, typer.Option("--nvml", help="GPU backend: the driver's NVML, or a node of a fleet file.")
    ] = NvmlKind.real,
    fleet: Annotated[
        Path | None, typer.Option("--fleet", help="Fleet file the fake backend reads the node from.")
    ] = None,
    node: Annotated[
        str | None,
        typer.Option("--node", help="With --nvml fake: the fleet file's node (the joined node's id)."),
    ] = None,
    cdi_root: Annotated[Path, typer.Option("--cdi-root", help="Where CDI spec files are written.")] = Path(
        "/var/run/cdi"
    ),
    wait: Annotated[
        float, typer.Option("--wait", min=0, max=60, help="Seconds each spec long poll waits for a change.")
    ] = 30.0,
    node_root: Annotated[
        Path | None,
        typer.Option(
            "--node-root",
            help="The node's root: its driver files are read, and CDI host paths start, there (default /;"
            " with --nvml fake, a simulated driver tree under --state-dir).",
        ),
    ] = None,
    gpu_clients: Annotated[
        str | None,
        typer.Option(
            "--gpu-clients",
            help="systemd units (UNIT,UNIT) stopped while a layout changes and started after; '' for none."
            " Default: NVIDIA's MIG manager's list (docs/bcd.md#layout-changes).",
        ),
    ] = None,
    gpu_clients_file: Annotated[
        Path | None,
        typer.Option(
            "--gpu-clients-file", help="The units from a GPU clients file (version: v1, systemd-services)."
        ),
    ] = None,
    cdi_refresh: Annotated[
        str | None,
        typer.Option(
            "--cdi-refresh",
            help="Unit restarted after a layout change to regenerate the NVIDIA CDI spec, where it exists"
            " (default nvidia-cdi-refresh.service); '' for none.",
        ),
    ] = None,
    runtime: Annotated[
        RuntimeKind,
        typer.Option(
            "--runtime",
            help="What runs the containers assignments carry: podman, the in-process fake, or none (CDI"
            " files only). auto: fake with --nvml fake; podman when --podman's binary is on PATH; else none.",
        ),
    ] = RuntimeKind.auto,
    podman: PodmanOption = "podman",
    container_arg: Annotated[
        list[str] | None,
        typer.Option(
            "--container-arg",
            help="An extra `podman create` argument (repeatable), e.g. --ulimit=nofile=1024:1024.",
        ),
    ] = None,
    publish_address: Annotated[
        str, typer.Option("--publish-address", help="Where containers' ports are published on this node.")
    ] = "127.0.0.1",
    advertise_address: Annotated[
        str | None,
        typer.Option(
            "--advertise-address",
            help="The host the server reaches published ports at (default: --publish-address).",
        ),
    ] = None,
    pull: Annotated[
        str,
        typer.Option(
            "--pull", help="podman's pull policy for a container's image: never, missing, always, newer."
        ),
    ] = "never",
    stop_timeout: Annotated[
        int,
        typer.Option(
            "--stop-timeout", min=0, max=300, help="Seconds a stopped container has before SIGKILL."
        ),
    ] = 10,
    listen: Annotated[
        str | None,
        typer.Option(
            "--listen",
            help="HOST:PORT where the agent listens, through which the server reads container logs"
            " (off by default; reachable from the server alone: docs/bcd.md#the-agent).",
            show_default=False,
        ),
    ] = None,
    listen_url: Annotated[
        str | None,
        typer.Option(
            "--listen-url",
            help="The URL the server calls the agent at (default http://HOST:PORT of --listen; needed"
            " when HOST is 0.0.0.0 or ::).",
            show_default=False,
        ),
    ] = None,
    slurm_gres_conf: Annotated[
        Path | None,
        typer.Option(
            "--slurm-gres-conf",
            help="On a Slurm node: keep this gres.conf to the node's atoms, draining the node in Slurm"
            " while a job holds a GRES that changes, then `scontrol reconfigure` (docs/slurm.md).",
            show_default=False,
        ),
    ] = None,
    slurm_node: Annotated[
        str | None,
        typer.Option(
            "--slurm-node",
            help="The node's name in Slurm, with --slurm-gres-conf (default: this node's id).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the node daemon: long-poll this node's spec, converge its GPUs and devices, run the
    containers its assignments carry, report. Stops cleanly (exit 0) on SIGTERM, leaving containers
    running (the next daemon adopts them). Logs are JSON lines on stderr (docs/bcd.md)."""
    from better_compute.bcd import gpu_clients as clients
    from better_compute.bcd.agent import Agent, NoContainers, parse_listen
    from better_compute.bcd.daemon import Daemon, LoggingRunner
    from better_compute.bcd.gpu import GpuBackend, GpuError
    from better_compute.bcd.identity import Identity
    from better_compute.bcd.joining import node_client
    from better_compute.bcd.logs import Log
    from better_compute.bcd.mps import Runner, SystemdRunner
    from better_compute.domain.kernel.errors import DomainError

    if node_root is not None and not node_root.is_dir():
        _fail(f"--node-root {node_root} is not a directory", 2)
    if slurm_gres_conf is not None and not slurm_gres_conf.parent.is_dir():
        _fail(f"--slurm-gres-conf {slurm_gres_conf}: {slurm_gres_conf.parent} is not a directory", 2)
    if slurm_node is not None and slurm_gres_conf is None:
        _fail("--slurm-node is for --slurm-gres-conf", 2)
    try:
        units = clients.configured_units(gpu_clients, gpu_clients_file)
        refresh = (
            clients.CDI_REFRESH_UNIT
            if cdi_refresh is None
            else cdi_refresh and clients.check_unit(cdi_refresh)
        )
    except ValueError as exc:
        _fail(str(exc), 2)
    try:
        identity = Identity.load(state_dir)
    except (OSError, ValueError, KeyError) as exc:
        _fail(f"no node identity in {state_dir} ({exc}); run `bcd join` first", 2)
    log = Log(node=identity.node)
    try:
        containers = _container_runtime(
            runtime,
            nvml,
            identity.node,
            podman,
            container_arg or [],
            publish_address,
            pull,
            stop_timeout,
            env_dir=state_dir / "container-env",
        )
    except ValueError as exc:
        _fail(str(exc), 2)
    log.info("bcd.runtime", runtime=type(containers).__name__ if containers is not None else "none")
    backend: GpuBackend
    runner: Runner
    systemd: clients.Systemd
    try:
        if nvml is NvmlKind.fake:
            if fleet is None:
                _fail("--nvml fake needs --fleet FILE", 2)
            from better_compute.bcd.fake import KEPT_STATE, FakeNode
            from better_compute.bcd.fleet_file import read_fleet

            # The GPUs' MIG state outlives this process, as a real GPU's does (docs/bcd.md).
            fake = FakeNode.from_fleet(read_fleet(fleet), node or identity.node)
            backend = fake.keep(state_dir / KEPT_STATE)
            runner = LoggingRunner(log)
            # No systemd here: the listed units are simulated as running, their commands logged.
            systemd = clients.SimulatedSystemd.running([*units, *([refresh] if refresh else [])], log)
        else:
            if fleet is not None:
                _fail("--fleet is for --nvml fake", 2)
            from better_compute.bcd.nvml import NvmlBackend

            backend = NvmlBackend()
            runner = SystemdRunner()
            systemd = clients.Systemctl()
    except (GpuError, DomainError) as exc:
        _fail(str(exc))
    agent: Agent | None = None
    if listen is not None:
        try:
            host, port = parse_listen(listen)
            # With no container runtime (`--runtime none`), every log read is NOT_FOUND.
            source = containers if containers is not None else NoContainers()
            agent = Agent(source, host, port, log, advertise=listen_url).start()
        except (OSError, ValueError) as exc:
            backend.close()
            _fail(f"--listen: {exc}", 2)
    elif listen_url is not None:
        backend.close()
        _fail("--listen-url is for --listen", 2)
    try:
        with node_client(identity, timeout=wait + 30.0) as compute:
            unit_dir = state_dir / "systemd" if nvml is NvmlKind.fake else Path("/etc/systemd/system")
            daemon = Daemon(
                identity,
                backend,
                compute,
                cdi_root=cdi_root,
                log=log,
                mps_runner=runner,
                unit_dir=unit_dir,
                systemd=systemd,
                gpu_clients=units,
                cdi_refresh=refresh,
                wait=wait,
                node_root=node_root,
                runtime=containers,
                advertise=advertise_address,
                stop_timeout=stop_timeout,
                agent=agent,
                slurm_gres=_slurm_gres_conf(slurm_gres_conf, slurm_node or identity.node, log),
            )
            status = daemon.run()
    finally:
        if agent is not None:
            agent.stop()
        backend.close()
    raise typer.Exit(status)


def _slurm_gres_conf(path: Path | None, slurm_node: str, log: Log) -> SlurmGresConf | None:
    """The gres.conf keeper over Slurm's commands (they find the cluster as on the node: `SLURM_CONF`
    or /etc/slurm/slurm.conf)."""
    if path is None:
        return None
    from better_compute.bcd.slurm_gres_conf import SlurmGresConf
    from better_compute.domain.fleet.slurm import check_name
    from better_compute.slurm.commands import SlurmCommands

    try:
        check_name("node", slurm_node)
    except ValueError as exc:
        _fail(f"--slurm-node: {exc}", 2)
    return SlurmGresConf(path, slurm_node, SlurmCommands(env=os.environ), log)


def _container_runtime(
    kind: RuntimeKind,
    nvml: NvmlKind,
    node: str,
    podman: str,
    create_args: list[str],
    publish_address: str,
    pull: str,
    stop_timeout: int,
    *,
    env_dir: Path | None = None,
) -> ContainerRuntime | None:
    """The runtime `--runtime` names (`auto`: the fake for a simulated node, podman where its binary
    is on PATH, else none); ValueError for options that do not fit."""
    import shlex
    import shutil

    argv = shlex.split(podman)
    if not argv:
        raise ValueError("--podman must name a command")
    if kind is RuntimeKind.auto:
        if nvml is NvmlKind.fake:
            kind = RuntimeKind.fake
        else:
            kind = RuntimeKind.podman if shutil.which(argv[0]) else RuntimeKind.none
    if kind is RuntimeKind.none:
        return None
    if kind is RuntimeKind.fake:
        from better_compute.bcd.fake_runtime import FakeRuntime

        return FakeRuntime(node, publish_address=publish_address, pull=pull)
    if shutil.which(argv[0]) is None:
        raise ValueError(f"--runtime podman: {argv[0]} is not on PATH")
    from better_compute.bcd.podman import PodmanRuntime

    return PodmanRuntime(
        node,
        argv=argv,
        create_args=create_args,
        publish_address=publish_address,
        pull=pull,
        stop_timeout=stop_timeout,
        env_dir=env_dir,
    )


def main() -> None:
    bcd_app()
