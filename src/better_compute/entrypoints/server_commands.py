"""`better-compute serve` and `better-compute admin ...`: commands that open the database themselves."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from better_compute.cli.app import admin_app, app
from better_compute.defaults import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_TIMEOUT_KEEP_ALIVE,
    DEFAULT_TIMEOUT_REQUEST,
)
from better_compute.domain.kernel.errors import DomainError, Unavailable
from better_compute.entrypoints.podman_options import PodmanOption
from better_compute.entrypoints.simulation_runtime import (
    PODMAN_CREATE_ARGS,
    SimulationRuntime,
    choose_runtime_here,
)

if TYPE_CHECKING:
    from better_compute.entrypoints.database import Unusable
    from better_compute.service.services import Services
    from better_compute.settings import Settings


def read_settings(**options: Any) -> Settings:
    """The settings: each option given on the command line, else its `BC_*` variable, else its
    default. A value that is not valid stops the command with a message naming the setting.

    The database URL may also come from a file (`BC_DATABASE_URL_FILE`, the systemd credential
    `database-url`: `database.given_url`); a file that cannot give one stops the command the same way.

    pydantic-settings is imported here, not at start-up: the console script registers these commands
    for every call, and the others should not pay for it."""
    from pydantic import ValidationError

    from better_compute.entrypoints import database
    from better_compute.settings import Settings

    if "database_url" in options:
        try:
            options["database_url"] = database.given_url(options["database_url"], os.environ)
        except database.Unusable as exc:
            _refuse(exc)
    try:
        return Settings(**{name: value for name, value in options.items() if value is not None})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])} (BC_{str(e['loc'][0]).upper()}): {e['msg']}"
            for e in exc.errors()
        )
        typer.echo(f"error: invalid setting: {problems}", err=True)
        raise typer.Exit(2) from None


def _refuse(problem: Unusable) -> NoReturn:
    typer.echo(f"error: {problem.message}", err=True)
    raise typer.Exit(problem.status)


@contextmanager
def opened(settings: Settings, *, create: bool, write: bool = False) -> Iterator[tuple[Services, str]]:
    """The running services and the database they opened, in words; a database that cannot be
    opened (or, with `write`, cannot be written: a read-only SQLite file) stops the command with one
    line saying why and what to do (entrypoints/database.py).

    Only opening (and migrating) is guarded: an error in the command's own work is not a database
    problem and is not dressed as one."""
    from sqlalchemy.exc import SQLAlchemyError

    from better_compute.domain.kernel.errors import Unavailable
    from better_compute.entrypoints import database, server

    try:
        found = database.target(settings.database_url)
        database.check(found, create=create)
    except database.Unusable as exc:
        _refuse(exc)
    with ExitStack() as stack:
        try:
            services = stack.enter_context(server.running(settings))
        except SQLAlchemyError as exc:
            _refuse(database.explain(exc, found))
        if write:
            try:
                services.store.check(write=True)
            except Unavailable as exc:
                _refuse(
                    database.unwritable(found, exc.cause)
                    if exc.read_only
                    else database.unreachable(found, exc.cause)
                )
        yield services, found.describe()


def quiet_outages() -> None:
    """Leave the lines the store logs when its database's outage starts and ends (storage/kernel/outage.py)
    to whom they are for: a command that runs once says what went wrong in its own one line, and
    `serve`'s reconciler process leaves them to the server, which logs them for the same database."""
    from better_compute.storage.kernel import outage

    outage.log.disabled = True


def _reconciling(services: Services, settings: Settings, owner: str) -> Callable[[], None]:
    """Run the MIG layout gate's reconciler beside `serve`, at `server_duty`; returns what stops it.

    In a process of its own (`entrypoints.reconciler_process`: its steps never hold the lock this
    process's requests need), opening the database from the same settings; in a thread for an
    in-memory SQLite database, which no other process can open."""

    from better_compute.entrypoints import database
    from better_compute.entrypoints.reconciler_process import ReconcilerProcess, reconcile_command
    from better_compute.service.gate.mig_gate import Reconciler, server_duty

    duty = server_duty(services.store.dialect)
    found = database.target(settings.database_url)
    if found.url.get_backend_name() != "sqlite" or found.sqlite_path is not None:
        child = ReconcilerProcess(reconcile_command(duty), child_environment(settings), services.stopping)
        child.start()

        def stop_child() -> None:
            services.stopping.set()
            child.stop()

        return stop_child
    reconciler = Reconciler(services.store, services.clock, owner, duty=duty)
    thread = threading.Thread(target=reconciler.run, args=(services.stopping,), name="mig-gate", daemon=True)
    thread.start()

    def stop() -> None:
        services.stopping.set()
        thread.join(10)

    return stop


def child_environment(settings: Settings) -> dict[str, str]:
    """The environment of a process this server starts (its reconciler, its workers): this one's,
    with the settings it resolved as `BC_*` variables, and without where the database URL came from
    (`BC_DATABASE_URL_FILE`, `$CREDENTIALS_DIRECTORY`): the child reads the URL this process chose,
    even where `--database-url` chose it over a credential, and never finds it given twice."""
    from better_compute.entrypoints import database

    left_out = {database.URL_FILE_VARIABLE, "CREDENTIALS_DIRECTORY"}
    return {
        **{name: value for name, value in os.environ.items() if name not in left_out},
        **settings.environment(),
    }


def _retrying(services: Services) -> Callable[[], None]:
    """Run the placement retry loop (service.ops.placement_retry) in a thread of `serve`."""
    from better_compute.service.ops.placement_retry import Retrier
    from better_compute.service.placement.workloads import Wiring

    wiring = Wiring(services.store, services.index, services.stock, services.ids)
    retrier = Retrier(wiring, services.clock, services.placement_wakeup)
    thread = threading.Thread(target=retrier.run, args=(services.stopping,), name="placement", daemon=True)
    thread.start()

    def stop() -> None:
        services.stopping.set()
        services.placement_wakeup.set()
        thread.join(10)

    return stop


def _resuming(services: Services) -> Callable[[], None]:
    """Run the loop that resumes relayouts waiting for moved copies to be ready
    (service.endpoints.relayout_resume) in a thread of `serve`, woken by `ReplicaState` reports."""
    from better_compute.service.endpoints.relayout_resume import Resumer

    resumer = Resumer(services.store, services.clock, services.relayout_wakeup)
    thread = threading.Thread(target=resumer.run, args=(services.stopping,), name="relayout", daemon=True)
    thread.start()

    def stop() -> None:
        services.stopping.set()
        services.relayout_wakeup.set()
        thread.join(10)

    return stop


def check_port_free(host: str, port: int) -> None:
    """Refuse, in one line with the fix, a port another process listens on, before the database is
    opened and the fleet loaded (uvicorn would only log `address already in use` after that).

    The probe binds as uvicorn does (SO_REUSEADDR), so it refuses exactly what uvicorn would; a
    process that takes the port between the probe and uvicorn's bind still gets uvicorn's error."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        typer.echo(f"error: cannot listen on {host}: {exc.strerror}; pass another --host", err=True)
        raise typer.Exit(2) from None
    family, kind, proto, _, address = infos[0]
    try:
        probe = socket.socket(family, kind, proto)
    except OSError as exc:  # the family refused: no IPv6 on the host, RestrictAddressFamilies= in a unit
        typer.echo(f"error: cannot listen on {host}:{port}: {exc.strerror}; pass another --host", err=True)
        raise typer.Exit(2) from None
    with probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                typer.echo(
                    f"error: cannot listen on {host}:{port}: {exc.strerror}; pass another --host or --port",
                    err=True,
                )
                raise typer.Exit(2) from None
            other = port + 1 if port < 65535 else 8001
            typer.echo(
                f"error: cannot listen on {host}:{port}: address already in use; pass another --port"
                f" (make run: use PORT={other} make run) and point the CLI at it with"
                f" BC_SERVER=http://{host}:{other}",
                err=True,
            )
            raise typer.Exit(2) from None


CreateOpt = Annotated[
    bool,
    typer.Option(
        "--create",
        help="Create the SQLite database file if it does not exist (without it, a missing file is refused).",
    ),
]

DatabaseOpt = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="SQLAlchemy or libpq URL. Wins over the one of $BC_DATABASE_URL, the file"
        " $BC_DATABASE_URL_FILE names, or the systemd credential database-url; without any,"
        " ./better-compute.db",
    ),
]


@app.command()
def serve(
    database_url_opt: DatabaseOpt = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    fleet: Annotated[Path | None, typer.Option(help="Fleet file (YAML) to load before serving.")] = None,
    simulate: Annotated[
        bool,
        typer.Option(
            help="With --fleet: run a bcd loop (fake NVML) for every node of the file, in this process,"
            " talking HTTP to this server; --no-simulate registers the nodes and waits for real bcd"
            " processes to join."
        ),
    ] = True,
    runtime: Annotated[
        SimulationRuntime,
        typer.Option(
            "--runtime",
            help="With --fleet: what runs the simulated nodes' containers: podman, or the in-process"
            " fake. auto: podman when --podman's binary is on PATH, the server is root and no NVIDIA"
            " driver is loaded; else the fake.",
        ),
    ] = SimulationRuntime.auto,
    podman: PodmanOption = "podman",
    container_arg: Annotated[
        list[str] | None,
        typer.Option(
            "--container-arg",
            help="An extra `podman create` argument (repeatable), e.g. --network=slirp4netns; after"
            f" the ones always given ({' '.join(PODMAN_CREATE_ARGS)}), so a --ulimit here wins.",
        ),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            min=1, max=64, help="Server processes; more use more cores (each keeps its own caches)."
        ),
    ] = 1,
    access_log: Annotated[bool, typer.Option(help="Log every request.")] = True,
    max_body_bytes: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Largest request body taken, in bytes; a larger one is refused (413)."
            f" \\[default: $BC_MAX_BODY_BYTES or {DEFAULT_MAX_BODY_BYTES}]",
        ),
    ] = None,
    timeout_keep_alive: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Seconds an idle connection (no request under way) is kept open."
            f" \\[default: $BC_TIMEOUT_KEEP_ALIVE or {DEFAULT_TIMEOUT_KEEP_ALIVE}]",
        ),
    ] = None,
    timeout_request: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Seconds a client has to send a request's head, and each next part of its body (408)."
            f" \\[default: $BC_TIMEOUT_REQUEST or {DEFAULT_TIMEOUT_REQUEST:g}]",
        ),
    ] = None,
    metrics_auth: Annotated[
        str | None,
        typer.Option(
            metavar="none|admin",
            help="Who may read /metrics: anyone who reaches the server (none), or a fleet-admin token"
            " (admin). \\[default: $BC_METRICS_AUTH or none]",
        ),
    ] = None,
    metrics_allocations: Annotated[
        bool | None,
        typer.Option(
            "--metrics-allocations",
            show_default=False,
            help="Also answer better_compute_allocation_info on /metrics: which GPU each allocation"
            " holds, by DCGM's labels (docs/metrics.md). \\[default: $BC_METRICS_ALLOCATIONS or off]",
        ),
    ] = None,
) -> None:
    """Migrate the database, load a fleet file if given, and serve the HTTP API until Ctrl-C."""
    import shlex
    import tempfile

    import uvicorn
    from rich.console import Console

    from better_compute.entrypoints import server
    from better_compute.entrypoints.fleet import fleet_progress, load_fleet, read_fleet
    from better_compute.entrypoints.http_protocol import timed_protocol
    from better_compute.entrypoints.serving import Serving
    from better_compute.entrypoints.simulation import (
        QuietNodeTraffic,
        SimulatedNodes,
        join_tokens,
        local_url,
    )

    settings = read_settings(
        database_url=database_url_opt,
        max_body_bytes=max_body_bytes,
        timeout_keep_alive=timeout_keep_alive,
        timeout_request=timeout_request,
        metrics_auth=metrics_auth,
        metrics_allocations=metrics_allocations,
    )
    connections: dict[str, Any] = {
        "http": timed_protocol(settings.timeout_request),
        "timeout_keep_alive": settings.timeout_keep_alive,
    }
    podman_argv = shlex.split(podman)
    if not podman_argv:
        typer.echo("error: --podman must name a command", err=True)
        raise typer.Exit(2)
    choice = None
    if fleet is not None and simulate:
        try:
            choice = choose_runtime_here(runtime, podman_argv)
        except ValueError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
    check_port_free(host, port)
    with ExitStack() as stack:
        nodes: SimulatedNodes | None = None
        services, _ = stack.enter_context(opened(settings, create=True))
        # A database that cannot be written (a read-only SQLite file) is said now, in the one line the
        # store logs when an outage starts; the server serves reads and is not ready until it can.
        with contextlib.suppress(Unavailable):
            services.store.check(write=True)
        if fleet is not None:
            try:
                spec = read_fleet(fleet)
                with fleet_progress(Console(stderr=True)) as progress:
                    count = load_fleet(
                        services.store, spec, services.clock(), progress=progress, simulate=simulate
                    )
            except DomainError as exc:
                typer.echo(f"error: {exc.message}", err=True)
                raise typer.Exit(2) from None
            if simulate:
                root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="better-compute-nodes-")))
                tokens = join_tokens(services.store, spec, services.clock())
                assert choice is not None
                nodes = SimulatedNodes(
                    spec,
                    tokens,
                    local_url(host, port),
                    root,
                    runtime=choice.kind,
                    podman=podman_argv,
                    create_args=[*PODMAN_CREATE_ARGS, *(container_arg or [])],
                )
                typer.echo(
                    f"loaded {fleet}: {count} nodes, each run by a bcd loop with fake NVML"
                    f" (keys, CDI files and logs under {root})"
                )
                where = (
                    f"device nodes made, CDI specs in {nodes.cdi_root}"
                    if choice.kind == "podman"
                    else "in-process"
                )
                typer.echo(f"containers run with {choice.kind} ({where}): {choice.reason}")
            else:
                typer.echo(
                    f"loaded {fleet}: {count} nodes registered; each waits for its bcd to join"
                    " (docs/bcd.md: nodes.joinToken, then bcd join and bcd run on the node)"
                )
        typer.echo(f"serving on http://{host}:{port} (database: {services.store.dialect}); docs at /docs")
        if nodes is not None:
            nodes.start()
            stack.callback(nodes.stop)
        stack.callback(_reconciling(services, settings, reconciler_owner()))
        stack.callback(_retrying(services))
        stack.callback(_resuming(services))
        if workers == 1:
            app_ = server.build_app(services, settings, warming="background")
            config = uvicorn.Config(
                app_, host=host, port=port, log_level="info", access_log=access_log, **connections
            )
            if nodes is not None:
                logging.getLogger("uvicorn.access").addFilter(QuietNodeTraffic())
            Serving(config, services.stopping).run()
            return
        # Worker processes build their own services from the same settings (entrypoints/asgi.py), and
        # keep their metrics together in a directory of this server's own, emptied for each start
        # (prometheus-client's multiprocess mode: every worker answers the sum).
        from better_compute.entrypoints.asgi import MULTIPROC_VARIABLE

        metrics_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="better-compute-metrics-"))
        environment = {**child_environment(settings), MULTIPROC_VARIABLE: metrics_dir}
        os.environ.clear()
        os.environ.update(environment)
        uvicorn.run(
            "better_compute.entrypoints.asgi:create",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level="info",
            access_log=access_log,
            **connections,
        )


@admin_app.command()
def bootstrap(
    database_url_opt: DatabaseOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Add another admin token even though one already exists.")
    ] = False,
    create: CreateOpt = False,
) -> None:
    """Migrate the database and create the first fleet-admin token, printed once on the last line.

    Only the token's hash is stored, so keep the printed token: it cannot be shown again. A second
    run refuses while an admin credential exists, unless --force. A SQLite file that does not
    exist is refused unless --create: run in another directory, the default ./better-compute.db
    would otherwise be a new, empty database that no server reads.
    """
    from better_compute.service.tenancy import credentials

    quiet_outages()
    with opened(read_settings(database_url=database_url_opt), create=create, write=True) as (services, used):
        try:
            issued = credentials.bootstrap_admin(
                services.store, services.clock(), new_id=services.ids.credential, force=force
            )
        except DomainError as exc:
            typer.echo(f"error: {exc.message} (in {used})", err=True)
            raise typer.Exit(1) from None
    typer.echo(f"created fleet-admin credential {issued.credential.id} in {used};")
    typer.echo("this token is shown only once:")
    typer.echo(issued.token)


@app.command()
def migrate(database_url_opt: DatabaseOpt = None, create: CreateOpt = False) -> None:
    """Bring the database to the newest schema and say which database it was.

    `serve` and `admin bootstrap` migrate too; this is for upgrading before starting the servers. A
    SQLite file that does not exist is refused unless --create.
    """
    quiet_outages()
    with opened(read_settings(database_url=database_url_opt), create=create) as (_, used):
        pass
    typer.echo(f"migrated {used} to the newest schema")


STOP_FOLLOWER = 5.0
"""Seconds the reconciler waits for the Slurm follower's pass under way when it stops."""


def reconciler_owner() -> str:
    """A reconciler's name in the gate's leases: host and process, so an operator can tell whose."""
    return f"{socket.gethostname()[:40]}:{os.getpid()}"


def _stop_when_orphaned(parent: int, stopping: threading.Event) -> None:
    """Set `stopping` once this process's parent is no longer `parent` (it died: the process was
    handed to another), checking every second."""
    while os.getppid() == parent and not stopping.wait(1.0):
        pass
    stopping.set()


@app.command()
def reconcile(
    database_url_opt: DatabaseOpt = None,
    interval: Annotated[
        float, typer.Option(min=0.05, max=60, help="Seconds between passes over the gated nodes.")
    ] = 0.5,
    lease_seconds: Annotated[
        float,
        typer.Option(
            min=1, max=3600, help="How long this process holds a node; another takes it after (if it dies)."
        ),
    ] = 15.0,
    duty: Annotated[
        float,
        typer.Option(
            min=0.01,
            max=1.0,
            help="Share of its time spent stepping nodes (pauses between steps leave the rest).",
        ),
    ] = 1.0,
    parent: Annotated[
        int | None,
        typer.Option(hidden=True, help="Stop once this process (the server that started this one) is gone."),
    ] = None,
) -> None:
    """Run the MIG layout gate's reconciler until SIGTERM or Ctrl-C (serve runs one too).

    Any number may run against one PostgreSQL database: they share the gated nodes through leases,
    each node worked on by one at a time, and each Slurm cluster is followed by one at a time. On
    SQLite, run one (serve's own) and no more.
    """
    import signal
    from datetime import timedelta

    from better_compute.entrypoints.slurm import slurm_control_for
    from better_compute.service.gate.mig_gate import Reconciler
    from better_compute.service.ledger.slurm_holds import SlurmFollower
    from better_compute.service.placement.slurm_replicas import ReplicaCommands

    stopping = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda signum, frame: stopping.set())
    if parent is not None:  # serve's child: a server killed outright must not leave it running
        threading.Thread(target=_stop_when_orphaned, args=(parent, stopping), daemon=True).start()
        quiet_outages()
    settings = read_settings(database_url=database_url_opt)
    with opened(settings, create=False) as (services, used):
        owner = reconciler_owner()
        typer.echo(f"reconciling MIG layout changes in {used} as {owner}")
        # Slurm clusters' holding jobs and external holds (docs/slurm.md), beside the gate.
        follower = SlurmFollower(
            services.store,
            services.clock,
            slurm_control_for(settings.slurm_conf_dir),
            ReplicaCommands(services.store),
            owner=owner,
        )
        following = threading.Thread(
            target=follower.run, args=(stopping,), name="slurm-follower", daemon=True
        )
        following.start()
        Reconciler(services.store, services.clock, owner, timedelta(seconds=lease_seconds), duty=duty).run(
            stopping, interval
        )
        following.join(STOP_FOLLOWER)
    typer.echo("stopped")


__all__ = [
    "admin_app",
    "bootstrap",
    "check_port_free",
    "child_environment",
    "migrate",
    "opened",
    "quiet_outages",
    "reconcile",
    "serve",
]
