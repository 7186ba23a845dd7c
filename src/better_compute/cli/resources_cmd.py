"""Friendly commands beside `api`: `pools`, `clusters`, `nodes`, `atoms`, `tenants`, `quotas`, `policies`,
`credentials`, `device-classes`, `priority-classes` (`list`, `show`, `create`, ... as each method allows),
and `logout`.

Each is a thin spelling of one API method through the typed client: a table for people, `--json`
for scripts (the API's own answer). Nothing here decides anything the server does not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast, get_args

import typer
from pydantic import BaseModel

from better_compute.cli import choices, config
from better_compute.cli.app import app
from better_compute.cli.calls import JsonFlag, call
from better_compute.cli.output import fail, print_json, stdout
from better_compute.cli.tables import (
    Column,
    Output,
    OutputOption,
    json_wanted,
    print_details,
    print_fitted,
)
from better_compute.cli.times import parse_time, when
from better_compute.wire.common import Page
from better_compute.wire.quotas import AtomClass, QuotaPublic

if TYPE_CHECKING:
    from better_compute.client import Compute
    from better_compute.wire.pools import NodeLayoutPreviewPublic, PoolLayoutPreview, PoolOfferPublic

T = TypeVar("T")

LimitOption = Annotated[
    int | None, typer.Option("--limit", min=1, help="At most this many.", show_default=False)
]
CursorOption = Annotated[
    str | None, typer.Option("--cursor", help="The next page's cursor.", show_default=False)
]


def _call(server: str | None, token: str | None, as_json: bool, action: Callable[[Compute], T]) -> T:
    return call(server, token, as_json, action)


def _plain(value: Any) -> dict[str, Any]:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    return dict(value)


_ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$")
"""A time as the API writes it (`2030-01-01T10:00:00.123456Z`): shown as `when` prints times."""

_WRAPPED_KEYS = frozenset({"name", "policy", "description", "match", "nodes", "reason", "detail"})
"""Keys of free text in these tables: their columns wrap at narrow widths (never an id's)."""


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        shown = {k: v for k, v in value.items() if v is not None}
        return ", ".join(f"{k}={_cell(v)}" for k, v in shown.items()) or "-"
    if isinstance(value, list):
        return ", ".join(_cell(v) for v in value) or "-"
    if isinstance(value, str) and _ISO_TIME.match(value):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return value
        return when(parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC))
    return str(value)


def label(key: str) -> str:
    """A wire key in English for a detail view: `nextFreeAt` -> `Next free at`, `ownerTenantId` ->
    `Owner tenant ID`; the JSON keeps the wire's spelling."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", key).replace("_", " ").split()
    text = " ".join(_ACRONYMS.get(w.lower(), w if w.isupper() and len(w) > 1 else w.lower()) for w in words)
    return text[:1].upper() + text[1:]


_ACRONYMS = {
    "id": "ID",
    "ids": "IDs",
    "gpu": "GPU",
    "gpus": "GPUs",
    "mig": "MIG",
    "uuid": "UUID",
    "cdi": "CDI",
}
"""Words a label spells in capitals, as people write them."""


def _columns(columns: Sequence[tuple[str, str]]) -> list[Column]:
    """`(header, key)` pairs as fitted columns: the first (the id) never dropped or cut; the others
    dropped from the last when the terminal is too narrow; free text wraps."""
    return [
        Column(header, drop=n, wrap=n > 0 and key in _WRAPPED_KEYS) for n, (header, key) in enumerate(columns)
    ]


def _table(
    rows: Iterable[Mapping[str, Any]],
    columns: Sequence[tuple[str, str]],
    empty: str,
    output: Output = Output.TABLE,
) -> None:
    """Rows as a fitted table of `columns` ((header, key) pairs), as every list command prints."""
    items = list(rows)
    console = stdout()
    if not items:
        console.print(empty, markup=False)
        return
    cells = [[_cell(item.get(key)) for _, key in columns] for item in items]
    print_fitted(console, _columns(columns), cells, output)


def _page(
    page: Page[Any],
    columns: Sequence[tuple[str, str]],
    empty: str,
    as_json: bool,
    output: Output = Output.TABLE,
) -> None:
    if as_json or output is Output.JSON:
        print_json({"items": [_plain(i) for i in page.items], "nextCursor": page.next_cursor})
        return
    _table((_plain(i) for i in page.items), columns, empty, output)
    if page.next_cursor:
        stdout().print(f"more: --cursor {page.next_cursor}", markup=False)


def _one(item: Any, as_json: bool) -> None:
    """One object as `Label  value` lines: its keys in English (`label`), its times to the second."""
    data = _plain(item)
    if as_json:
        print_json(data)
        return
    print_details(stdout(), [(label(key), _cell(value)) for key, value in data.items()])


def _find(pages: Callable[[str | None], Page[Any]], wanted: str, noun: str, as_json: bool) -> Any:
    """The item with id `wanted`, read page by page (for nouns whose API has no `get`)."""
    cursor: str | None = None
    while True:
        page = pages(cursor)
        for item in page.items:
            if _plain(item).get("id") == wanted:
                return item
        cursor = page.next_cursor
        if not cursor:
            from better_compute.client import NotFoundError

            fail(NotFoundError(f"{noun} {wanted} not found", details={"id": wanted}), as_json=as_json)


# -- pools ---------------------------------------------------------------------------------------
pools_app = typer.Typer(
    help="List, show, create, update and delete pools; offer one to tenants; preview a MIG layout change.",
    no_args_is_help=True,
)
app.add_typer(pools_app, name="pools")
POOL_COLUMNS = [
    ("id", "id"),
    ("mode", "mode"),
    ("owner", "ownerTenantId"),
    ("cluster", "clusterId"),
    ("policy", "policy"),
    ("nodes", "nodes"),
]


@pools_app.command("list")
def pools_list(
    cluster: Annotated[str | None, typer.Option("--cluster", show_default=False)] = None,
    owner: Annotated[str | None, typer.Option("--owner", help="Owner tenant.", show_default=False)] = None,
    limit: LimitOption = None,
    cursor: CursorOption = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Pools the token may see."""
    as_json = json_wanted(as_json, output)
    page = _call(
        server,
        token,
        as_json,
        lambda c: c.pools.list(cluster_id=cluster, owner_tenant_id=owner, limit=limit, cursor=cursor),
    )
    _page(page, POOL_COLUMNS, "no pools", as_json, output)


@pools_app.command("show")
def pools_show(
    pool_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """One pool, its policy and nodes."""
    _one(_call(server, token, as_json, lambda c: c.pools.get(pool_id)), as_json)


def _policy(
    mig_layout: str | None, replicas: int | None, max_duration: str | None, scrub: str | None = None
) -> dict[str, Any]:
    raw = {"migLayout": mig_layout, "replicas": replicas, "maxDuration": max_duration, "scrub": scrub}
    return {k: v for k, v in raw.items() if v is not None}


MigLayoutOption = Annotated[
    str | None, typer.Option("--mig-layout", help="mig pools: e.g. all-1g.10gb.", show_default=False)
]
ReplicasOption = Annotated[
    int | None, typer.Option("--replicas", help="timeslice and mps pools: 1-48.", show_default=False)
]
MaxDurationOption = Annotated[
    str | None, typer.Option("--max-duration", help="The longest reservation: e.g. 8h.", show_default=False)
]
ScrubOption = Annotated[
    str | None,
    typer.Option(
        "--scrub",
        help="Between tenants: none, reset (a GPU reset; exclusive pools) or zero (exclusive, mig).",
        show_default=False,
    ),
]


@pools_app.command("create")
def pools_create(
    name: Annotated[str, typer.Option("--name", show_default=False)],
    cluster: Annotated[str, typer.Option("--cluster", show_default=False)],
    mode: Annotated[
        choices.SharingMode, typer.Option("--mode", help="How jobs share a GPU.", show_default=False)
    ],
    owner: Annotated[str, typer.Option("--owner", help="Owner tenant.", show_default=False)],
    node: Annotated[
        list[str] | None, typer.Option("--node", help="A member node (repeat).", show_default=False)
    ] = None,
    mig_layout: MigLayoutOption = None,
    replicas: ReplicasOption = None,
    max_duration: MaxDurationOption = None,
    scrub: ScrubOption = None,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Create a pool (admin)."""
    policy = _policy(mig_layout, replicas, max_duration, scrub)
    created = _call(
        server,
        token,
        as_json,
        lambda c: c.pools.create(
            name=name,
            cluster_id=cluster,
            mode=mode,
            owner_tenant_id=owner,
            nodes=node or (),
            policy=policy,
        ),
    )
    _one(created, as_json)


@pools_app.command("update")
def pools_update(
    pool_id: Annotated[str, typer.Argument(metavar="ID")],
    node: Annotated[
        list[str] | None,
        typer.Option("--node", help="The member nodes (repeat; replaces them).", show_default=False),
    ] = None,
    mig_layout: MigLayoutOption = None,
    replicas: ReplicasOption = None,
    max_duration: MaxDurationOption = None,
    scrub: ScrubOption = None,
    no_max_duration: Annotated[
        bool, typer.Option("--no-max-duration", help="Remove the pool's longest-reservation limit.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Show the pool as it would be and the layout changes it would start; change nothing.",
        ),
    ] = False,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Change a pool's policy or nodes (admin); other settings are kept. --dry-run runs the same
    checks and says what would happen (per node and profile: `pools preview-layout`)."""
    if no_max_duration and max_duration is not None:
        raise typer.BadParameter(
            "give --max-duration or --no-max-duration, not both", param_hint="--no-max-duration"
        )
    policy: dict[str, Any] | None = _policy(mig_layout, replicas, max_duration, scrub) or None
    if no_max_duration:
        policy = {**(policy or {}), "maxDuration": None}
    updated = _call(
        server, token, as_json, lambda c: c.pools.update(pool_id, policy=policy, nodes=node, dry_run=dry_run)
    )
    if updated.dry_run and not as_json:
        _print_pool_plan(updated)
        return
    _one(updated, as_json)


_CHANGE_COLUMNS = [
    Column("node"),
    Column("from", wrap=True),
    Column("to", wrap=True),
    Column("waits for", wrap=True),
]


def _print_pool_plan(pool: Any) -> None:
    """A dry run's answer: what the pool would be, then each node's layout change and what it waits
    for (the tenants' bookings on it: until their end, or until released when one never ends)."""
    console = stdout()
    console.print(
        f"dry run: pool {pool.id} would be at generation {pool.generation}; nothing was changed", markup=False
    )
    _one(pool.model_copy(update={"layout_changes": None, "dry_run": False}), False)
    changes = pool.layout_changes or []
    if not changes:
        console.print("no node's layout would change", markup=False)
        return
    rows = []
    for c in changes:
        if c.open_ended:
            waits = f"release by {', '.join(c.tenants)} (a booking that never ends)"
        elif c.held_until is not None:
            waits = f"{', '.join(c.tenants)} until {when(c.held_until)}"
        else:
            waits = "nothing: cut at the gate's next step"
        rows.append([c.node, c.from_ or "-", c.to, waits])
    console.print("layout changes", markup=False)
    print_fitted(console, _CHANGE_COLUMNS, rows, Output.TABLE)


@pools_app.command("delete")
def pools_delete(
    pool_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Delete an empty pool (admin): no nodes, no reservations; its quota rows and policies go too."""
    _one(_call(server, token, as_json, lambda c: c.pools.delete(pool_id)), as_json)


def _offered_quota(items: Sequence[str]) -> dict[AtomClass, int]:
    """`--quota CLASS=N` options as the offer's `quota` map; a class given twice is a mistake."""
    classes = get_args(AtomClass)
    quota: dict[AtomClass, int] = {}
    for item in items:
        cls, sep, text = item.partition("=")
        cls = cls.strip()
        if not sep or cls not in classes:
            raise typer.BadParameter(
                f"{item!r}: write CLASS=N with CLASS one of {', '.join(classes)} (e.g. gpu.mig=3)",
                param_hint="--quota",
            )
        if not text.strip().isdecimal() or not text.strip().isascii():
            raise typer.BadParameter(f"{item!r}: N is a whole number, 0 or more", param_hint="--quota")
        if cls in quota:
            raise typer.BadParameter(f"{cls} is given twice", param_hint="--quota")
        quota[cast(AtomClass, cls)] = int(text)
    return quota


OFFER_COLUMNS = [("tenant", "tenantId"), ("pool", "poolId"), ("class", "class"), ("limit", "limit")]


@pools_app.command("offer")
def pools_offer(
    pool_id: Annotated[str, typer.Argument(metavar="POOL")],
    tenants: Annotated[list[str], typer.Argument(metavar="TENANT", help="One or more tenants.")],
    quota: Annotated[
        list[str],
        typer.Option(
            "--quota",
            help="CLASS=N: the most of gpu, gpu.mig or gpu.slot each tenant may hold at once (repeat).",
            show_default=False,
        ),
    ],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Give tenants quota rows in a pool (the admin or the pool's owner): each may then see the pool
    and book in it up to its limits. Offering again replaces the classes given; --quota CLASS=0 takes
    back what that class allowed (the row stays, at 0: no method removes it). A timeslice or mps
    pool is offered to its owner only.

    One offer per tenant, in the order given: a refusal stops there, and the tenants before it keep
    theirs (printed first)."""
    limits = _offered_quota(quota)
    done: list[PoolOfferPublic] = []

    def offer_each(c: Compute) -> None:
        from better_compute.client import ComputeError

        for tenant in tenants:
            try:
                done.append(c.pools.offer(pool_id, tenant_id=tenant, quota=limits))
            except ComputeError as exc:
                before = ""
                if done:
                    _print_offers(done, as_json)
                    before = f" (offered to {', '.join(d.tenant_id for d in done)} before it)"
                raise type(exc)(
                    f"tenant {tenant}: {exc.message}{before}",
                    code=exc.code,
                    details=exc.details,
                    status_code=exc.status_code,
                ) from None

    _call(server, token, as_json, offer_each)
    _print_offers(done, as_json)


def _print_offers(done: Sequence[PoolOfferPublic], as_json: bool) -> None:
    """The rows each tenant now has in the pool (the admin sees all of them, an owner those it wrote);
    with --json, the API's answers as `{"items": [...]}`, one per tenant, in order."""
    if as_json:
        print_json({"items": [_plain(d) for d in done]})
        return
    if done:
        _table((_plain(q) for d in done for q in d.quotas), OFFER_COLUMNS, "no quota rows")


def _held_by(node: NodeLayoutPreviewPublic) -> str:
    shown = [
        f"{h.allocation_id} ({h.tenant_id or '-'}, {when(h.ends_at) if h.ends_at else 'never ends'})"
        for h in node.held_by
    ]
    return "\n".join(shown) or "-"


def _grantable(node: NodeLayoutPreviewPublic, now: datetime) -> str:
    if node.grantable_at is None:
        return "never (open-ended booking)"
    return "now" if node.grantable_at <= now else when(node.grantable_at)


def _changes(node: NodeLayoutPreviewPublic) -> str:
    if not node.carries_pool_layout:
        return "keeps its layout"
    return f"-{len(node.disappear)}/+{len(node.appear)}"


_PREVIEW_COLUMNS = (
    Column("node"),
    Column("grantable at"),
    Column("held by"),
    Column("atoms", drop=1),
)


def _print_preview(preview: PoolLayoutPreview) -> None:
    console = stdout()
    console.print(f"pool {preview.pool_id}: {preview.from_} -> {preview.to}", markup=False)
    rows = [[n.node, _grantable(n, preview.at), _held_by(n), _changes(n)] for n in preview.nodes]
    if rows:
        print_fitted(console, _PREVIEW_COLUMNS, rows, Output.TABLE)
    else:
        console.print("no nodes", markup=False)
    capacity = [
        [profile, str(before), str(preview.capacity.after.get(profile, 0))]
        for profile, before in preview.capacity.before.items()
    ]
    console.print()
    print_fitted(console, (Column("profile"), Column("before"), Column("after")), capacity, Output.TABLE)


@pools_app.command("preview-layout")
def pools_preview_layout(
    pool_id: Annotated[str, typer.Argument(metavar="POOL")],
    layout: Annotated[str, typer.Argument(metavar="LAYOUT", help="e.g. mixed:3g.40gb+2x2g.20gb.")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """What a new MIG layout would do (admin or the pool's owner); nothing is changed.

    Per node: when the layout gate could grant it, which bookings hold it back, and how many atoms
    would disappear (-N) and appear (+M); then the pool's instances by profile before and after.
    """
    preview = _call(
        server,
        token,
        as_json,
        lambda c: c.pools.preview_layout(pool_id, layout),
    )
    if as_json:
        print_json(_plain(preview))
        return
    _print_preview(preview)


# -- clusters ------------------------------------------------------------------------------------
clusters_app = typer.Typer(
    help="List, show and create clusters (local or Slurm); set a cluster's phase.", no_args_is_help=True
)
app.add_typer(clusters_app, name="clusters")
CLUSTER_COLUMNS = [("id", "id"), ("region", "region"), ("residency", "residency"), ("phase", "phase")]


@clusters_app.command("list")
def clusters_list(
    limit: LimitOption = None,
    cursor: CursorOption = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Clusters of the fleet, with their region and phase."""
    as_json = json_wanted(as_json, output)
    page = _call(server, token, as_json, lambda c: c.clusters.list(limit=limit, cursor=cursor))
    _page(page, CLUSTER_COLUMNS, "no clusters", as_json, output)


@clusters_app.command("show")
def clusters_show(
    cluster_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """One cluster: its region, residency and phase."""
    _one(_call(server, token, as_json, lambda c: c.clusters.get(cluster_id)), as_json)


@clusters_app.command("create")
def clusters_create(
    cluster_id: Annotated[str, typer.Argument(metavar="ID")],
    region: Annotated[str, typer.Option("--region", help="The cluster's region.", show_default=False)],
    residency: Annotated[
        list[str] | None, typer.Option("--residency", help="A residency tag (repeat for several).")
    ] = None,
    kind: Annotated[
        str, typer.Option("--kind", help="local (our admission picks the cards) or slurm (Slurm does).")
    ] = "local",
    slurm_controller: Annotated[
        str | None, typer.Option("--slurm-controller", help="slurm: its slurmctld host[:port].")
    ] = None,
    slurm_partition: Annotated[
        list[str] | None,
        typer.Option("--slurm-partition", help="slurm: a partition that is ours (repeat for several)."),
    ] = None,
    slurm_account: Annotated[
        str | None, typer.Option("--slurm-account", help="slurm: the account our holding jobs run under.")
    ] = None,
    slurm_access: Annotated[
        str, typer.Option("--slurm-access", help="slurm: commands (rest is not supported yet).")
    ] = "commands",
    slurm_map: Annotated[
        list[str] | None,
        typer.Option(
            "--slurm-map",
            help="slurm: ACCOUNT=TENANT, whose a job submitted directly under ACCOUNT is (repeat).",
        ),
    ] = None,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Create an empty cluster (admin); its nodes join it afterwards (docs/slurm.md for a Slurm one)."""
    from better_compute.wire.inventory import SlurmSettings

    slurm = None
    if kind == "slurm" or slurm_controller or slurm_partition or slurm_account:
        accounts: dict[str, str] = {}
        for pair in slurm_map or ():
            account, sep, tenant = pair.partition("=")
            if not sep:
                raise typer.BadParameter(f"{pair!r}: ACCOUNT=TENANT", param_hint="--slurm-map")
            accounts[account] = tenant
        slurm = SlurmSettings(
            controller=slurm_controller or "",
            partitions=list(slurm_partition or ()),
            account=slurm_account or "",
            access=slurm_access,
            accounts=accounts,
        )
    _one(
        _call(
            server,
            token,
            as_json,
            lambda c: c.clusters.create(
                cluster_id, region=region, residency=residency or (), kind=kind, slurm=slurm
            ),
        ),
        as_json,
    )


@clusters_app.command("update")
def clusters_update(
    cluster_id: Annotated[str, typer.Argument(metavar="ID")],
    phase: Annotated[
        str,
        typer.Option(
            "--phase",
            help="active (takes new work), cordoned (no new placements) or draining (no new placements;"
            " its work is being moved away).",
            show_default=False,
        ),
    ],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Set a cluster's phase (admin); what runs there keeps running."""
    _one(_call(server, token, as_json, lambda c: c.clusters.update(cluster_id, phase=phase)), as_json)


# -- nodes ---------------------------------------------------------------------------------------
nodes_app = typer.Typer(
    help="List nodes; cordon and uncordon them; release a GPU that moved; print a node's Slurm GRES.",
    no_args_is_help=True,
)
app.add_typer(nodes_app, name="nodes")


@nodes_app.command("cordon")
def nodes_cordon(
    node: Annotated[str, typer.Argument(metavar="NODE")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Keep new bookings off a node's atoms (admin); the bookings it holds stay."""
    _one(_call(server, token, as_json, lambda c: c.nodes.update(node, cordoned=True)), as_json)


@nodes_app.command("uncordon")
def nodes_uncordon(
    node: Annotated[str, typer.Argument(metavar="NODE")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Let a cordoned node's atoms take new bookings again (admin)."""
    _one(_call(server, token, as_json, lambda c: c.nodes.update(node, cordoned=False)), as_json)


@nodes_app.command("release-gpu")
def nodes_release_gpu(
    gpu: Annotated[str, typer.Argument(metavar="GPU-UUID")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Let a GPU go from the node that has it (admin): it moved to another chassis, or its node is
    gone for good. The next node to report it takes it (restart bcd there). Refused while a tenant's
    booking holds it: cancel or release that first."""
    _one(_call(server, token, as_json, lambda c: c.nodes.release_gpu(gpu)), as_json)


@nodes_app.command("list")
def nodes_list(
    cluster: Annotated[str | None, typer.Option("--cluster", show_default=False)] = None,
    limit: LimitOption = None,
    cursor: CursorOption = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Nodes of the fleet, with their cluster and pool."""
    as_json = json_wanted(as_json, output)
    filters = {"cluster": cluster} if cluster else {}
    page = _call(server, token, as_json, lambda c: c.nodes.list(limit=limit, cursor=cursor, **filters))
    columns = [
        ("id", "id"),
        ("cluster", "clusterId"),
        ("pool", "poolId"),
        ("cordoned", "cordoned"),
        ("last contact", "lastContactAt"),
    ]
    _page(page, columns, "no nodes", as_json, output)


# -- atoms ---------------------------------------------------------------------------------------
atoms_app = typer.Typer(
    help="List atoms: what can be booked, booked now or not, and when next free.", no_args_is_help=True
)
app.add_typer(atoms_app, name="atoms")
_ATOM_COLUMNS = (
    Column("id"),
    Column("class", drop=1),
    Column("profile", drop=3),
    Column("node", drop=4, wrap=True),
    Column("bookable", drop=5),
    Column("booked now"),
    Column("next free", drop=2, wrap=True),
)


def _atom_profile(attributes: Mapping[str, Any]) -> str:
    if attributes.get("migProfile"):
        return str(attributes["migProfile"])
    if "slot" in attributes:
        return f"slot {attributes['slot']}/{attributes.get('slots', '?')}"
    return str(attributes.get("gpuModel") or "-")


def _next_free(atom: Mapping[str, Any], parent: bool) -> str:
    """When the atom is next free, or why it cannot be booked: never a bare `never` or `unbookable`."""
    if not atom.get("present", True):
        return "unbookable: gone from its node"
    if atom.get("bookedNow"):
        at = atom.get("nextFreeAt")
        if at is None:
            return "never (open-ended booking)"
        return when(datetime.fromisoformat(str(at)))
    if atom.get("bookable"):
        return "now"
    if parent:
        return "split: book its instances"
    if atom.get("partitionPending"):
        return "unbookable: changing layout"
    if atom.get("scrubPending"):
        return "unbookable: waiting for scrub"
    # what is left: an unhealthy GPU's atoms, or a split GPU's parent listed without its instances
    return "unbookable: split or unhealthy" if atom.get("class") == "gpu" else "unbookable: GPU unhealthy"


def _atom_order(atom: Mapping[str, Any]) -> tuple[str, str, int, int, int, str]:
    """Node, then GPU, then the GPU's parent row before its MIG instances or slots (by where each
    starts), so a GPU's family reads together."""
    attributes = atom.get("attributes") or {}
    start = attributes.get("start", attributes.get("giId", attributes.get("slot", 0)))
    return (
        str(atom.get("node", "")),
        str(atom.get("gpuId", "")),
        0 if atom.get("class") == "gpu" else 1,
        int(start) if isinstance(start, int) else 0,
        int(attributes.get("ciId", 0)) if isinstance(attributes.get("ciId", 0), int) else 0,
        str(atom.get("id", "")),
    )


def atom_rows(items: Iterable[Mapping[str, Any]]) -> list[list[str]]:
    """The rows of `atoms list`: ordered by node and GPU; a GPU split into MIG instances or slots
    shows its parent first, marked `(parent)`, its instances after it, and a blank row between GPUs."""
    atoms = sorted(items, key=_atom_order)
    split = {str(a.get("gpuId")) for a in atoms if a.get("class") != "gpu"}
    rows: list[list[str]] = []
    previous: str | None = None
    for a in atoms:
        gpu = str(a.get("gpuId"))
        if previous is not None and gpu != previous:
            rows.append([""] * len(_ATOM_COLUMNS))
        previous = gpu
        parent = a.get("class") == "gpu" and gpu in split
        rows.append(
            [
                str(a["id"]),
                "gpu (parent)" if parent else str(a["class"]),
                _atom_profile(a.get("attributes") or {}),
                str(a["node"]),
                "yes" if a.get("bookable") else "no",
                "yes" if a.get("bookedNow") else "no",
                _next_free(a, parent),
            ]
        )
    return rows


@atoms_app.command("list")
def atoms_list(
    pool: Annotated[str | None, typer.Option("--pool", help="Only this pool's.", show_default=False)] = None,
    cls: Annotated[
        AtomClass | None, typer.Option("--class", help="Only this class.", show_default=False)
    ] = None,
    attr: Annotated[
        list[str] | None,
        typer.Option("--attr", help="key=value an attribute must equal; repeatable.", show_default=False),
    ] = None,
    limit: LimitOption = None,
    cursor: CursorOption = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Atoms of the pools you may see: whether each is booked now, and when it is next free."""
    as_json = json_wanted(as_json, output)
    attrs = dict(item.partition("=")[::2] for item in attr or [])
    page = _call(
        server,
        token,
        as_json,
        lambda c: c.atoms.list(pool=pool, cls=cls, attrs=attrs or None, limit=limit, cursor=cursor),
    )
    if as_json:
        _page(page, [], "", as_json)
        return
    console = stdout()
    if not page.items:
        console.print("no atoms" if cursor is None else "no more atoms", markup=False)
        return
    print_fitted(console, _ATOM_COLUMNS, atom_rows(page.items), output)
    if page.next_cursor:
        console.print(f"more: --cursor {page.next_cursor}", markup=False)


# -- tenants -------------------------------------------------------------------------------------
tenants_app = typer.Typer(help="List, show, create, update and delete tenants.", no_args_is_help=True)
app.add_typer(tenants_app, name="tenants")
TENANT_COLUMNS = [("id", "id"), ("name", "name"), ("created", "createdAt")]


@tenants_app.command("list")
def tenants_list(
    limit: LimitOption = None,
    cursor: CursorOption = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Tenants (a tenant's token sees its own)."""
    as_json = json_wanted(as_json, output)
    _page(
        _call(server, token, as_json, lambda c: c.tenants.list(limit=limit, cursor=cursor)),
        TENANT_COLUMNS,
        "no tenants",
        as_json,
        output,
    )


@tenants_app.command("show")
def tenants_show(
    tenant_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """One tenant."""
    found = _call(
        server,
        token,
        as_json,
        lambda c: _find(lambda cur: c.tenants.list(cursor=cur), tenant_id, "tenant", as_json),
    )
    _one(found, as_json)


@tenants_app.command("create")
def tenants_create(
    tenant_id: Annotated[str, typer.Option("--id", show_default=False)],
    name: Annotated[str | None, typer.Option("--name", help="Default: the id.", show_default=False)] = None,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Create a tenant (admin)."""
    _one(
        _call(server, token, as_json, lambda c: c.tenants.create(id=tenant_id, name=name or tenant_id)),
        as_json,
    )


@tenants_app.command("delete")
def tenants_delete(
    tenant_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Delete a tenant (admin) that owns no pool and holds no reservation not over: its credentials
    stop working, its quota rows and policies go; its id is never reused."""
    _one(_call(server, token, as_json, lambda c: c.tenants.delete(tenant_id)), as_json)


# -- quotas --------------------------------------------------------------------------------------
quotas_app = typer.Typer(help="List and set quota rows.", no_args_is_help=True)
app.add_typer(quotas_app, name="quotas")


@quotas_app.command("list")
def quotas_list(
    tenant: Annotated[str | None, typer.Option("--tenant", show_default=False)] = None,
    pool: Annotated[str | None, typer.Option("--pool", show_default=False)] = None,
    device_class: Annotated[str | None, typer.Option("--device-class", show_default=False)] = None,
    scope: Annotated[
        choices.QuotaScope | None, typer.Option("--scope", help="The quota's scope.", show_default=False)
    ] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", show_default=False)] = None,
    start: Annotated[
        str | None,
        typer.Option(
            "--from", help="used: the most held at once from this time (ISO 8601).", show_default=False
        ),
    ] = None,
    end: Annotated[
        str | None,
        typer.Option("--to", help="...to this time (default: an hour after --from).", show_default=False),
    ] = None,
    limit: LimitOption = None,
    cursor: CursorOption = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Quota rows of both kinds: pool rows (how much of an atom class a tenant may hold at once in a
    pool) and device-class rows (how many devices of a class in a cluster or the fleet), with what
    the tenant holds now (used); for pool rows, at most at once between --from and --to."""
    as_json = json_wanted(as_json, output)
    window_start, window_end = parse_time(start, "--from"), parse_time(end, "--to")
    page = _call(
        server,
        token,
        as_json,
        lambda c: c.quotas.list(
            tenant_id=tenant,
            pool_id=pool,
            device_class=device_class,
            scope=cast(Any, scope),
            cluster_id=cluster,
            start=window_start,
            end=window_end,
            limit=limit,
            cursor=cursor,
        ),
    )
    if not as_json:
        page = page.model_copy(update={"items": [_quota_row(q) for q in page.items]})
    columns = [
        ("tenant", "tenantId"),
        ("scope", "scope"),
        ("pool", "poolId"),
        ("class", "class"),
        ("device", "deviceClass"),
        ("cluster", "clusterId"),
        ("used", "used"),
        ("limit", "limit"),
    ]
    _page(page, columns, "no quotas", as_json, output)


def _quota_row(q: QuotaPublic) -> dict[str, Any]:
    """A row of the table: a device-class row's ceiling (guaranteedDevices) in the limit column."""
    row = _plain(q)
    if q.guaranteed_devices is not None:
        row["limit"] = q.guaranteed_devices
    return row


@quotas_app.command("set")
def quotas_set(
    tenant: Annotated[str, typer.Option("--tenant", show_default=False)],
    pool: Annotated[
        str | None, typer.Option("--pool", help="A pool row: the pool.", show_default=False)
    ] = None,
    cls: Annotated[
        str | None, typer.Option("--class", help="A pool row: gpu, gpu.mig or gpu.slot.", show_default=False)
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=0, help="A pool row: its limit.", show_default=False)
    ] = None,
    device_class: Annotated[
        str | None, typer.Option("--device-class", help="A device-class row: the class.", show_default=False)
    ] = None,
    scope: Annotated[
        str | None, typer.Option("--scope", help="A device-class row: cluster or fleet.", show_default=False)
    ] = None,
    cluster: Annotated[
        str | None, typer.Option("--cluster", help="With --scope cluster: the cluster.", show_default=False)
    ] = None,
    guaranteed: Annotated[
        int | None,
        typer.Option(
            "--guaranteed", min=0, help="A device-class row: the most devices held.", show_default=False
        ),
    ] = None,
    floor: Annotated[
        int | None,
        typer.Option("--floor", min=0, help="Recorded, not enforced yet (default 0).", show_default=False),
    ] = None,
    weight: Annotated[
        float | None,
        typer.Option(
            "--weight", help="Over-quota weight, >0 and <=1000 (default 1; recorded).", show_default=False
        ),
    ] = None,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Set one quota row: a pool row with --pool, --class and --limit (the pool's owner or an admin),
    or a device-class row with --device-class, --scope (cluster with --cluster, or fleet) and
    --guaranteed (an admin). Setting a row again replaces it."""
    if device_class is not None or scope is not None:
        if device_class is None or scope is None or guaranteed is None:
            raise typer.BadParameter(
                "a device-class row needs --device-class, --scope and --guaranteed",
                param_hint="--device-class",
            )
        row = _call(
            server,
            token,
            as_json,
            lambda c: c.quotas.set_class(
                tenant_id=tenant,
                device_class=device_class,
                scope=cast(Any, scope),
                cluster_id=cluster,
                guaranteed_devices=guaranteed,
                floor_devices=floor,
                over_quota_weight=weight,
            ),
        )
        _one(row, as_json)
        return
    if pool is None or cls is None or limit is None:
        raise typer.BadParameter("a pool row needs --pool, --class and --limit", param_hint="--pool")
    pool_row = _call(
        server,
        token,
        as_json,
        lambda c: c.quotas.set(tenant_id=tenant, pool_id=pool, cls=cast(AtomClass, cls), limit=limit),
    )
    _one(pool_row, as_json)


# -- device classes ------------------------------------------------------------------------------
device_classes_app = typer.Typer(
    help="List, show and create device classes: an atom class and a selector, by name.", no_args_is_help=True
)
app.add_typer(device_classes_app, name="device-classes")
DEVICE_CLASS_COLUMNS = [
    ("name", "name"),
    ("class", "class"),
    ("selector", "selector"),
    ("created", "createdAt"),
]


def _selector_text(selector: Any) -> str:
    """A selector as people write it: `gpuModel In [H100-80GB], numaNode Exists`; `-` for none."""
    exprs = selector.get("matchExpressions") if isinstance(selector, Mapping) else None
    if not exprs:
        return "-"
    shown = []
    for e in exprs:
        values = e.get("values")
        shown.append(f"{e['key']} {e['op']}" + (f" [{', '.join(str(v) for v in values)}]" if values else ""))
    return ", ".join(shown)


def _device_class_row(item: Any) -> dict[str, Any]:
    row = _plain(item)
    return {**row, "selector": _selector_text(row.get("selector"))}


def _selector_option(selector: str | None, match: Sequence[str]) -> dict[str, Any] | None:
    """`--selector` (a selector as JSON) and `--match KEY=VALUE` (each an `In` with that one value)
    as one selector; None when neither is given. The server checks what it holds."""
    import json

    if selector is None and not match:
        return None
    body: Any = {}
    if selector is not None:
        try:
            body = json.loads(selector)
        except json.JSONDecodeError as exc:
            raise typer.BadParameter(f"not JSON: {exc}", param_hint="--selector") from None
        if not isinstance(body, dict):
            raise typer.BadParameter(
                'a JSON object, e.g. {"matchExpressions": [...]}', param_hint="--selector"
            )
    if match:
        body["matchExpressions"] = [*body.get("matchExpressions", []), *_matches(match)]
    return dict(body)


def _matches(match: Sequence[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in match:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"KEY=VALUE, not {item!r}", param_hint="--match")
        out.append({"key": key, "op": "In", "values": [value]})
    return out


@device_classes_app.command("list")
def device_classes_list(
    limit: LimitOption = None,
    cursor: CursorOption = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Device classes by name."""
    as_json = json_wanted(as_json, output)
    page = _call(server, token, as_json, lambda c: c.device_classes.list(limit=limit, cursor=cursor))
    if as_json:
        _page(page, DEVICE_CLASS_COLUMNS, "no device classes", as_json, output)
        return
    _table((_device_class_row(i) for i in page.items), DEVICE_CLASS_COLUMNS, "no device classes", output)
    if page.next_cursor:
        stdout().print(f"more: --cursor {page.next_cursor}", markup=False)


@device_classes_app.command("show")
def device_classes_show(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """One device class."""
    found = _call(server, token, as_json, lambda c: c.device_classes.get(name))
    _one(found if as_json else _device_class_row(found), as_json)


@device_classes_app.command("create")
def device_classes_create(
    name: Annotated[str, typer.Option("--name", help="Its id: e.g. h100-80gb-sxm.", show_default=False)],
    cls: Annotated[str, typer.Option("--class", help="gpu, gpu.mig or gpu.slot.", show_default=False)],
    match: Annotated[
        list[str] | None,
        typer.Option(
            "--match", help="KEY=VALUE: atoms whose attribute is VALUE (repeat).", show_default=False
        ),
    ] = None,
    selector: Annotated[
        str | None,
        typer.Option(
            "--selector",
            help='A selector as JSON: {"matchExpressions": [{"key", "op", "values"}]}.',
            show_default=False,
        ),
    ] = None,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Create a device class (admin): atoms of --class that match every --match and --selector."""
    chosen = _selector_option(selector, match or ())
    created = call(
        server,
        token,
        as_json,
        lambda c: c.device_classes.create(name=name, cls=cast(AtomClass, cls), selector=chosen),
        {"class": "--class", "name": "--name", "selector": "--selector"},
    )
    _one(created if as_json else _device_class_row(created), as_json)


# -- priority classes ----------------------------------------------------------------------------
priority_classes_app = typer.Typer(
    help="List, show and create priority classes: a workload evicts preemptible replicas of lower priority.",
    no_args_is_help=True,
)
app.add_typer(priority_classes_app, name="priority-classes")
PRIORITY_CLASS_COLUMNS = [
    ("name", "name"),
    ("priority", "priority"),
    ("preemptible", "preemptible"),
    ("created", "createdAt"),
]


@priority_classes_app.command("list")
def priority_classes_list(
    limit: LimitOption = None,
    cursor: CursorOption = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Priority classes by name, `standard` among them."""
    as_json = json_wanted(as_json, output)
    page = _call(server, token, as_json, lambda c: c.priority_classes.list(limit=limit, cursor=cursor))
    _page(page, PRIORITY_CLASS_COLUMNS, "no priority classes", as_json, output)


@priority_classes_app.command("show")
def priority_classes_show(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """One priority class."""
    _one(_call(server, token, as_json, lambda c: c.priority_classes.get(name)), as_json)


@priority_classes_app.command("create")
def priority_classes_create(
    name: Annotated[str, typer.Option("--name", show_default=False)],
    priority: Annotated[
        int,
        typer.Option("--priority", help="-1,000,000 to 1,000,000; higher wins.", show_default=False),
    ],
    preemptible: Annotated[
        bool,
        typer.Option(
            "--preemptible",
            help="Its workloads' replicas may be evicted: for a higher priority, a project's floor or"
            " its fair share (docs/scheduling.md).",
        ),
    ] = False,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Create a priority class (admin)."""
    created = call(
        server,
        token,
        as_json,
        lambda c: c.priority_classes.create(name=name, priority=priority, preemptible=preemptible),
        {"name": "--name", "priority": "--priority"},
    )
    _one(created, as_json)


# -- policies ------------------------------------------------------------------------------------
policies_app = typer.Typer(
    help="List, show, create, update and delete policies (limits and placement constraints).",
    no_args_is_help=True,
)
app.add_typer(policies_app, name="policies")
POLICY_COLUMNS = [
    ("id", "id"),
    ("name", "name"),
    ("subject", "subjectType"),
    ("subject id", "subjectId"),
    ("tenant", "tenantId"),
    ("pool", "poolId"),
    ("limits", "limits"),
    ("regions", "allowedRegions"),
    ("clusters", "allowedClusters"),
    ("denied", "deniedClusters"),
]
SUBJECT_TYPES = ("tenant", "endpoint", "workload", "cluster")


def _names_option(flag: str, what: str) -> Any:
    return typer.Option(flag, help=f"{what} (repeat).", show_default=False)


RegionOption = Annotated[
    list[str] | None, _names_option("--allowed-region", "Clusters must be in one of these regions")
]
ResidencyOption = Annotated[
    list[str] | None, _names_option("--allowed-residency", "Clusters must have one of these residency labels")
]
DeviceClassesOption = Annotated[
    list[str] | None, _names_option("--allowed-device-class", "Only devices of these classes may be used")
]
AllowedClusterOption = Annotated[
    list[str] | None, _names_option("--allowed-cluster", "Only these clusters may be used")
]
DeniedClusterOption = Annotated[
    list[str] | None, _names_option("--denied-cluster", "These clusters may not be used")
]
CostCeilingOption = Annotated[
    str | None,
    typer.Option(
        "--cost-ceiling",
        help="Most a workload may cost per hour, such as 12.50 (placement refuses dearer clusters).",
        show_default=False,
    ),
]
GpuCountOption = Annotated[
    int | None,
    typer.Option("--gpu-count", min=0, help="Most whole GPUs per reservation.", show_default=False),
]
GpuSlicesOption = Annotated[
    int | None,
    typer.Option("--gpu-slices", min=0, help="Most fractions per reservation.", show_default=False),
]


def _subject_type(value: str | None) -> Any:
    if value is not None and value not in SUBJECT_TYPES:
        raise typer.BadParameter(f"use one of {', '.join(SUBJECT_TYPES)}", param_hint="--subject-type")
    return value


def _limits(gpu_count: int | None, gpu_slices: int | None) -> dict[str, int] | None:
    limits = {k: v for k, v in {"gpuCount": gpu_count, "gpuSlices": gpu_slices}.items() if v is not None}
    return limits or None


@policies_app.command("list")
def policies_list(
    tenant: Annotated[str | None, typer.Option("--tenant", show_default=False)] = None,
    pool: Annotated[str | None, typer.Option("--pool", show_default=False)] = None,
    subject_type: Annotated[
        choices.SubjectType | None,
        typer.Option("--subject-type", help="What the policy is for.", show_default=False),
    ] = None,
    subject: Annotated[
        str | None, typer.Option("--subject", help="The subject's id.", show_default=False)
    ] = None,
    limit: LimitOption = None,
    cursor: CursorOption = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Policies: per-reservation limits on a tenant and placement constraints on any subject."""
    as_json = json_wanted(as_json, output)
    kind = _subject_type(subject_type)
    page = _call(
        server,
        token,
        as_json,
        lambda c: c.policies.list(
            tenant_id=tenant, pool_id=pool, subject_type=kind, subject=subject, limit=limit, cursor=cursor
        ),
    )
    _page(page, POLICY_COLUMNS, "no policies", as_json, output)


@policies_app.command("show")
def policies_show(
    policy_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """One policy."""
    _one(_call(server, token, as_json, lambda c: c.policies.get(policy_id)), as_json)


@policies_app.command("create")
def policies_create(
    name: Annotated[str, typer.Option("--name", show_default=False)],
    tenant: Annotated[
        str | None,
        typer.Option(
            "--tenant",
            help="The tenant (its policy), or the workload's or endpoint's tenant; none for a cluster.",
            show_default=False,
        ),
    ] = None,
    subject_type: Annotated[
        str | None,
        typer.Option(
            "--subject-type", help="tenant (default), endpoint, workload or cluster.", show_default=False
        ),
    ] = None,
    subject: Annotated[
        str | None, typer.Option("--subject", help="The subject's id.", show_default=False)
    ] = None,
    pool: Annotated[
        str | None, typer.Option("--pool", help="Default: every pool.", show_default=False)
    ] = None,
    gpu_count: GpuCountOption = None,
    gpu_slices: GpuSlicesOption = None,
    allowed_region: RegionOption = None,
    allowed_residency: ResidencyOption = None,
    allowed_device_class: DeviceClassesOption = None,
    allowed_cluster: AllowedClusterOption = None,
    denied_cluster: DeniedClusterOption = None,
    cost_ceiling: CostCeilingOption = None,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Create a policy (admin): limits, placement constraints or both."""
    kind = _subject_type(subject_type)
    made = _call(
        server,
        token,
        as_json,
        lambda c: c.policies.create(
            name=name,
            tenant_id=tenant,
            pool_id=pool,
            limits=_limits(gpu_count, gpu_slices),
            subject_type=kind,
            subject_id=subject,
            allowed_regions=allowed_region,
            allowed_residencies=allowed_residency,
            allowed_device_classes=allowed_device_class,
            allowed_clusters=allowed_cluster,
            denied_clusters=denied_cluster,
            cost_ceiling=cost_ceiling,
        ),
    )
    _one(made, as_json)


@policies_app.command("update")
def policies_update(
    policy_id: Annotated[str, typer.Argument(metavar="ID")],
    gpu_count: GpuCountOption = None,
    gpu_slices: GpuSlicesOption = None,
    no_limits: Annotated[bool, typer.Option("--no-limits", help="Remove every limit.")] = False,
    allowed_region: RegionOption = None,
    allowed_residency: ResidencyOption = None,
    allowed_device_class: DeviceClassesOption = None,
    allowed_cluster: AllowedClusterOption = None,
    denied_cluster: DeniedClusterOption = None,
    cost_ceiling: CostCeilingOption = None,
    clear: Annotated[
        list[str] | None,
        typer.Option(
            "--clear",
            help="Remove a constraint list (repeat): allowed-regions, allowed-residencies,"
            " allowed-device-classes, allowed-clusters or denied-clusters.",
            show_default=False,
        ),
    ] = None,
    generation: Annotated[
        int | None,
        typer.Option(
            "--generation", help="Only if the policy is still at this generation.", show_default=False
        ),
    ] = None,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Replace a policy's limits and/or constraints (admin); what is not given is kept. Limits given
    replace every limit."""
    limits = _limits(gpu_count, gpu_slices)
    if no_limits and limits is not None:
        raise typer.BadParameter("give limits or --no-limits, not both", param_hint="--no-limits")
    lists: dict[str, list[str] | None] = {
        "allowed-regions": allowed_region,
        "allowed-residencies": allowed_residency,
        "allowed-device-classes": allowed_device_class,
        "allowed-clusters": allowed_cluster,
        "denied-clusters": denied_cluster,
    }
    for name in clear or ():
        if name not in lists:
            raise typer.BadParameter(f"{name}: use one of {', '.join(lists)}", param_hint="--clear")
        if lists[name] is not None:
            raise typer.BadParameter(f"give {name} or clear it, not both", param_hint="--clear")
        lists[name] = []
    made = _call(
        server,
        token,
        as_json,
        lambda c: c.policies.update(
            policy_id,
            limits=limits,
            remove_limits=no_limits,
            allowed_regions=lists["allowed-regions"],
            allowed_residencies=lists["allowed-residencies"],
            allowed_device_classes=lists["allowed-device-classes"],
            allowed_clusters=lists["allowed-clusters"],
            denied_clusters=lists["denied-clusters"],
            cost_ceiling=cost_ceiling,
            generation=generation,
        ),
    )
    _one(made, as_json)


@policies_app.command("delete")
def policies_delete(
    policy_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Delete a policy (admin); reservations it admitted stand."""
    _one(_call(server, token, as_json, lambda c: c.policies.delete(policy_id)), as_json)


# -- credentials ---------------------------------------------------------------------------------
credentials_app = typer.Typer(help="List, create and revoke credentials.", no_args_is_help=True)
app.add_typer(credentials_app, name="credentials")
CREDENTIAL_COLUMNS = [
    ("id", "id"),
    ("tenant", "tenantId"),
    ("name", "name"),
    ("created", "createdAt"),
    ("revoked", "revokedAt"),
]


@credentials_app.command("list")
def credentials_list(
    limit: LimitOption = None,
    cursor: CursorOption = None,
    output: OutputOption = Output.TABLE,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Credentials, without their tokens (a tenant's token sees its tenant's)."""
    as_json = json_wanted(as_json, output)
    page = _call(server, token, as_json, lambda c: c.credentials.list(limit=limit, cursor=cursor))
    _page(page, CREDENTIAL_COLUMNS, "no credentials", as_json, output)


@credentials_app.command("show")
def credentials_show(
    credential_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """One credential, without its token."""
    found = _call(
        server,
        token,
        as_json,
        lambda c: _find(lambda cur: c.credentials.list(cursor=cur), credential_id, "credential", as_json),
    )
    _one(found, as_json)


@credentials_app.command("create")
def credentials_create(
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Omit for a fleet-admin credential.", show_default=False)
    ] = None,
    name: Annotated[str | None, typer.Option("--name", show_default=False)] = None,
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Create a credential (admin); its token is shown this once."""
    _one(_call(server, token, as_json, lambda c: c.credentials.create(tenant_id=tenant, name=name)), as_json)


@credentials_app.command("revoke")
def credentials_revoke(
    credential_id: Annotated[str, typer.Argument(metavar="ID")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Revoke a credential (admin): its token stops working at once."""
    _one(_call(server, token, as_json, lambda c: c.credentials.revoke(credential_id)), as_json)


# -- whoami --------------------------------------------------------------------------------------
@app.command("whoami")
def whoami(
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Who the token is, as the server says: its credential and the tenant it acts for."""
    me = _call(server, token, as_json, lambda c: c.credentials.whoami())
    if as_json:
        print_json(_plain(me))
        return
    who = "fleet admin" if me.is_admin else f"tenant {me.tenant_id}"
    stdout().print(
        f"{who} (credential {me.credential_id}) at {config.resolve(server, token).server}", markup=False
    )


# -- logout --------------------------------------------------------------------------------------
@app.command("logout")
def logout() -> None:
    """Forget the token `login` stored (the config file keeps the server). $BC_TOKEN is not touched."""
    path = config.config_path()
    try:
        stored = config.read_config(path)
    except ValueError as exc:
        fail(str(exc))
    if not stored.get("token"):
        stdout().print(f"no stored token ({path})", markup=False)
        return
    config.forget_token(path)
    stdout().print(f"Logged out: the token in {path} is forgotten", markup=False)
