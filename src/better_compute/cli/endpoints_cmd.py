"""`endpoints` (create, list, show, update, delete, invoke) and `components` (create, list, show,
scale, delete): inference endpoints whose nodes' GPUs are split by a partition layout, and the models
deployed on their partitions (docs/endpoints.md), each command one API method through the typed
client; `endpoints invoke` sends a model's input to a component and prints its answer.

A table for people, with each instance's GPUs drawn split into their partitions (widths by memory);
`--json` for scripts (the API's own answer).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from better_compute.cli import config, watch
from better_compute.cli.app import app
from better_compute.cli.calls import JsonFlag, call
from better_compute.cli.container_flags import (
    ArgOption,
    CommandOption,
    ContainerFileOption,
    ContainerFlags,
    EnvOption,
    ImageOption,
    PortOption,
    ReadyPathOption,
    container_of,
    options_of,
    print_what_runs,
)
from better_compute.cli.exec_output import ExecCommandArgument, ExecTimeoutOption, finish_exec
from better_compute.cli.output import LogTailOption, fail, print_json, print_log, stderr, stdout
from better_compute.cli.tables import (
    Column,
    Output,
    OutputOption,
    json_wanted,
    print_details,
    print_fitted,
)
from better_compute.cli.times import when
from better_compute.wire.invocations import INVOKED_COPY_HEADER

if TYPE_CHECKING:
    from better_compute.wire.common import Page
    from better_compute.wire.endpoints import ComponentPublic, EndpointPublic

endpoints_app = typer.Typer(
    help="Create, list, show and delete inference endpoints on MIG partitions.", no_args_is_help=True
)
app.add_typer(endpoints_app, name="endpoints")

OPTIONS = {
    "tenantId": "--tenant",
    "variants[0].poolId": "--pool",
    "variants[0].instanceCount": "--instances",
    "variants[0].acceleratorPartitionLayouts": "--partition-type",
    "variants[0].acceleratorPartitionLayouts[0].acceleratorPartitionTypes": "--partition-type",
    "variants[0].pricePerInstanceHour": "--price",
    "variants[0].name": "--variant",
}
"""Body fields the commands fill from an option, so a refusal naming one names the option."""

ENDPOINT_COLUMNS = [
    Column("name"),
    Column("tenant", drop=3),
    Column("status"),
    Column("variants", drop=2, wrap=True),
    Column("instances", drop=1),
    Column("reason", drop=4, wrap=True),
]
INSTANCE_COLUMNS = [
    Column("node"),
    Column("variant", drop=2),
    Column("state"),
    Column("partitions", wrap=True),
]

_MEMORY = re.compile(r"\.(\d+)gb")
_SEGMENT_COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red", "white")


def draw_gpu(partition_types: Sequence[str], width: int = 48) -> Text:
    """One GPU split into its partitions, each as wide as its share of the layout's memory."""
    sizes = [int(m.group(1)) if (m := _MEMORY.search(t)) else 1 for t in partition_types]
    total = sum(sizes) or 1
    bar = Text()
    for i, (kind, size) in enumerate(zip(partition_types, sizes, strict=True)):
        cells = max(len(kind.removeprefix("mig-")) + 2, round(width * size / total))
        label = kind.removeprefix("mig-").center(cells - 2)
        bar.append(f"[{label}]", style=f"reverse {_SEGMENT_COLOURS[i % len(_SEGMENT_COLOURS)]}")
    return bar


def _types(e: EndpointPublic, variant: str) -> list[str]:
    found = next((v for v in e.variants if v.name == variant), None)
    return [] if found is None else list(found.accelerator_partition_layouts[0].accelerator_partition_types)


def _variants(e: EndpointPublic) -> str:
    return "; ".join(
        f"{v.name}: {v.instance_count} x {v.pool_id} "
        f"({', '.join(v.accelerator_partition_layouts[0].accelerator_partition_types)})"
        for v in e.variants
    )


def _print_endpoints(items: Sequence[EndpointPublic], output: Output) -> None:
    console = stdout()
    if not items:
        console.print("no endpoints", markup=False)
        return
    rows = [
        [e.name, e.tenant_id, e.status, _variants(e), str(len(e.instances)), e.reason or "-"] for e in items
    ]
    print_fitted(console, ENDPOINT_COLUMNS, rows, output)


def _print_endpoint(e: EndpointPublic, output: Output) -> None:
    console = stdout()
    details = [
        ("Name", e.name),
        ("Tenant", e.tenant_id),
        ("Status", e.status),
        ("Reason", e.reason or "-"),
        ("Variants", _variants(e)),
        ("Created", when(e.created_at)),
    ]
    print_details(console, details)
    console.print()
    console.print("instances", markup=False, style="bold")
    if not e.instances:
        console.print("no instances", markup=False)
        return
    rows = [
        [
            i.node,
            i.variant,
            i.state,
            ", ".join(f"{n} x {t}" for t, n in i.partitions.items()) or "none yet",
        ]
        for i in e.instances
    ]
    print_fitted(console, INSTANCE_COLUMNS, rows, output)
    console.print()
    for i in e.instances:
        console.print(f"{i.node} ({i.gpus} GPUs, each split as below)", markup=False)
        console.print(draw_gpu(_types(e, i.variant)))


def _show(e: EndpointPublic, as_json: bool, output: Output = Output.TABLE) -> None:
    if as_json:
        print_json(e.model_dump(mode="json", by_alias=True))
        return
    _print_endpoint(e, output)


def _from_file(path: Path, as_json: bool) -> dict[str, Any]:
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        fail(f"--file {path}: {exc}", as_json=as_json)
    if not isinstance(body, dict):
        fail(f"--file {path}: an endpoint is a JSON object", as_json=as_json)
    return body


@endpoints_app.command("create")
def endpoints_create(
    name: Annotated[str | None, typer.Argument(metavar="NAME", show_default=False)] = None,
    pool: Annotated[
        str | None, typer.Option("--pool", help="The mig pool its instances come from.", show_default=False)
    ] = None,
    instances: Annotated[int, typer.Option("--instances", min=1, help="How many nodes of the pool.")] = 1,
    partition_type: Annotated[
        list[str] | None,
        typer.Option(
            "--partition-type",
            help="One MIG instance of every GPU, such as mig-3g.40gb (repeat, one per instance).",
            show_default=False,
        ),
    ] = None,
    variant: Annotated[str, typer.Option("--variant", help="The variant's name.")] = "AllTraffic",
    price: Annotated[
        str | None,
        typer.Option("--price", help="The price of an instance hour, such as 25.25.", show_default=False),
    ] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="The tenant (an admin must give it).", show_default=False)
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            help="The whole endpoints.create body as JSON (several variants), instead of the options.",
            show_default=False,
        ),
    ] = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Create an endpoint: --instances idle nodes of --pool, every GPU split into the
    --partition-type list (one entry per MIG instance, the same on every GPU). It is Creating while
    the nodes are cut through the layout gate, then InService; a pool short of idle nodes leaves
    it Failed with the reason (exit status 1), and it is tried again when capacity frees."""
    as_json = json_wanted(as_json, output)
    if file is not None:
        body = _from_file(file, as_json)
        given_name, tenant_id, variants = body.get("name"), body.get("tenantId", tenant), body.get("variants")
        if not isinstance(given_name, str) or not isinstance(variants, list):
            fail(f"--file {file}: it needs name and variants", as_json=as_json)
    else:
        if name is None or pool is None or not partition_type:
            raise typer.BadParameter("give NAME, --pool and --partition-type (or --file)", param_hint="NAME")
        given_name, tenant_id = name, tenant
        variants = [
            {
                "name": variant,
                "poolId": pool,
                "instanceCount": instances,
                "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": list(partition_type)}],
                **({"pricePerInstanceHour": price} if price is not None else {}),
            }
        ]
    created = call(
        server,
        token,
        as_json,
        lambda c: c.endpoints.create(name=given_name, tenant_id=tenant_id, variants=variants),
        OPTIONS,
    )
    _show(created, as_json, output)
    if created.status == "Failed":
        # Recorded, but a script must not read it as made: exit non-zero, saying why on stderr
        # (with --json the answer on stdout has the status and the reason).
        if as_json:
            raise typer.Exit(1)
        stderr().print(
            f"error: endpoint {created.name} is Failed: {created.reason or 'no reason given'}; it is"
            f" tried again when capacity frees (better-compute endpoints show {created.name}), or"
            f" delete it (better-compute endpoints delete {created.name})",
            markup=False,
        )
        raise typer.Exit(1)


@endpoints_app.command("list")
def endpoints_list(
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only this tenant's (admin).", show_default=False)
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="At most this many.", show_default=False)
    ] = None,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="The next page's cursor.", show_default=False)
    ] = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Endpoints by name, with their status and instances."""
    as_json = json_wanted(as_json, output)
    found: Page[EndpointPublic] = call(
        server, token, as_json, lambda c: c.endpoints.list(tenant_id=tenant, limit=limit, cursor=cursor)
    )
    if as_json:
        print_json(found.model_dump(mode="json", by_alias=True))
        return
    _print_endpoints(found.items, output)
    if found.next_cursor:
        stdout().print(f"more: --cursor {found.next_cursor}", markup=False)


FINAL = frozenset({"InService", "Failed"})
"""Statuses where `endpoints show --watch` stops: the endpoint serves, or it cannot."""


@endpoints_app.command("show")
def endpoints_show(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    watching: watch.WatchOption = False,
    interval: watch.IntervalOption = 2.0,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """An endpoint, its instances and the partitions of each, with one GPU drawn split. With
    --watch, again on each change until it is InService or Failed, or deleted."""
    as_json = json_wanted(as_json, output)
    if watching:
        call(
            server,
            token,
            as_json,
            lambda c: watch.follow(
                lambda: c.endpoints.get(name),
                lambda e: _show(e, False, output),
                lambda e: e.status in FINAL,
                what=f"endpoint {name}",
                interval=interval,
                as_json=as_json,
            ),
        )
        return
    _show(call(server, token, as_json, lambda c: c.endpoints.get(name)), as_json, output)


@endpoints_app.command("logs")
def endpoints_logs(
    name: Annotated[str, typer.Argument(metavar="ENDPOINT")],
    component: Annotated[
        str, typer.Option("--component", help="The endpoint's component whose copy's log to read.")
    ],
    copy: Annotated[
        int | None,
        typer.Option(
            "--copy", min=0, help="The copy's number (default: the first copy on a node).", show_default=False
        ),
    ] = None,
    tail: LogTailOption = None,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """The newest lines of a component copy's container log (at most 1 MiB), read through its
    node's agent (the node must run `bcd run --listen`; docs/bcd.md)."""
    got = call(
        server,
        token,
        as_json,
        lambda c: c.endpoints.logs(name, component, copy=copy, tail=tail),
        {"component": "--component", "copy": "--copy", "tail": "--tail"},
    )
    print_log(got.allocation_id, got.node, got.lines, as_json)


@endpoints_app.command("exec")
def endpoints_exec(
    name: Annotated[str, typer.Argument(metavar="ENDPOINT")],
    command: ExecCommandArgument,
    component: Annotated[
        str, typer.Option("--component", help="The endpoint's component in whose copy's container to run it.")
    ],
    copy: Annotated[
        int | None,
        typer.Option(
            "--copy", min=0, help="The copy's number (default: the first copy on a node).", show_default=False
        ),
    ] = None,
    timeout: ExecTimeoutOption = None,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Run a command in a component copy's container, through its node's agent (`bcd run
    --listen`): `endpoints exec ENDPOINT --component C -- CMD [ARGS]...`. Its stdout and stderr
    (1 MiB each) are printed and its exit code is this command's; no TTY, no stdin, at most 60 s.
    Logged as `replica.exec`."""
    got = call(
        server,
        token,
        as_json,
        lambda c: c.endpoints.exec(name, component, command, copy=copy, timeout_seconds=timeout),
        {"component": "--component", "copy": "--copy", "timeoutSeconds": "--timeout", "command": "CMD"},
    )
    finish_exec(got, as_json)


@endpoints_app.command("update")
def endpoints_update(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    partition_type: Annotated[
        list[str],
        typer.Option(
            "--partition-type",
            help="The new layout: one MIG instance of every GPU (repeat, one per instance).",
            show_default=False,
        ),
    ],
    variant: Annotated[
        str, typer.Option("--variant", help="The variant whose layout changes.")
    ] = "AllTraffic",
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Change an endpoint's layout live: the instances are re-cut one at a time through the layout
    gate, copies moving off each first and coming back after, never below a component's
    minCopies (refused up front, naming the component, when that is impossible)."""
    as_json = json_wanted(as_json, output)
    updated = call(
        server,
        token,
        as_json,
        lambda c: c.endpoints.update(name, {variant: list(partition_type)}),
        {"variants[0].acceleratorPartitionLayouts": "--partition-type", "variants[0].name": "--variant"},
    )
    _show(updated, as_json, output)


_RETURN_COLUMNS = [
    Column("node"),
    Column("pool", drop=1),
    Column("layout now", drop=2),
    Column("goes back to"),
]


@endpoints_app.command("delete")
def endpoints_delete(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what the delete would do; change nothing.")
    ] = False,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Delete an endpoint: its components go with it and its nodes go back to their pool's layout
    through the layout gate. --dry-run runs the same checks and says what would happen."""
    as_json = json_wanted(as_json, output)
    gone = call(server, token, as_json, lambda c: c.endpoints.delete(name, dry_run=dry_run))
    if as_json:
        print_json(gone.model_dump(mode="json", by_alias=True))
        return
    console = stdout()
    if gone.dry_run:
        console.print(
            f"dry run: endpoint {gone.name} (tenant {gone.tenant_id}) would be deleted; nothing was changed",
            markup=False,
        )
    else:
        _show(gone, False, output)
    if gone.deletion is None:
        return
    removed = ", ".join(gone.deletion.components) or "none"
    console.print(f"components {'it would remove' if gone.dry_run else 'removed'}: {removed}", markup=False)
    rows = [
        [n.node, n.pool_id or "-", n.layout_from, n.layout_to or "- (no pool)"] for n in gone.deletion.nodes
    ]
    if rows:
        print_fitted(console, _RETURN_COLUMNS, rows, output)


@endpoints_app.command("invoke")
def endpoints_invoke(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    component: Annotated[
        str, typer.Option("--component", help="The inference component to send it to.", show_default=False)
    ],
    body: Annotated[
        str | None, typer.Option("--body", help="The model's input, as text.", show_default=False)
    ] = None,
    body_file: Annotated[
        Path | None,
        typer.Option("--body-file", help="The model's input, from a file (- for stdin).", show_default=False),
    ] = None,
    content_type: Annotated[
        str, typer.Option("--content-type", help="The input's Content-Type, passed to the model server.")
    ] = "application/json",
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Send one request to a ready copy of the endpoint's component and print the model server's answer
    body as it sent it (the copy that answered goes to stderr). Up to 6 MiB; the model server has
    60 s. A model server's error status exits 1 after printing its body."""
    if (body is None) == (body_file is None):
        fail("give the model's input: --body TEXT or --body-file FILE (one of them)")
    if body_file is not None:
        data = sys.stdin.buffer.read() if str(body_file) == "-" else _read_input(body_file)
    else:
        data = (body or "").encode("utf-8")
    status, headers, answer = call(
        server, token, False, lambda c: c.endpoints.invoke(name, component, data, content_type=content_type)
    )
    sys.stdout.buffer.write(answer)
    sys.stdout.buffer.flush()
    copy = headers.get(INVOKED_COPY_HEADER.lower())
    stderr().print(f"{status} from copy {copy}" if copy else str(status))
    if status >= 400:
        raise typer.Exit(1)


def _read_input(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}")


components_app = typer.Typer(
    help="Create, list, show, scale and delete an endpoint's components (models on partitions).",
    no_args_is_help=True,
)
app.add_typer(components_app, name="components")

COMPONENT_OPTIONS = {
    "endpointName": "--endpoint",
    "variantName": "--variant",
    "partitionType": "--partition-type",
    "cpuCores": "--cpu-cores",
    "memoryMiB": "--memory-mib",
    "minCopies": "--min-copies",
    "copies": "--copies",
}
COMPONENT_COLUMNS = [
    Column("name"),
    Column("endpoint"),
    Column("model", drop=3),
    Column("partition type"),
    Column("copies"),
    Column("placed"),
    Column("pending", drop=1),
    Column("reason", drop=2, wrap=True),
]
COPY_COLUMNS = [
    Column("copy"),
    Column("state"),
    Column("node"),
    Column("gpu", drop=2),
    Column("partition", drop=3),
    Column("MIG uuid", drop=1),
]


def _print_components(items: Sequence[ComponentPublic], output: Output) -> None:
    console = stdout()
    if not items:
        console.print("no components", markup=False)
        return
    rows = [
        [
            c.name,
            c.endpoint_name,
            c.model,
            c.partition_type,
            str(c.copy_count),
            str(c.placed_copies),
            str(c.pending_copies),
            c.reason or "-",
        ]
        for c in items
    ]
    print_fitted(console, COMPONENT_COLUMNS, rows, output)


def _show_component(c: ComponentPublic, as_json: bool, output: Output = Output.TABLE) -> None:
    if as_json:
        print_json(c.model_dump(mode="json", by_alias=True))
        return
    _print_components([c], output)
    print_what_runs(c.container, [("invoke path", c.invoke_path)])
    console = stdout()
    console.print()
    console.print("copies", markup=False, style="bold")
    if not c.copies:
        console.print("no copies", markup=False)
        return
    rows = [
        [str(x.index), x.state, x.node or "-", x.gpu_id or "-", x.partition or "-", x.mig_uuid or "-"]
        for x in c.copies
    ]
    print_fitted(console, COPY_COLUMNS, rows, output)


@components_app.command("create")
def components_create(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    endpoint: Annotated[str, typer.Option("--endpoint", help="The endpoint it runs on.", show_default=False)],
    model: Annotated[str, typer.Option("--model", help="The model's name.", show_default=False)],
    partition_type: Annotated[
        str,
        typer.Option(
            "--partition-type", help="One of the endpoint's, such as mig-3g.40gb.", show_default=False
        ),
    ],
    copies: Annotated[int, typer.Option("--copies", min=0, help="How many copies.")] = 1,
    variant: Annotated[str, typer.Option("--variant", help="The endpoint's variant.")] = "AllTraffic",
    min_copies: Annotated[
        int | None,
        typer.Option(
            "--min-copies", min=0, help="The floor a relayout keeps (default copies - 1).", show_default=False
        ),
    ] = None,
    cpu_cores: Annotated[
        str | None,
        typer.Option("--cpu-cores", help="Host CPU cores a copy needs (default 1).", show_default=False),
    ] = None,
    memory_mib: Annotated[
        int | None,
        typer.Option(
            "--memory-mib", min=1, help="Host memory a copy needs, MiB (default 1024).", show_default=False
        ),
    ] = None,
    image: ImageOption = None,
    command: CommandOption = None,
    arg: ArgOption = None,
    env: EnvOption = None,
    port: PortOption = None,
    ready_path: ReadyPathOption = None,
    container_file: ContainerFileOption = None,
    invoke_path: Annotated[
        str | None,
        typer.Option(
            "--invoke-path",
            help="Where invocations are POSTed on the first --port (default /invocations).",
            show_default=False,
            rich_help_panel="Container (what runs)",
        ),
    ] = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Deploy a model on --partition-type partitions of --endpoint: each copy takes a free one, the
    rest wait (pending) and are placed as partitions free up. --image (and its flags) or
    --container-file is the model server each copy runs, with SageMaker's defaults where left out
    (port 8080, ready on GET /ping, --cpu-cores and --memory-mib as its resources)."""
    as_json = json_wanted(as_json, output)
    flags = ContainerFlags(
        image=image,
        command=command,
        args=tuple(arg or ()),
        env=tuple(env or ()),
        ports=tuple(port or ()),
        ready_path=ready_path,
        container_file=container_file,
    )
    container = container_of(flags)
    if invoke_path is not None and container is None:
        raise typer.BadParameter(
            "needs --image (or --container-file): the model server it is a path of",
            param_hint="--invoke-path",
        )
    created = call(
        server,
        token,
        as_json,
        lambda c: c.components.create(
            name=name,
            endpoint_name=endpoint,
            model=model,
            partition_type=partition_type,
            variant_name=variant,
            copies=copies,
            min_copies=min_copies,
            cpu_cores=cpu_cores,
            memory_mib=memory_mib,
            container=container,
            invoke_path=invoke_path,
        ),
        {**COMPONENT_OPTIONS, "invokePath": "--invoke-path", **options_of("container", flags)},
    )
    _show_component(created, as_json, output)


@components_app.command("list")
def components_list(
    endpoint: Annotated[
        str | None, typer.Option("--endpoint", help="Only this endpoint's.", show_default=False)
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="At most this many.", show_default=False)
    ] = None,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="The next page's cursor.", show_default=False)
    ] = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Components by name, with their copies placed and waiting."""
    as_json = json_wanted(as_json, output)
    found: Page[ComponentPublic] = call(
        server,
        token,
        as_json,
        lambda c: c.components.list(endpoint_name=endpoint, limit=limit, cursor=cursor),
        COMPONENT_OPTIONS,
    )
    if as_json:
        print_json(found.model_dump(mode="json", by_alias=True))
        return
    _print_components(found.items, output)
    if found.next_cursor:
        stdout().print(f"more: --cursor {found.next_cursor}", markup=False)


@components_app.command("show")
def components_show(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """A component and where each copy runs: node, GPU, partition and MIG uuid (the routing table)."""
    as_json = json_wanted(as_json, output)
    _show_component(call(server, token, as_json, lambda c: c.components.get(name)), as_json, output)


@components_app.command("scale")
def components_scale(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    copies: Annotated[
        int, typer.Option("--copies", min=0, help="The new number of copies.", show_default=False)
    ],
    min_copies: Annotated[
        int | None,
        typer.Option("--min-copies", min=0, help="The new floor (default copies - 1).", show_default=False),
    ] = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Set a component's copies: new ones take free partitions or wait; fewer drops waiting ones first."""
    as_json = json_wanted(as_json, output)
    scaled = call(
        server,
        token,
        as_json,
        lambda c: c.components.scale(name, copies, min_copies=min_copies),
        COMPONENT_OPTIONS,
    )
    _show_component(scaled, as_json, output)


@components_app.command("delete")
def components_delete(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Delete a component: its partitions take other components' waiting copies."""
    as_json = json_wanted(as_json, output)
    _show_component(call(server, token, as_json, lambda c: c.components.delete(name)), as_json, output)
