"""`workloads` (create, list, show, scale, delete, drain, release-replica) and `placement preview`:
workloads placed across clusters, each command one API method through the typed client.

A table for people, `--json` for scripts (the API's own answer). Placement is the server's: these
commands only spell its requests and print its verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from better_compute.cli import config, watch
from better_compute.cli.app import app
from better_compute.cli.calls import JsonFlag, call
from better_compute.cli.container_flags import (
    ArgOption,
    CommandOption,
    ContainerFileOption,
    ContainerFlags,
    CpuOption,
    EnvOption,
    ImageOption,
    MemoryOption,
    PortOption,
    ReadyPathOption,
    container_of,
    container_rows,
    options_of,
)
from better_compute.cli.exec_output import ExecCommandArgument, ExecTimeoutOption, finish_exec
from better_compute.cli.output import LogTailOption, print_json, print_log, stdout
from better_compute.cli.tables import (
    Column,
    Output,
    OutputOption,
    json_wanted,
    print_details,
    print_fitted,
    sentence,
)
from better_compute.cli.times import when

if TYPE_CHECKING:
    from better_compute.client import Compute, ComputeError
    from better_compute.wire.common import Page
    from better_compute.wire.events import EventPublic
    from better_compute.wire.workloads import (
        DeploymentPublic,
        DomainKind,
        OperationPublic,
        PlacementPreview,
        PreemptionPublic,
        ResolutionPublic,
        Strategy,
        VerdictPublic,
        WorkloadPublic,
    )

WorkloadArgument = Annotated[
    str, typer.Argument(metavar="WORKLOAD", help="The workload's id, or its name in your project.")
]

workloads_app = typer.Typer(
    help="Create, list, show, scale, delete and drain workloads placed across clusters.",
    no_args_is_help=True,
)
app.add_typer(workloads_app, name="workloads")
placement_app = typer.Typer(help="What placement would choose now; nothing is written.", no_args_is_help=True)
app.add_typer(placement_app, name="placement")

OPTIONS = {
    "project": "--project",
    "tenantId": "--project",
    "shape.deviceClass": "--device-class",
    "shape.deviceCount": "--device-count",
    "clusterFloors": "--floor",
    "maxClusters": "--max-clusters",
    "priorityClass": "--priority-class",
    "allowedRegions": "--allowed-region",
    "allowedClusters": "--allowed-cluster",
    "topologyDomainKind": "--domain-kind",
    "workloadId": "--workload",
}
"""Body fields the commands fill from an option, so a refusal naming one names the option."""

LimitOption = Annotated[
    int | None, typer.Option("--limit", min=1, help="At most this many.", show_default=False)
]
CursorOption = Annotated[
    str | None, typer.Option("--cursor", help="The next page's cursor.", show_default=False)
]
ProjectOption = Annotated[
    str | None,
    typer.Option("--project", help="The tenant (an admin must give it).", show_default=False),
]
MinMemoryOption = Annotated[
    float | None,
    typer.Option(
        "--min-memory-gib",
        help="Instead of --device-class: each device gives at least this much memory (GiB).",
        show_default=False,
    ),
]
MinSlicesOption = Annotated[
    int | None,
    typer.Option(
        "--min-compute-slices",
        min=1,
        help="Instead of --device-class: each device gives at least this many compute slices.",
        show_default=False,
    ),
]
NvlinkPeerOption = Annotated[
    bool, typer.Option("--nvlink-peer", help="Instead of --device-class: whole GPUs with NVLink peers.")
]
DeviceCountOption = Annotated[
    int, typer.Option("--device-count", min=1, help="Devices per replica.", show_default=False)
]
StrategyOption = Annotated[
    str | None,
    typer.Option(
        "--strategy", help="pack (fill one cluster first) or spread (default pack).", show_default=False
    ),
]
ClusterOption = Annotated[
    str | None, typer.Option("--cluster", help="Pin the workload to this cluster.", show_default=False)
]
FloorOption = Annotated[
    list[str] | None,
    typer.Option(
        "--floor", help="CLUSTER=N: at least N replicas there, or none at all (repeat).", show_default=False
    ),
]
MaxClustersOption = Annotated[
    int | None,
    typer.Option("--max-clusters", min=1, help="Spread over at most this many clusters.", show_default=False),
]
SingleDomainOption = Annotated[
    bool,
    typer.Option("--single-domain", help="Each replica's devices in one topology domain."),
]
DomainKindOption = Annotated[
    str | None,
    typer.Option("--domain-kind", help="The topology domain: nvlink, pcie or numa.", show_default=False),
]

WORKLOAD_COLUMNS = [
    Column("id"),
    Column("name"),
    Column("project", drop=3),
    Column("shape", drop=4),
    Column("replicas"),
    Column("placed"),
    Column("ready"),
    Column("unplaced", drop=2),
    Column("strategy", drop=5),
    Column("clusters", drop=1, wrap=True),
    Column("reason", drop=6),
]
DEPLOYMENT_COLUMNS = [
    Column("cluster"),
    Column("phase"),
    Column("desired"),
    Column("placed"),
    Column("running"),
    Column("ready"),
    Column("terminating", drop=4),
    Column("reason", drop=2),
    Column("shortfall", drop=1),
    Column("message", drop=3, wrap=True),
]
REFUSED_COLUMNS = [Column("cheaper kind"), Column("per hour"), Column("why not", wrap=True)]

PREEMPTION_COLUMNS = [
    Column("cluster"),
    Column("workload"),
    Column("allocation"),
    Column("priority class", drop=1),
    Column("why"),
]

VERDICT_COLUMNS = [
    Column("cluster"),
    Column("verdict"),
    Column("share"),
    Column("free devices", drop=3),
    Column("quota left", drop=2),
    Column("largest domain", drop=4),
    Column("message", drop=1, wrap=True),
]


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def _floors(floors: Sequence[str]) -> dict[str, int] | None:
    """`--floor CLUSTER=N` options as `clusterFloors`; None when none are given."""
    if not floors:
        return None
    out: dict[str, int] = {}
    for item in floors:
        cluster, sep, count = item.partition("=")
        if not sep or not cluster or not count.strip().isdigit():
            raise typer.BadParameter(f"CLUSTER=N, not {item!r}", param_hint="--floor")
        out[cluster] = int(count)
    return out


def _shape(w: WorkloadPublic) -> str:
    return f"{w.shape.device_count} x {w.shape.device_class}"


def _clusters(w: WorkloadPublic) -> str:
    return ", ".join(f"{d.cluster_id}={d.desired_replicas}" for d in w.deployments) or "-"


def _ready(w: WorkloadPublic) -> str:
    """Ready replicas over desired ones, per cluster (`iad-1=2/3`)."""
    return ", ".join(f"{d.cluster_id}={d.ready_replicas}/{d.desired_replicas}" for d in w.deployments) or "-"


def _print_workloads(items: Sequence[WorkloadPublic], output: Output) -> None:
    console = stdout()
    if not items:
        console.print("no workloads", markup=False)
        return
    rows = [
        [
            w.id,
            w.name,
            w.tenant_id,
            _shape(w),
            str(w.replicas),
            str(w.placed_replicas),
            _ready(w),
            str(w.unplaced_replicas),
            w.strategy,
            _clusters(w),
            _dash(w.reason),
        ]
        for w in items
    ]
    print_fitted(console, WORKLOAD_COLUMNS, rows, output)


def _print_deployments(deployments: Sequence[DeploymentPublic], output: Output) -> None:
    console = stdout()
    if not deployments:
        console.print("no deployments", markup=False)
        return
    rows = [
        [
            d.cluster_id,
            d.phase,
            str(d.desired_replicas),
            str(d.placed_replicas),
            str(d.running_replicas),
            f"{d.ready_replicas}/{d.desired_replicas}",
            str(d.terminating_replicas),
            _dash(d.reason),
            str(d.shortfall),
            d.message or "-",
        ]
        for d in deployments
    ]
    print_fitted(console, DEPLOYMENT_COLUMNS, rows, output)


PROBLEM_COLUMNS = [
    Column("cluster"),
    Column("allocation"),
    Column("node"),
    Column("problem"),
    Column("restarts", drop=2),
    Column("exit code", drop=3),
    Column("detail", drop=1, wrap=True),
]


def _print_problems(deployments: Sequence[DeploymentPublic], output: Output) -> None:
    """Replicas whose container does not run, when there are any."""
    rows = [
        [
            d.cluster_id,
            p.allocation_id,
            p.node,
            p.problem,
            str(p.restarts),
            _dash(p.exit_code),
            p.detail or "-",
        ]
        for d in deployments
        for p in d.problems
    ]
    if rows:
        console = stdout()
        console.print()
        console.print("replica problems", markup=False, style="bold")
        print_fitted(console, PROBLEM_COLUMNS, rows, output)


def _print_verdicts(verdicts: Sequence[VerdictPublic], output: Output) -> None:
    console = stdout()
    if not verdicts:
        console.print("no clusters", markup=False)
        return
    rows = [
        [
            v.cluster_id,
            "admitted" if v.admitted else _dash(v.reason),
            str(v.share),
            str(v.free_devices),
            "no limit" if v.quota_left is None else str(v.quota_left),
            str(v.largest_domain),
            v.message or "-",
        ]
        for v in verdicts
    ]
    print_fitted(console, VERDICT_COLUMNS, rows, output)


def _grid(rows: Sequence[tuple[str, str]]) -> None:
    """A detail view, as every command prints one (`tables.print_details`)."""
    print_details(stdout(), [(sentence(key), value) for key, value in rows])


def _print_workload(w: WorkloadPublic, output: Output) -> None:
    """The workload's fields, then its deployments, and the verdicts when the answer has them."""
    floors = ", ".join(f"{c}={n}" for c, n in w.cluster_floors.items()) or "-"
    rows = [
        ("id", w.id),
        ("name", w.name),
        ("project", w.tenant_id),
        ("shape", _shape(w)),
        ("replicas", str(w.replicas)),
        ("placed", str(w.placed_replicas)),
        ("unplaced", str(w.unplaced_replicas)),
        ("reason", _dash(w.reason)),
        ("strategy", w.strategy),
        ("cluster", _dash(w.cluster)),
        ("floors", floors),
        ("max clusters", _dash(w.max_clusters)),
        ("priority class", w.priority_class),
        (
            "single domain",
            f"yes ({w.topology_domain_kind or 'any kind'})" if w.requires_single_topology_domain else "no",
        ),
        ("allowed regions", ", ".join(w.allowed_regions) or "any"),
        ("allowed clusters", ", ".join(w.allowed_clusters) or "any"),
        ("policy", _dash(w.policy_id)),
        ("generation", str(w.generation)),
        ("created", when(w.created_at)),
        *container_rows(w.shape.container),
    ]
    _grid(rows)
    console = stdout()
    console.print()
    console.print("deployments", markup=False, style="bold")
    _print_deployments(w.deployments, output)
    _print_problems(w.deployments, output)
    if w.verdicts is not None:
        console.print()
        console.print("verdicts", markup=False, style="bold")
        _print_verdicts(w.verdicts, output)
    _print_preemptions(w.preemptions, output)
    _print_resolution(w.resolution, output)


def _print_operation(op: OperationPublic) -> None:
    def pairs(values: Mapping[str, Any]) -> str:
        return ", ".join(f"{k}={v}" for k, v in values.items()) or "-"

    _grid(
        [
            ("id", op.id),
            ("type", op.type),
            ("status", op.status),
            ("workload", _dash(op.workload_id)),
            ("payload", pairs(op.payload)),
            ("result", pairs(op.result)),
            ("created", when(op.created_at)),
            ("finished", when(op.finished_at) if op.finished_at else "-"),
        ]
    )


def _show(w: WorkloadPublic, as_json: bool, output: Output = Output.TABLE) -> None:
    if as_json:
        print_json(w.model_dump(mode="json", by_alias=True))
        return
    _print_workload(w, output)


@workloads_app.command("create")
def workloads_create(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    device_count: DeviceCountOption,
    replicas: Annotated[
        int, typer.Option("--replicas", min=0, help="How many replicas.", show_default=False)
    ],
    project: ProjectOption = None,
    strategy: StrategyOption = None,
    cluster: ClusterOption = None,
    floor: FloorOption = None,
    max_clusters: MaxClustersOption = None,
    priority_class: Annotated[
        str | None,
        typer.Option(
            "--priority-class",
            help="Default standard: whom it may evict, and who may evict it.",
            show_default=False,
        ),
    ] = None,
    allowed_region: Annotated[
        list[str] | None,
        typer.Option("--allowed-region", help="Place only in this region (repeat).", show_default=False),
    ] = None,
    allowed_cluster: Annotated[
        list[str] | None,
        typer.Option("--allowed-cluster", help="Place only in this cluster (repeat).", show_default=False),
    ] = None,
    single_domain: SingleDomainOption = False,
    domain_kind: DomainKindOption = None,
    device_class: Annotated[
        str | None,
        typer.Option("--device-class", help="The device class: e.g. h100-80gb-sxm.", show_default=False),
    ] = None,
    min_memory_gib: MinMemoryOption = None,
    min_compute_slices: MinSlicesOption = None,
    nvlink_peer: NvlinkPeerOption = False,
    image: ImageOption = None,
    command: CommandOption = None,
    arg: ArgOption = None,
    env: EnvOption = None,
    port: PortOption = None,
    ready_path: ReadyPathOption = None,
    cpu: CpuOption = None,
    memory_mib: MemoryOption = None,
    container_file: ContainerFileOption = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Create a workload: --replicas of --device-count devices of --device-class (or of the
    cheapest kind of device that gives --min-memory-gib, --min-compute-slices, --nvlink-peer: it
    prints what that resolved to and why cheaper kinds were not), placed across clusters; prints
    where each replica went and a verdict per cluster. --allowed-region and --allowed-cluster make
    its NAME-placement policy. --image (and its flags) or --container-file is what each replica
    runs; without them its devices are booked and nothing is started."""
    as_json = json_wanted(as_json, output)
    _one_shape(device_class, min_memory_gib, min_compute_slices, nvlink_peer)
    floors = _floors(floor or ())
    flags = ContainerFlags(
        image=image,
        command=command,
        args=tuple(arg or ()),
        env=tuple(env or ()),
        ports=tuple(port or ()),
        ready_path=ready_path,
        cpu=cpu,
        memory_mib=memory_mib,
        container_file=container_file,
    )
    container = container_of(flags)
    created = call(
        server,
        token,
        as_json,
        lambda c: c.workloads.create(
            name=name,
            tenant_id=project,
            device_class=device_class,
            device_count=device_count,
            replicas=replicas,
            strategy=cast("Strategy | None", strategy),
            cluster_floors=floors,
            max_clusters=max_clusters,
            cluster=cluster,
            priority_class=priority_class,
            allowed_regions=allowed_region or None,
            allowed_clusters=allowed_cluster or None,
            requires_single_topology_domain=single_domain or None,
            topology_domain_kind=cast("DomainKind | None", domain_kind),
            min_memory_gib=min_memory_gib,
            min_compute_slices=min_compute_slices,
            nvlink_peer=nvlink_peer or None,
            container=container,
        ),
        {**OPTIONS, **options_of("shape.container", flags)},
    )
    _show(created, as_json, output)


def _one_shape(device_class: str | None, memory: float | None, slices: int | None, nvlink: bool) -> None:
    """A shape is a device class or a capability: one of the two, never both."""
    asked = memory is not None or slices is not None or nvlink
    if device_class is None and not asked:
        raise typer.BadParameter(
            "give --device-class, or --min-memory-gib / --min-compute-slices / --nvlink-peer",
            param_hint="--device-class",
        )
    if device_class is not None and asked:
        raise typer.BadParameter(
            "give --device-class or a capability (--min-memory-gib, ...), not both",
            param_hint="--device-class",
        )


@workloads_app.command("list")
def workloads_list(
    project: Annotated[
        str | None, typer.Option("--project", help="Only this tenant's (admin).", show_default=False)
    ] = None,
    limit: LimitOption = None,
    cursor: CursorOption = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Workloads the token may see, with where their replicas are (clusters: CLUSTER=replicas)."""
    as_json = json_wanted(as_json, output)
    page: Page[WorkloadPublic] = call(
        server,
        token,
        as_json,
        lambda c: c.workloads.list(tenant_id=project, limit=limit, cursor=cursor),
        OPTIONS,
    )
    if as_json:
        print_json(page.model_dump(mode="json", by_alias=True))
        return
    _print_workloads(page.items, output)
    if page.next_cursor:
        stdout().print(f"more: --cursor {page.next_cursor}", markup=False)


@workloads_app.command("show")
def workloads_show(
    workload_id: WorkloadArgument,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    watching: watch.WatchOption = False,
    interval: watch.IntervalOption = 2.0,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """One workload and its deployments: per cluster its phase, replicas desired, placed and
    running, and why it has fewer (reason, shortfall). With --watch, again on each change until it
    is deleted (or Ctrl-C)."""
    as_json = json_wanted(as_json, output)
    if watching:
        call(
            server,
            token,
            as_json,
            lambda c: watch.follow(
                lambda: c.workloads.get(workload_id),
                lambda w: _show(w, False, output),
                lambda w: False,
                what=f"workload {workload_id}",
                interval=interval,
                as_json=as_json,
            ),
        )
        return
    _show(call(server, token, as_json, lambda c: c.workloads.get(workload_id)), as_json, output)


ReplicaOption = Annotated[
    int | None,
    typer.Option(
        "--replica",
        min=0,
        help="The replica's number in its deployment (default: the first replica on a node).",
        show_default=False,
    ),
]
ReplicaClusterOption = Annotated[
    str | None,
    typer.Option(
        "--cluster", help="The deployment's cluster, where several have that replica.", show_default=False
    ),
]


@workloads_app.command("logs")
def workloads_logs(
    workload_id: WorkloadArgument,
    replica: ReplicaOption = None,
    cluster: ReplicaClusterOption = None,
    tail: LogTailOption = None,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """The newest lines of a replica's container log (at most 1 MiB), read through its node's
    agent (the node must run `bcd run --listen`; docs/bcd.md)."""
    got = call(
        server,
        token,
        as_json,
        lambda c: c.workloads.logs(workload_id, replica=replica, cluster=cluster, tail=tail),
        {"replica": "--replica", "cluster": "--cluster", "tail": "--tail"},
    )
    print_log(got.allocation_id, got.node, got.lines, as_json)


@workloads_app.command("exec")
def workloads_exec(
    workload_id: WorkloadArgument,
    command: ExecCommandArgument,
    replica: ReplicaOption = None,
    cluster: ReplicaClusterOption = None,
    timeout: ExecTimeoutOption = None,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Run a command in a replica's container, through its node's agent (`bcd run --listen`):
    `workloads exec WORKLOAD -- CMD [ARGS]...`. Its stdout and stderr (1 MiB each) are printed
    and its exit code is this command's; no TTY, no stdin, at most 60 s. Logged as `replica.exec`."""
    got = call(
        server,
        token,
        as_json,
        lambda c: c.workloads.exec(
            workload_id, command, replica=replica, cluster=cluster, timeout_seconds=timeout
        ),
        {"replica": "--replica", "cluster": "--cluster", "timeoutSeconds": "--timeout", "command": "CMD"},
    )
    finish_exec(got, as_json)


def decision(event: EventPublic) -> str:
    """One step of a workload's history for people: what happened and why."""
    p = event.payload
    if event.type == "workload.created":
        return f"created: {p.get('replicas')} replica(s) of {p.get('deviceCount')} x {p.get('deviceClass')}"
    if event.type == "workload.scaled":
        return f"scaled: {p.get('previous')} -> {p.get('replicas')} replica(s)"
    if event.type == "workload.decided":
        shares = ", ".join(f"{c}={n}" for c, n in (p.get("shares") or {}).items()) or "none"
        parts = [f"{p.get('trigger')}: placed {shares} of {p.get('replicas')}"]
        if p.get("unplaced"):
            parts.append(f"{p.get('unplaced')} unplaced ({p.get('reason')})")
        refused = p.get("refused") or {}
        if refused:
            parts.append("refused by " + ", ".join(f"{c} ({why})" for c, why in refused.items()))
        evicted = p.get("evicted") or []
        if evicted:
            whose = sorted({f"{e.get('workloadId')} ({e.get('why')})" for e in evicted})
            count = p.get("evictions") or len(evicted)
            parts.append(f"preempted {count} replica(s) of " + ", ".join(whose))
        return "; ".join(parts)
    if event.type == "workload.preempted":
        count = len(p.get("allocations") or [])
        return (
            f"preempted: {count} replica(s) in {p.get('clusterId')} evicted by workload"
            f" {p.get('preemptorId')} ({p.get('why')}); placed again when devices free up"
        )
    if event.type == "workload.replicas.terminating":
        count = len(p.get("allocations") or [])
        return f"terminating: {count} replica(s) in {p.get('clusterId')} wait for their node"
    if event.type == "workload.deleted":
        return "deleted"
    return event.type + "".join(f" {k}={v}" for k, v in p.items())


@workloads_app.command("why")
def workloads_why(
    workload_id: WorkloadArgument,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """The chain of decisions that put a workload where it is: its creation and scalings, each
    placement (where its replicas went, which clusters refused and why, whom it preempted), and
    the evictions it suffered, oldest first."""

    def chain(c: Compute) -> tuple[WorkloadPublic, list[EventPublic]]:
        found = c.workloads.get(workload_id)
        return found, list(c.events.iter(subject=found.id))

    found, events = call(server, token, as_json, chain)
    if as_json:
        print_json(
            {
                "workload": found.model_dump(mode="json", by_alias=True),
                "decisions": [e.model_dump(mode="json", by_alias=True) for e in events],
            }
        )
        return
    console = stdout()
    console.print(
        f"{found.name} ({found.id}): {found.placed_replicas} of {found.replicas} placed"
        + (f", {found.unplaced_replicas} unplaced ({found.reason})" if found.unplaced_replicas else ""),
        markup=False,
    )
    for event in events:
        console.print(f"{when(event.time)}  {decision(event)}", markup=False)


@workloads_app.command("scale")
def workloads_scale(
    workload_id: WorkloadArgument,
    replicas: Annotated[int, typer.Argument(metavar="REPLICAS", min=0)],
    generation: Annotated[
        int | None,
        typer.Option(
            "--generation", help="Only if the workload is still at this generation.", show_default=False
        ),
    ] = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Set a workload's replicas; those no cluster can take show as unplaced, with the reason."""
    as_json = json_wanted(as_json, output)
    scaled = call(
        server,
        token,
        as_json,
        lambda c: c.workloads.scale(workload_id, replicas, generation=generation),
        {"replicas": "REPLICAS", "generation": "--generation"},
    )
    if not as_json:
        unplaced = f", {scaled.unplaced_replicas} unplaced ({_dash(scaled.reason)})"
        console = stdout()
        console.print(f"scaled {scaled.name} ({scaled.id}) to {scaled.replicas} replica(s)", markup=False)
        console.print(
            f"{scaled.placed_replicas} placed" + (unplaced if scaled.unplaced_replicas else ""), markup=False
        )
        stdout().print()
    _show(scaled, as_json, output)


@workloads_app.command("delete")
def workloads_delete(
    workload_id: WorkloadArgument,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Delete a workload: its replicas' devices are freed (handed-over ones once their node
    releases them); says what it deleted, then prints it as it was."""
    gone = call(server, token, as_json, lambda c: c.workloads.delete(workload_id))
    if as_json:
        _show(gone, as_json)
        return
    ending = f", {gone.terminating_replicas} terminating until their node releases them"
    stdout().print(
        f"deleted workload {gone.name} ({gone.id}): {gone.placed_replicas} replica(s) taken away"
        + (ending if gone.terminating_replicas else ""),
        markup=False,
    )
    stdout().print()
    _show(gone, as_json)


def _drain_in_cli_terms(error: ComputeError) -> ComputeError:
    """The server names its body fields (`force: true`, `dryRun: true`); a CLI user has options."""
    message = error.message.replace("force: true", "--force").replace("dryRun: true", "--dry-run")
    return type(error)(message, code=error.code, details=error.details, status_code=error.status_code)


@workloads_app.command("drain")
def workloads_drain(
    workload_id: WorkloadArgument,
    cluster: Annotated[
        str, typer.Option("--cluster", help="The cluster to move the workload out of.", show_default=False)
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only say what the drain would do; nothing changes.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Drain even when replicas would have nowhere to go (they end, and wait unplaced)."
        ),
    ] = False,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Move a workload out of one cluster (a workload.drain operation): its deployment there goes
    and its replicas are placed elsewhere. Refused when replicas would have nowhere to go, unless
    --force; --dry-run says what it would do."""

    def drain(c: Compute) -> OperationPublic:
        from better_compute.client import ComputeError

        try:
            return c.workloads.drain(workload_id, cluster=cluster, dry_run=dry_run, force=force)
        except ComputeError as exc:
            raise _drain_in_cli_terms(exc) from None

    op = call(server, token, as_json, drain, {"payload.cluster": "--cluster", "payload": "--cluster"})
    if as_json:
        print_json(op.model_dump(mode="json", by_alias=True))
        return
    r = op.result
    shares = ", ".join(f"{c}={n}" for c, n in (r.get("shares") or {}).items() if n) or "none"
    verb = "would take" if op.status == "planned" else "took"
    lines = ["dry run: nothing changed"] if op.status == "planned" else []
    lines += [
        f"drain of {cluster}: {verb} away {r.get('removedReplicas', 0)} replica(s),"
        f" {r.get('terminatingReplicas', 0)} of them terminating",
        f"placed: {shares}; unplaced: {r.get('unplaced', 0)}",
    ]
    stranded = r.get("strandedReplicas", 0)
    if stranded and op.status == "planned":
        lines.append(f"{stranded} replica(s) would have nowhere to go: it needs --force")
    elif stranded:
        lines.append(f"{stranded} replica(s) had nowhere to go: they wait as unplaced")
    for line in lines:
        stdout().print(line, markup=False)
    if op.status != "planned":
        stdout().print()
        _print_operation(op)


@workloads_app.command("release-replica")
def workloads_release_replica(
    allocation: Annotated[
        str, typer.Argument(help="The terminating replica's allocation id (<deploymentId>.r<n>).")
    ],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """End a terminating replica whose node will not release it (a replica.release operation,
    admin): its devices are free at once. Only for a node gone for good: a node that comes back
    releases its replicas itself."""
    op = call(
        server,
        token,
        as_json,
        lambda c: c.workloads.release_replica(allocation),
        {"payload.allocation": "ALLOCATION", "payload": "ALLOCATION"},
    )
    if as_json:
        print_json(op.model_dump(mode="json", by_alias=True))
        return
    _print_operation(op)


def _print_preview(preview: PlacementPreview, output: Output) -> None:
    console = stdout()
    _print_verdicts(preview.verdicts, output)
    console.print()
    shares = ", ".join(f"{c}={n}" for c, n in preview.shares.items() if n) or "none"
    console.print(f"chosen: {shares}", markup=False)
    if preview.unplaced_replicas:
        console.print(
            f"unplaced: {preview.unplaced_replicas} ({_dash(preview.reason)})", markup=False, style="bold"
        )
    _print_preemptions(preview.preemptions, output)
    _print_resolution(preview.resolution, output)


def _print_resolution(resolution: ResolutionPublic | None, output: Output) -> None:
    """What a capability resolved to, and why each cheaper kind of device was not chosen."""
    if resolution is None:
        return
    console = stdout()
    console.print()
    if resolution.device_class is None:
        console.print("resolved: no kind of device the project may use gives it", markup=False, style="bold")
    else:
        price = (
            f"{resolution.price_per_hour} {resolution.currency or ''}".strip()
            if resolution.price_per_hour
            else "no price"
        )
        console.print(
            f"resolved: {resolution.kind} ({resolution.device_class}): {resolution.memory_gib or 0:g} GiB,"
            f" {resolution.compute_slices} compute slice(s), {price} per device-hour",
            markup=False,
            style="bold",
        )
    if resolution.refused:
        rows = [[r.kind, r.price_per_hour or "-", r.reason] for r in resolution.refused]
        print_fitted(console, REFUSED_COLUMNS, rows, output)


def _print_preemptions(preemptions: Sequence[PreemptionPublic] | None, output: Output) -> None:
    """The replicas of other workloads a placement evicts (or, previewed, would evict)."""
    if not preemptions:
        return
    console = stdout()
    console.print()
    console.print("preempts", markup=False, style="bold")
    rows = [[p.cluster_id, p.workload_id, p.allocation_id, p.priority_class, p.why] for p in preemptions]
    print_fitted(console, PREEMPTION_COLUMNS, rows, output)


@placement_app.command("preview")
def placement_preview(
    workload: Annotated[
        str | None,
        typer.Option("--workload", help="An existing workload, as it stands.", show_default=False),
    ] = None,
    project: ProjectOption = None,
    device_class: Annotated[
        str | None, typer.Option("--device-class", help="Without --workload: the class.", show_default=False)
    ] = None,
    device_count: Annotated[
        int | None,
        typer.Option(
            "--device-count", min=1, help="Without --workload: devices per replica.", show_default=False
        ),
    ] = None,
    replicas: Annotated[
        int | None,
        typer.Option("--replicas", min=0, help="Without --workload: how many replicas.", show_default=False),
    ] = None,
    strategy: StrategyOption = None,
    cluster: ClusterOption = None,
    floor: FloorOption = None,
    max_clusters: MaxClustersOption = None,
    single_domain: SingleDomainOption = False,
    domain_kind: DomainKindOption = None,
    priority_class: Annotated[
        str | None,
        typer.Option(
            "--priority-class",
            help="Without --workload: whom it may evict (default standard).",
            show_default=False,
        ),
    ] = None,
    min_memory_gib: MinMemoryOption = None,
    min_compute_slices: MinSlicesOption = None,
    nvlink_peer: NvlinkPeerOption = False,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """What placement would choose now, writing nothing: for --workload, or for --device-class,
    --device-count and --replicas (with --project for an admin). A verdict per cluster (admitted,
    or why not, with the figures that decided), then the chosen shares and the replicas of other
    workloads it would evict."""
    as_json = json_wanted(as_json, output)
    asked = min_memory_gib is not None or min_compute_slices is not None or nvlink_peer
    if asked and device_class is not None:
        _one_shape(device_class, min_memory_gib, min_compute_slices, nvlink_peer)
    shaped = (device_class if not asked else "capability", device_count, replicas)
    if workload is not None and any(v is not None for v in shaped):
        raise typer.BadParameter(
            "give --workload, or --device-class, --device-count and --replicas, not both",
            param_hint="--workload",
        )
    if workload is None and any(v is None for v in shaped):
        raise typer.BadParameter(
            "give --workload, or --device-class, --device-count and --replicas", param_hint="--workload"
        )
    floors = _floors(floor or ())
    preview = call(
        server,
        token,
        as_json,
        lambda c: c.placement.preview(
            workload_id=workload,
            tenant_id=project,
            device_class=device_class,
            device_count=device_count,
            replicas=replicas,
            strategy=cast("Strategy | None", strategy),
            cluster_floors=floors,
            max_clusters=max_clusters,
            cluster=cluster,
            requires_single_topology_domain=single_domain or None,
            topology_domain_kind=cast("DomainKind | None", domain_kind),
            priority_class=priority_class,
            min_memory_gib=min_memory_gib,
            min_compute_slices=min_compute_slices,
            nvlink_peer=nvlink_peer or None,
        ),
        OPTIONS,
    )
    if as_json:
        print_json(preview.model_dump(mode="json", by_alias=True))
        return
    _print_preview(preview, output)
