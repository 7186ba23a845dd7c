"""`better-compute reserve` and `better-compute reservations list|show|cancel|release|extend`.

`reserve` books one device line of `reservations.create` from its flags: whole GPUs (`--gpus`), MIG
instances of a profile (`--profile`), shared slots (`--slots`) or what each device must give
(`--capability`), on named nodes with `--node` (the selector's `node In [...]`). It builds the body the
API takes and nothing else: which atoms fit is the server's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from better_compute.cli import choices, config, watch
from better_compute.cli.app import app
from better_compute.cli.calls import JsonFlag, call
from better_compute.cli.output import print_json, stdout
from better_compute.cli.tables import (
    Column,
    Output,
    OutputOption,
    json_wanted,
    print_details,
    print_fitted,
)
from better_compute.cli.times import parse_time, when
from better_compute.wire import cdi

if TYPE_CHECKING:
    from better_compute.client import Compute
    from better_compute.wire.common import Page
    from better_compute.wire.reservations import ReservationPublic, ReservationStatus

reservations_app = typer.Typer(
    help="List, show, cancel, release and extend reservations.", no_args_is_help=True
)
app.add_typer(reservations_app, name="reservations")

T = TypeVar("T")

_LIST_COLUMNS = (
    Column("id"),
    Column("status", drop=1),
    Column("tenant", drop=6, wrap=True),
    Column("pool", drop=3, wrap=True),
    Column("start", drop=2),
    Column("for", drop=4),
    Column("size", drop=5),
)
_ATOM_COLUMNS = (
    Column("atom"),
    Column("class", drop=2),
    Column("profile", drop=1),
    Column("gpu"),
    Column("MIG device"),
    Column("node", drop=3, wrap=True),
)
_NARROW_ATOM_COLUMNS = (
    Column("atom / GPU / MIG device"),
    Column("class", drop=2),
    Column("profile", drop=1),
    Column("node", drop=3, wrap=True),
)


OPTIONS = {"tenantId": "--tenant", "poolId": "--pool"}
"""The body fields these commands fill from an option: a refusal naming one names the option."""


def _call(server: str | None, token: str | None, as_json: bool, action: Callable[[Compute], T]) -> T:
    return call(server, token, as_json, action, OPTIONS)


def _span(start: datetime, end: datetime) -> str:
    """A window's length, e.g. `4h`, `1d12h`, `45m`."""
    minutes = int((end - start).total_seconds() // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    text = "".join(f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if n)
    return text or "0m"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _size(reservation: ReservationPublic) -> str:
    """What a reservation holds, as it was booked: `2 GPUs`, `3g.40gb` (a MIG instance by its
    profile, `2 × 1g.10gb` for two), `1 slot`; the slice count only where no atom says more."""
    profiles: dict[str, int] = {}
    slots = 0
    for atom in reservation.atoms:
        profile = atom.attributes.get("migProfile")
        if profile:
            profiles[str(profile)] = profiles.get(str(profile), 0) + 1
        elif "slot" in atom.attributes:
            slots += 1
    parts = []
    if reservation.gpu_count:
        parts.append(_plural(reservation.gpu_count, "GPU"))
    parts.extend(name if n == 1 else f"{n} × {name}" for name, n in profiles.items())
    if slots:
        parts.append(_plural(slots, "slot"))
    if reservation.gpu_slices and not profiles and not slots:
        parts.append(_plural(reservation.gpu_slices, "slice"))
    return ", ".join(parts) or "0"


def _profile(attributes: dict[str, object]) -> str:
    """What the atom is, in the words a user booked it by: the MIG profile, or the shared slot."""
    if attributes.get("migProfile"):
        return str(attributes["migProfile"])
    if "slot" in attributes:
        return f"slot {attributes['slot']}"
    return ""


def _show(reservation: ReservationPublic, as_json: bool, output: Output = Output.TABLE) -> None:
    if as_json:
        print_json(reservation.model_dump(mode="json"))
        return
    start, end = reservation.start, reservation.end
    rows: list[tuple[str, str]] = [
        ("ID", reservation.id),
        ("Status", reservation.status),
        ("Tenant", reservation.tenant_id),
        ("Pool", reservation.pool_id),
        ("Window", f"{when(start)} → {when(end)} ({_span(start, end)})"),
        ("Size", _size(reservation)),
        ("Binding", reservation.binding),
    ]
    if reservation.binding_detail:
        rows.append(("Binding detail", reservation.binding_detail))
    if reservation.idempotency_key:
        rows.append(("Idempotency key", reservation.idempotency_key))
    if reservation.atoms:
        # What a container asks its runtime for, and the file the node's daemon writes for it in the
        # node's CDI directory (docs/bcd.md, "Container runtime").
        rows.append(("CDI device", cdi.device(reservation.id)))
        rows.append(("CDI spec file", cdi.spec_file_name(reservation.id)))
    console = stdout()
    print_details(console, rows)
    if not reservation.atoms:
        return
    console.print("Atoms", markup=False)
    # A MIG booking is used by its MIG device uuid (CUDA_VISIBLE_DEVICES=MIG-...): it is shown whole
    # beside the GPU's. The three ids do not fit side by side in 80 columns, so there they stack.
    wide = output is Output.WIDE or console.width >= 28 + 40 + 40 + 20
    atom_rows: list[list[str]] = []
    for atom in reservation.atoms:
        attributes = dict(atom.attributes)
        mig = str(attributes.get("migUuid") or "")
        if wide:
            atom_rows.append([atom.id, atom.cls, _profile(attributes), atom.gpu_id, mig, atom.node])
        else:
            ids = "\n".join(x for x in (atom.id, atom.gpu_id, mig) if x)
            atom_rows.append([ids, atom.cls, _profile(attributes), atom.node])
    if wide:
        print_fitted(console, _ATOM_COLUMNS, atom_rows, Output.WIDE)
    else:
        print_fitted(console, _NARROW_ATOM_COLUMNS, atom_rows, output)


_RESERVE_HELP = """Reserve atoms of a pool for a time window.

What to book, one of (an example each):
  --gpus N                    whole GPUs
      reserve --pool a100-exclusive --gpus 2 --duration 4h
  --profile P [--count N]     MIG instances of profile P (default 1)
      reserve --pool h100-mig --profile 3g.40gb --duration 4h
  --slots N                   time-slice or MPS slots of a shared pool
      reserve --pool h100-timeslice --slots 2 --duration 1h
  --capability C [--count N]  the pool's cheapest kind of device giving C
      reserve --pool h100-mig --capability 'memory>=20GiB' --duration 1h

C is comma-separated minimums: memory>=20GiB, slices>=2 (compute slices),
nvlink (a whole GPU with NVLink peers).

Where (with --gpus, --profile or --slots):
  --node NAME                 only on this node (repeat for any of several)
      reserve --pool a100-exclusive --gpus 1 --node use-a100-2 --duration 4h

Together (with --slots):
  --same-gpu                  all N slots on one GPU (refused when no GPU can)
      reserve --pool h100-timeslice --slots 4 --same-gpu --duration 1h
"""

_SHAPES = ("--gpus", "--profile", "--slots", "--capability")


def _device(
    gpus: int | None,
    profile: str | None,
    slots: int | None,
    capability: str | None,
    count: int | None,
    nodes: list[str] | None = None,
    same_gpu: bool = False,
) -> dict[str, object]:
    """The one `devices` line the flags ask for, as the API's JSON (docs/api.md, `DeviceRequest`)."""
    values = (gpus, profile, slots, capability)
    given = [name for name, value in zip(_SHAPES, values, strict=True) if value is not None]
    if not given:
        raise typer.BadParameter(
            "one of them is required: it says what to book",
            param_hint=" / ".join(_SHAPES),
        )
    if len(given) > 1:
        raise typer.BadParameter(
            "give only one: each asks for a different kind of device", param_hint=" / ".join(given)
        )
    if count is not None and (gpus is not None or slots is not None):
        raise typer.BadParameter(
            f"goes with --profile or --capability; {given[0]} N is itself the count", param_hint="--count"
        )
    if same_gpu and slots is None:
        raise typer.BadParameter(
            f"goes with --slots: only slots are pieces of one GPU to keep together, not {given[0]}",
            param_hint="--same-gpu",
        )
    where = _node_expressions(nodes or [], capability is not None)
    if gpus is not None:
        return _line({"class": "gpu", "count": gpus}, where)
    if slots is not None:
        line: dict[str, object] = {"class": "gpu.slot", "count": slots}
        return _line({**line, "sameGpu": True} if same_gpu else line, where)
    if profile is not None:
        if not profile.strip():
            raise typer.BadParameter("give a MIG profile, e.g. 3g.40gb", param_hint="--profile")
        expression: dict[str, object] = {"key": "migProfile", "op": "In", "values": [profile]}
        return _line({"class": "gpu.mig", "count": count or 1}, [expression, *where])
    from better_compute.cli.capability import parse_capability

    try:
        asked = parse_capability(capability or "")
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--capability") from None
    return {"capability": asked, "count": count or 1}


def _node_expressions(nodes: list[str], by_capability: bool) -> list[dict[str, object]]:
    """`--node` as the selector's `node In [...]` expression (none without it). The server decides
    which names are nodes of the pool; a name it has no free atom on is its refusal."""
    if not nodes:
        return []
    if by_capability:
        raise typer.BadParameter(
            "goes with --gpus, --profile or --slots: a device asked by capability takes no selector",
            param_hint="--node",
        )
    if any(not name.strip() for name in nodes):
        raise typer.BadParameter("give a node name, e.g. gpu-a-1", param_hint="--node")
    return [{"key": "node", "op": "In", "values": list(dict.fromkeys(nodes))}]


def _line(line: dict[str, object], expressions: list[dict[str, object]]) -> dict[str, object]:
    """A device line, with a selector when there is something to select on."""
    return {**line, "selector": {"matchExpressions": expressions}} if expressions else line


@app.command("reserve", help=_RESERVE_HELP)
def reserve(
    pool: Annotated[str, typer.Option("--pool", help="The pool to book in.", show_default=False)],
    duration: Annotated[
        str, typer.Option("--duration", help="How long, e.g. 30m, 4h, 2d.", show_default=False)
    ],
    gpus: Annotated[
        int | None, typer.Option("--gpus", min=1, help="How many whole GPUs.", show_default=False)
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option("--profile", help="MIG instances of this profile, e.g. 3g.40gb.", show_default=False),
    ] = None,
    slots: Annotated[
        int | None,
        typer.Option("--slots", min=1, help="How many time-slice or MPS slots.", show_default=False),
    ] = None,
    capability: Annotated[
        str | None,
        typer.Option(
            "--capability",
            help="What each device must give, e.g. 'memory>=20GiB,slices>=2'.",
            show_default=False,
        ),
    ] = None,
    count: Annotated[
        int | None,
        typer.Option(
            "--count", min=1, help="How many, with --profile or --capability (default 1).", show_default=False
        ),
    ] = None,
    node: Annotated[
        list[str] | None,
        typer.Option("--node", help="Only on this node (repeat for any of several).", show_default=False),
    ] = None,
    same_gpu: Annotated[
        bool,
        typer.Option(
            "--same-gpu", help="With --slots: all the slots on one GPU (sameGpu).", show_default=False
        ),
    ] = False,
    start: Annotated[
        str | None,
        typer.Option("--start", help="ISO 8601 start time (default: now).", show_default=False),
    ] = None,
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", help="Tenant (default: the token's tenant).", show_default=False),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            "--idempotency-key",
            help="Repeat the command with the same key to get the same reservation (default: generated).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    device = _device(gpus, profile, slots, capability, count, node, same_gpu)
    starts_at = parse_time(start, "--start")
    reservation = _call(
        server,
        token,
        as_json,
        lambda compute: compute.reservations.create(
            pool_id=pool,
            devices=[device],
            duration=duration,
            tenant_id=tenant,
            start=starts_at,
            idempotency_key=idempotency_key,
        ),
    )
    _show(reservation, as_json)


@reservations_app.command("list")
def list_reservations(
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's.")] = None,
    pool: Annotated[str | None, typer.Option("--pool", help="Only in this pool.")] = None,
    status: Annotated[
        choices.ReservationStatus | None,
        typer.Option("--status", help="Only in this state.", show_default=False),
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="At most this many.")] = None,
    cursor: Annotated[str | None, typer.Option("--cursor", help="Continue from a previous page.")] = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """List reservations, newest first."""
    as_json = json_wanted(as_json, output)
    statuses: tuple[ReservationStatus, ...] = ("scheduled", "active", "ended", "cancelled", "released")
    wanted: ReservationStatus | None = None
    if status is not None:
        if status not in statuses:
            raise typer.BadParameter(f"must be one of {', '.join(statuses)}", param_hint="--status")
        wanted = next(s for s in statuses if s == status)
    page: Page[ReservationPublic] = _call(
        server,
        token,
        as_json,
        lambda compute: compute.reservations.list(
            tenant_id=tenant, pool_id=pool, status=wanted, limit=limit, cursor=cursor
        ),
    )
    if as_json:
        print_json(page.model_dump(mode="json"))
        return
    if not page.items:
        # An empty table prints only its header, which reads like a failure; say it.
        stdout().print("no reservations" if cursor is None else "no more reservations", markup=False)
        return
    rows = [
        [
            item.id,
            item.status,
            item.tenant_id,
            item.pool_id,
            when(item.start),
            _span(item.start, item.end),
            _size(item),
        ]
        for item in page.items
    ]
    console = stdout()
    print_fitted(console, _LIST_COLUMNS, rows, output)
    if page.next_cursor:
        console.print(f"more: --cursor {page.next_cursor}", markup=False)


FINAL = frozenset({"ended", "cancelled", "released"})
"""Statuses a reservation does not leave: where `show --watch` stops."""


@reservations_app.command("show")
@reservations_app.command("get", hidden=True)
def show(
    reservation_id: Annotated[str, typer.Argument(metavar="ID", help="The reservation.")],
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    watching: watch.WatchOption = False,
    interval: watch.IntervalOption = 2.0,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Show one reservation and the atoms it holds: for a MIG booking its profile, GPU and MIG device.
    With --watch, again on each change until it has ended, been cancelled or released."""
    as_json = json_wanted(as_json, output)
    if watching:
        _call(
            server,
            token,
            as_json,
            lambda c: watch.follow(
                lambda: c.reservations.get(reservation_id),
                lambda r: _show(r, False, output),
                lambda r: r.status in FINAL,
                what=f"reservation {reservation_id}",
                interval=interval,
                as_json=as_json,
            ),
        )
        return
    reservation = _call(server, token, as_json, lambda compute: compute.reservations.get(reservation_id))
    _show(reservation, as_json, output)


@reservations_app.command("cancel")
def cancel(
    reservation_id: Annotated[str, typer.Argument(metavar="ID", help="The reservation.")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Cancel a reservation before its start; its whole window frees."""
    _show(_call(server, token, as_json, lambda compute: compute.reservations.cancel(reservation_id)), as_json)


@reservations_app.command("release")
def release(
    reservation_id: Annotated[str, typer.Argument(metavar="ID", help="The reservation.")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """End an active reservation now; the rest of its window frees."""
    _show(
        _call(server, token, as_json, lambda compute: compute.reservations.release(reservation_id)), as_json
    )


@reservations_app.command("extend")
def extend(
    reservation_id: Annotated[str, typer.Argument(metavar="ID", help="The reservation.")],
    duration: Annotated[
        str, typer.Option("--by", help="How much later it ends: 30m, 4h, 1d.", show_default=False)
    ],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Move a reservation's end later on the atoms it holds; refused when one is booked then."""
    _show(
        _call(server, token, as_json, lambda compute: compute.reservations.extend(reservation_id, duration)),
        as_json,
    )
