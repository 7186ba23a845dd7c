"""`better-compute replay`: what recorded or given demand would have met under a fleet and a policy
set, replayed by the server's own rules in virtual time (admin; docs/replay.md).

One call of `replay.run`. The files it names (demand, fleet, policy, against) are read here, as JSON
or YAML, and sent whole; the server replays them on a throwaway store. It prints a table of figures
per tenant for each run (with a history: `recorded`, what happened, then `policy`), and with
`--against` a table of what the second policy set changes.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.cli.calls import JsonFlag, call
from better_compute.cli.output import print_json, stderr, stdout
from better_compute.cli.tables import Column, Output, OutputOption, json_wanted, print_fitted
from better_compute.cli.times import parse_time, when
from better_compute.wire.replay import ReplayFigures

_COLUMNS = (
    Column("run"),
    Column("tenant"),
    Column("requests", drop=3),
    Column("refused", drop=2),
    Column("gpu-h granted"),
    Column("gpu-h refused"),
    Column("wait p50"),
    Column("wait p99"),
    Column("preempted"),
    Column("cost", drop=1),
)
_DIFF = (
    Column("tenant"),
    Column("gpu-h granted"),
    Column("gpu-h refused"),
    Column("wait p50"),
    Column("wait p99"),
    Column("preempted"),
    Column("cost", drop=1),
)


def _read(path: Path | None, option: str) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc}", param_hint=option) from None
    if not isinstance(raw, dict):
        raise typer.BadParameter(f"{path} does not hold an object (JSON or YAML)", param_hint=option)
    return raw


def _mig_choice(as_mig: str, mig_layout: str | None) -> tuple[Any, str | None]:
    """The catalog model of `--as-mig` and the canonical `--mig-layout` on it, refused naming the
    flag at fault before any file is read."""
    from better_compute.domain.kernel.errors import DomainError
    from better_compute.domain.ops.trace_mig import given_layout, mig_model

    try:
        model = mig_model(as_mig)
    except DomainError as exc:
        raise typer.BadParameter(str(exc), param_hint="--as-mig") from None
    if mig_layout is None:
        return model, None
    try:
        return model, given_layout(mig_layout, model)
    except DomainError as exc:
        raise typer.BadParameter(str(exc), param_hint="--mig-layout") from None


def _trace_files(
    trace: Path,
    nodes: Path | None,
    replicas: int,
    first: int | None,
    since: Any,
    until: Any,
    as_mig: str | None = None,
    mig_layout: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The demand and fleet of an openb pod list and its node list (docs/traces.md), in the shapes
    `replay.run` takes, with a line saying what was read; refused here, before anything is sent,
    when the demand would pass replay's request or body limit. With `as_mig`, every GPU is that MIG
    model's, in `mig_layout` or the layouts chosen from the demand (docs/traces.md)."""
    from better_compute.domain.kernel.errors import DomainError
    from better_compute.domain.ops.replay import MAX_BODY_BYTES, MAX_REQUESTS
    from better_compute.domain.ops.trace_mig import MigLayouts, default_layouts
    from better_compute.domain.ops.trace_replay import trace_demand, trace_fleet, trace_mig_fleet
    from better_compute.domain.ops.traces import parse_nodes, parse_pods

    model, layout = _mig_choice(as_mig, mig_layout) if as_mig is not None else (None, None)
    node_list = nodes if nodes is not None else trace.parent / "openb_node_list_gpu_node.csv"
    mig: MigLayouts | None = None
    try:
        with trace.open(newline="") as f:
            tasks = parse_pods(f, trace.name)
        with node_list.open(newline="") as f:
            trace_nodes = parse_nodes(f, node_list.name)
        if first is not None:
            tasks = tasks[:first]
        if model is None:
            fleet = trace_fleet(trace_nodes, replicas)
        else:
            if layout is not None:
                mig = MigLayouts.of({n.name: layout for n in trace_nodes if n.gpus}, trace_nodes)
            else:
                mig = default_layouts(tasks, trace_nodes, model)
            fleet = trace_mig_fleet(trace_nodes, model, mig)
        mapped = trace_demand(tasks, since, until, replicas, mig=model)
    except OSError as exc:
        raise typer.BadParameter(
            f"cannot read {exc.filename}: {exc.strerror}", param_hint="--trace"
        ) from None
    except DomainError as exc:
        raise typer.BadParameter(str(exc), param_hint="--trace") from None
    if mapped.tasks > MAX_REQUESTS:
        raise typer.BadParameter(
            f"{trace.name} holds {mapped.tasks:,} tasks asking for GPUs; a replay takes at most"
            f" {MAX_REQUESTS:,} requests: replay the first N tasks with --first N",
            param_hint="--trace",
        )
    size = len(json.dumps({"demand": mapped.demand, "fleet": fleet}))
    if size > MAX_BODY_BYTES:
        raise typer.BadParameter(
            f"{trace.name} and {node_list.name} make a request of {size:,} bytes; a replay's body is at"
            f" most {MAX_BODY_BYTES // (1024 * 1024)} MiB: replay fewer tasks with --first N",
            param_hint="--trace",
        )
    gpu_nodes = len(fleet["clusters"][0]["nodes"])
    note = (
        f"trace {trace.name}: {mapped.tasks} task(s) asking for GPUs ({mapped.without_gpus} without"
        f" GPUs left out) on {gpu_nodes} GPU node(s) of {node_list.name}, "
    )
    if model is None or mig is None:
        note += f"{replicas} slots a GPU"
    else:
        mix = ", ".join(f"{name} on {n} GPU(s)" for name, n in mig.gpus_by_layout(trace_nodes).items())
        chosen = "--mig-layout" if layout is not None else "chosen from the demand's profile mix"
        note += f"each GPU an {model.id} in MIG layout {mix} ({chosen})"
        with_spec = sum(1 for t in tasks if t.shape is not None and t.gpu_spec)
        if with_spec:
            note += f"; gpu_spec left out of {with_spec} task(s): no GPU is of a trace model"
    if mapped.scale < 1:
        note += f"; trace time compressed {1 / mapped.scale:.3g}x into the window"
    return mapped.demand, fleet, note


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 3600:
        return f"{value / 3600:g}h"
    if abs(value) >= 60:
        return f"{value / 60:g}m"
    return f"{value:g}s"


def _hours(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _refused(f: ReplayFigures) -> str:
    total = sum(f.gpu_hours_refused.values())
    if not f.gpu_hours_refused:
        return "0.00"
    reasons = ", ".join(f"{reason} {hours:.2f}" for reason, hours in f.gpu_hours_refused.items())
    return f"{total:.2f} ({reasons})"


def _row(run: str, tenant: str, f: ReplayFigures) -> list[str]:
    cost = "-" if f.cost is None else f"{f.cost} {f.currency or ''}".strip()
    return [
        run,
        tenant,
        str(f.requests),
        str(f.refused_requests),
        _hours(f.gpu_hours_granted),
        _refused(f),
        _seconds(f.wait_p50_seconds),
        _seconds(f.wait_p99_seconds),
        str(f.preemptions),
        cost,
    ]


def _signed(value: float | None, shown: str) -> str:
    if value is None:
        return "-"
    return ("+" if value > 0 else "") + shown


@app.command("replay")
def replay(
    since: Annotated[str, typer.Option("--since", help="Start of the window (ISO 8601).")],
    until: Annotated[
        str, typer.Option("--until", help="End of the window (ISO 8601); at most 31 days after --since.")
    ],
    demand: Annotated[
        Path | None,
        typer.Option(
            "--demand", help="A demand file (JSON or YAML); left out: this deployment's own history."
        ),
    ] = None,
    fleet: Annotated[
        Path | None, typer.Option("--fleet", help="A fleet file (JSON or YAML); left out: today's fleet.")
    ] = None,
    fleet_changes: Annotated[
        Path | None,
        typer.Option(
            "--fleet-changes",
            help="Nodes added or removed, pools changed or added (JSON or YAML), laid over the fleet"
            " before every run (docs/replay.md#fleet-changes).",
        ),
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option("--policy", help="Changes to today's policy set (JSON or YAML); left out: today's."),
    ] = None,
    against: Annotated[
        Path | None,
        typer.Option(
            "--against", help="A second set of changes, replayed beside --policy, with the differences."
        ),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            help="An Alibaba openb pod list (openb_pod_list_*.csv) as the demand, its node list as the"
            " fleet (docs/traces.md).",
        ),
    ] = None,
    nodes: Annotated[
        Path | None,
        typer.Option(
            "--nodes", help="The trace's node list (default: openb_node_list_gpu_node.csv beside --trace)."
        ),
    ] = None,
    slot_replicas: Annotated[
        int | None,
        typer.Option(
            "--slot-replicas",
            min=1,
            max=48,
            help="Time-slice slots a trace GPU is cut into (1 to 48; default 20, 50 milli a slot).",
        ),
    ] = None,
    as_mig: Annotated[
        str | None,
        typer.Option(
            "--as-mig",
            help="Replay the trace on MIG: every GPU a GPU of this MIG-capable catalog model"
            " (A100-80GB, H100-80GB...), each share the cheapest instance that gives it.",
        ),
    ] = None,
    mig_layout: Annotated[
        str | None,
        typer.Option(
            "--mig-layout",
            help="With --as-mig: every GPU's MIG layout (default: chosen per node from the demand's"
            " profile mix).",
        ),
    ] = None,
    first: Annotated[
        int | None, typer.Option("--first", min=1, help="Replay only the trace's first N tasks.")
    ] = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Replay demand under a fleet and a policy set with the server's own rules in virtual time
    (admin): GPU-hours granted and refused (by reason), waits (p50, p99), preemptions and cost, per
    tenant and overall; nothing is written to the deployment."""
    as_json = json_wanted(as_json, output)
    began, ended = parse_time(since, "--since"), parse_time(until, "--until")
    assert began is not None and ended is not None
    files = {
        "demand": _read(demand, "--demand"),
        "fleet": _read(fleet, "--fleet"),
        "fleet_changes": _read(fleet_changes, "--fleet-changes"),
        "policy": _read(policy, "--policy"),
        "against": _read(against, "--against"),
    }
    note = None
    if trace is not None:
        if demand is not None or fleet is not None:
            raise typer.BadParameter(
                "--trace is the demand and its node list the fleet: leave out --demand and --fleet",
                param_hint="--trace",
            )
        from better_compute.domain.ops.traces import DEFAULT_REPLICAS

        if as_mig is not None and slot_replicas is not None:
            raise typer.BadParameter(
                "--as-mig maps shares to MIG instances, --slot-replicas to time-slice slots: give one",
                param_hint="--as-mig",
            )
        if mig_layout is not None and as_mig is None:
            raise typer.BadParameter("--mig-layout goes with --as-mig", param_hint="--mig-layout")
        files["demand"], files["fleet"], note = _trace_files(
            trace,
            nodes,
            slot_replicas or DEFAULT_REPLICAS,
            first,
            began,
            ended,
            as_mig,
            mig_layout,
        )
    elif any(o is not None for o in (nodes, first, slot_replicas, as_mig, mig_layout)):
        raise typer.BadParameter(
            "--nodes, --first, --slot-replicas, --as-mig and --mig-layout go with --trace",
            param_hint="--trace",
        )
    waiting = stderr()
    shown = (
        waiting.status("replaying on the server (a month of demand takes minutes)...")
        if waiting.is_terminal
        else nullcontext()
    )
    with shown:  # a terminal sees that the command waits on purpose; a pipe or a test sees nothing
        answer = call(
            server,
            token,
            as_json,
            lambda c: c.replay.run(since=began, until=ended, **files),
            {
                "since": "--since",
                "until": "--until",
                "demand": "--demand",
                "fleet": "--fleet",
                "fleetChanges": "--fleet-changes",
                "policy": "--policy",
                "against": "--against",
            },
        )
    if as_json:
        print_json(answer.model_dump(mode="json"))
        return
    console = stdout()
    if note is not None:
        console.print(note, markup=False)
    console.print(
        f"replay of {answer.requests} request(s) from {answer.source},"
        f" {when(answer.since)} to {when(answer.until)}",
        markup=False,
    )
    rows: list[list[str]] = []
    for run in answer.runs:
        rows.extend(_row(run.name, tenant, f) for tenant, f in run.tenants.items())
        rows.append(_row(run.name, "(all)", run.overall))
    print_fitted(console, _COLUMNS, rows, output)
    for run in answer.runs:
        share = run.overall.fragmentation
        stranded = "-" if share is None else f"{share:.1%}"
        console.print(
            f"{run.name}: fragmentation {stranded} of free GPU capacity;"
            f" replayed in {run.elapsed_seconds:g} s",
            markup=False,
        )
    if answer.differences:
        console.print("against less policy:", markup=False)
        diff_rows = []
        for tenant, d in answer.differences.items():
            diff_rows.append(
                [
                    "(all)" if tenant == "overall" else tenant,
                    _signed(d.get("gpuHoursGranted"), _hours(d.get("gpuHoursGranted"))),
                    _signed(d.get("gpuHoursRefused"), _hours(d.get("gpuHoursRefused"))),
                    _signed(d.get("waitP50Seconds"), _seconds(d.get("waitP50Seconds"))),
                    _signed(d.get("waitP99Seconds"), _seconds(d.get("waitP99Seconds"))),
                    _signed(d.get("preemptions"), f"{d.get('preemptions') or 0:g}"),
                    _signed(d.get("cost"), f"{d.get('cost') or 0:.2f}"),
                ]
            )
        print_fitted(console, _DIFF, diff_rows, output)
