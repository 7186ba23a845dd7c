"""What the console's pages show (docs/console.md), read in one transaction each, as far as the caller may
see: a tenant sees the pools it may use, the admin the whole fleet (GPUs in no pool too).

- `fleet`: clusters → nodes → GPUs, each GPU drawn as a bar of its pieces (`domain.ops.console`), with
  a node's layout change under way (its layout now and the one it is going to) beside it;
- `bookings`: one pool's atoms as rows and the bookings on them over a range, as bars;
- `usage`: GPU-hours by tenant and meter over time, the capacity's hours by state, and a bill.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.pools import SharingMode, booked_class
from better_compute.domain.fleet.records import Gpu
from better_compute.domain.gate.mig_gate import changing_to, told_layout
from better_compute.domain.kernel.atom_classes import AtomClass
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.ledger import is_partition_change
from better_compute.domain.ledger.records import LiveBooking
from better_compute.domain.metering.accounting import Grid, StateHours
from better_compute.domain.metering.billing import Bill
from better_compute.domain.metering.metering import UNMETERED
from better_compute.domain.ops.console import GpuBar, Holder, gpu_bar
from better_compute.domain.tenancy.credentials import Principal
from better_compute.service.endpoints import endpoints
from better_compute.service.fleet.pools import get_pool, visible_pool_ids
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ledger import capacity
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.metering.bills import get_bill
from better_compute.service.ops import fleet_gauges
from better_compute.service.ops.ports import OpsTx

__all__ = [
    "BookingBar",
    "EndpointDrawing",
    "FleetNode",
    "FleetPage",
    "Paging",
    "PoolTimeline",
    "TimelineRow",
    "UsagePage",
    "bookings",
    "endpoints_page",
    "fleet",
    "pool_ids",
    "usage",
]

_CHUNK = 500
"""Atom ids per `live_on` query (an IN list)."""


@dataclass(frozen=True, slots=True)
class FleetNode:
    node_id: str
    cluster_id: str
    pool_id: str | None
    cordoned: bool
    layout: str | None
    """The MIG layout the node is told (its pool's, or an endpoint's); None outside mig pools and
    for a node that keeps its own (`carriesPoolLayout: false`)."""
    pending_layout: str | None
    """The layout a change under way takes it to (None: none under way, or one to the layout it
    has)."""
    gpus: tuple[GpuBar, ...]


FLEET_PAGE_NODES = 16
"""Nodes one fleet page draws (up to 16 x 8 GPUs): a page costs the same on any fleet."""
MAX_ENDPOINTS_DRAWN = 50
"""Endpoints the endpoints page draws (by name); `endpoints list` has the rest."""
TIMELINE_PAGE_NODES = 4
"""Nodes whose atoms one bookings page shows as rows (up to 4 x 8 GPUs x 7 instances)."""


@dataclass(frozen=True, slots=True)
class Paging:
    """Where a page of nodes sits: the first node's position (from 1), how many there are in all,
    and the node to continue after (None: the last page)."""

    first: int
    count: int
    total: int
    next_after: str | None


def _page_of(ids: Sequence[str], after: str | None, limit: int) -> tuple[list[str], Paging]:
    """The page after the node `after`; the first page when `after` is unknown or the last node."""
    start = 0
    if after is not None:
        start = next((k + 1 for k, n in enumerate(ids) if n == after), 0)
        if start >= len(ids):
            start = 0
    chosen = list(ids[start : start + limit])
    more = start + limit < len(ids)
    return chosen, Paging(start + 1, len(chosen), len(ids), chosen[-1] if more and chosen else None)


@dataclass(frozen=True, slots=True)
class FleetPage:
    at: datetime
    clusters: tuple[tuple[str, tuple[FleetNode, ...]], ...]
    paging: Paging

    @property
    def gpu_count(self) -> int:
        return sum(len(n.gpus) for _, nodes in self.clusters for n in nodes)


def _live(tx: OpsTx, atom_ids: Sequence[str], since: datetime) -> list[LiveBooking]:
    ids = list(atom_ids)
    return [b for i in range(0, len(ids), _CHUNK) for b in tx.ledger.live_on(ids[i : i + _CHUNK], since)]


def fleet(
    store: StorePort[OpsTx], principal: Principal, now: datetime, *, after: str | None = None
) -> FleetPage:
    """The GPUs of one page of the nodes the caller may see (by cluster, then node), drawn as they
    are at `now`; `after`: the node the page starts after."""
    visible = visible_pool_ids(store, principal)
    with store.read() as tx:
        every = tx.nodes.page(None, None, None)
        pools = tx.pools.of_nodes([n.id for n in every])
        seen = [
            n
            for n in every
            if visible is None or ((pool := pools.get(n.id)) is not None and pool.id in visible)
        ]
        ordered = [n.id for n in sorted(seen, key=lambda n: (n.cluster_id, n.id))]
        node_ids, paging = _page_of(ordered, after, FLEET_PAGE_NODES)
        nodes = {n.id: n for n in seen if n.id in set(node_ids)}
        gpus = [g for g in tx.gpus.of_nodes(node_ids) if g.present]
        atoms = [
            a for a in tx.atoms.of_nodes(node_ids) if a.present and (visible is None or a.pool_id in visible)
        ]
        gates = tx.mig_layouts.of_nodes(node_ids)
        held: dict[str, list[Holder]] = defaultdict(list)
        for b in _live(tx, sorted(a.id for a in atoms), now):
            if b.starts_at <= now:
                held[b.atom_id].append(Holder(b.allocation_id, b.tenant_id))
    by_gpu: dict[str, list[Atom]] = defaultdict(list)
    for a in atoms:
        by_gpu[a.gpu_id].append(a)
    by_node: dict[str, list[Gpu]] = defaultdict(list)
    for g in gpus:
        by_node[g.node_id].append(g)
    by_cluster: dict[str, list[FleetNode]] = defaultdict(list)
    for node_id in node_ids:
        node = nodes[node_id]
        pool = pools.get(node_id)
        gate = gates.get(node_id)
        bars = tuple(
            gpu_bar(
                g,
                by_gpu[g.id],
                held,
                changing=gate is not None,
                viewer=principal.tenant_id,
                is_admin=principal.is_admin,
            )
            for g in sorted(by_node[node_id], key=lambda g: g.index)
        )
        mig = pool is not None and pool.mode == "mig" and node.carries_pool_layout
        layout = told_layout(pool, None, own=node.mig_layout) if mig else None
        by_cluster[node.cluster_id].append(
            FleetNode(
                node_id,
                node.cluster_id,
                pool.id if pool else None,
                node.cordoned,
                gate.frozen_layout if gate is not None else layout,
                changing_to(gate),
                bars,
            )
        )
    return FleetPage(now, tuple((c, tuple(ns)) for c, ns in sorted(by_cluster.items())), paging)


@dataclass(frozen=True, slots=True)
class BookingBar:
    """One booking on a row, clipped to the range: where it starts and how long, in percent."""

    allocation_id: str
    label: str
    kind: str
    """`booking` (a tenant's), `hold` (an endpoint's or the fleet's own) or `changing` (a partition
    change's window)."""
    start: datetime
    end: datetime | None
    left: str
    width: str


@dataclass(frozen=True, slots=True)
class TimelineRow:
    atom_id: str
    label: str
    bars: tuple[BookingBar, ...]


@dataclass(frozen=True, slots=True)
class PoolTimeline:
    pool_id: str
    pool_ids: tuple[str, ...]
    """Every pool the caller may pick."""
    window: Window
    now_left: str
    rows: tuple[TimelineRow, ...]
    paging: Paging


def _percent(part: float) -> str:
    return f"{max(0.0, min(100.0, part * 100)):.4f}%"


def pool_ids(store: StorePort[OpsTx], principal: Principal) -> tuple[str, ...]:
    """The pools the caller may see, by id."""
    visible = visible_pool_ids(store, principal)
    with store.read() as tx:
        return tuple(sorted(p.id for p in tx.pools.all() if visible is None or p.id in visible))


@dataclass(frozen=True, slots=True)
class PoolChoice:
    """A pool as the reserve form offers it: the class it is booked by and, for MIG instances, the
    profiles its atoms have (smallest first), so the form opens on a combination admission takes."""

    id: str
    mode: SharingMode
    cls: AtomClass
    profiles: tuple[str, ...]


def reserve_choices(store: StorePort[OpsTx], principal: Principal) -> tuple[PoolChoice, ...]:
    """The pools the caller may see, each with its booked class and its atoms' MIG profiles."""
    visible = visible_pool_ids(store, principal)
    with store.read() as tx:
        pools = sorted((p for p in tx.pools.all() if visible is None or p.id in visible), key=lambda p: p.id)
        choices = []
        for pool in pools:
            sizes: dict[str, int] = {}
            for atom in tx.atoms.of_pool(pool.id):
                profile = atom.attributes.get("migProfile")
                if atom.present and atom.cls == "gpu.mig" and isinstance(profile, str):
                    sizes[profile] = _slices(profile)
            profiles = tuple(sorted(sizes, key=lambda name: (sizes[name], name)))
            choices.append(PoolChoice(pool.id, pool.mode, booked_class(pool.mode), profiles))
    return tuple(choices)


def _slices(profile: str) -> int:
    """The compute slices a profile's name leads with (`3g.40gb` -> 3), for ordering."""
    head = profile.split("g.", 1)[0]
    return int(head) if head.isdigit() else 0


def bookings(
    store: StorePort[OpsTx],
    principal: Principal,
    pool_id: str | None,
    window: Window,
    now: datetime,
    *,
    busy_only: bool = False,
    after: str | None = None,
) -> PoolTimeline:
    """The pool's atoms and the bookings on them over `window` (bounded), by node, GPU and piece;
    `busy_only`: only the atoms with a booking in the range. NOT_FOUND for a pool the caller may
    not see; with no pool named, the first the caller may see."""
    every = pool_ids(store, principal)
    if pool_id is None:
        pool_id = every[0] if every else None
    if pool_id is None:
        return PoolTimeline("", (), window, _percent(0), (), Paging(1, 0, 0, None))
    pool = get_pool(store, principal, pool_id)  # NOT_FOUND unless the caller may see it
    node_ids, paging = _page_of(sorted(pool.nodes), after, TIMELINE_PAGE_NODES)
    assert window.end is not None, "a timeline's range is bounded"
    lo, hi = window.start.timestamp(), window.end.timestamp()
    span = hi - lo
    with store.read() as tx:
        atoms = [
            a
            for a in tx.atoms.of_nodes(node_ids)
            if a.present and a.pool_id == pool_id and (a.bookable or a.partition_pending)
        ]
        gpus = {g.id: g for g in tx.gpus.of_nodes(node_ids)}
        atoms.sort(key=lambda a: (a.node, gpus[a.gpu_id].index if a.gpu_id in gpus else -1, a.key))
        live = [b for b in _live(tx, [a.id for a in atoms], window.start) if b.starts_at < window.end]
    on: dict[str, list[LiveBooking]] = defaultdict(list)
    for b in live:
        on[b.atom_id].append(b)
    rows = []
    for a in atoms:
        gpu = gpus.get(a.gpu_id)
        label = f"{a.node} GPU {gpu.index if gpu else '?'} {a.attributes.get('migProfile') or a.key}"
        bars = []
        for b in sorted(on[a.id], key=lambda b: b.starts_at):
            start = max(b.starts_at.timestamp(), lo)
            end = min(b.ends_at.timestamp() if b.ends_at else hi, hi)
            # Only the admin and a booking's own tenant learn its allocation: a hold's names an
            # endpoint (`endpoint:<name>:<node>`), which is its tenant's business.
            mine = principal.is_admin or (b.tenant_id is not None and b.tenant_id == principal.tenant_id)
            if is_partition_change(b.allocation_id):
                kind, shown = "changing", "partition change"
            elif b.tenant_id is None:
                kind, shown = "hold", b.allocation_id.split(":")[0] + " hold"
            else:
                kind = "booking"
                shown = f"{b.allocation_id} ({b.tenant_id})" if mine else "taken"
            bars.append(
                BookingBar(
                    b.allocation_id if mine else "",
                    shown,
                    kind,
                    b.starts_at,
                    b.ends_at,
                    _percent((start - lo) / span),
                    _percent((end - start) / span),
                )
            )
        if bars or not busy_only:
            rows.append(TimelineRow(a.id, label, tuple(bars)))
    now_left = _percent((now.timestamp() - lo) / span)
    return PoolTimeline(pool_id, tuple(every), window, now_left, tuple(rows), paging)


@dataclass(frozen=True, slots=True)
class UsagePage:
    """GPU-hours used per bucket by tenant and meter, the capacity's hours by state per bucket, and
    the bill of one tenant for one month."""

    grid: Grid
    used: tuple[tuple[Window, dict[str, Fraction]], ...]
    """Per bucket: `<tenant> · <meter>` to GPU-hours."""
    states: tuple[tuple[Window, StateHours], ...]
    tenants: tuple[str, ...]
    """The tenants whose bill the caller may read."""
    bill: Bill | None
    not_readable: str | None = None
    """A tenant asked for whose bill the caller may not read (or that does not exist)."""


def pool_fragmentation(
    store: StorePort[OpsTx], index: BookingIndex, principal: Principal, now: datetime
) -> tuple[tuple[str, float], ...]:
    """Each pool the caller may see with its fragmentation now (0..1, `fleet_gauges.fragmentation`,
    what /metrics exports as `better_compute_pool_fragmentation_ratio`), in pool id order."""
    visible = visible_pool_ids(store, principal)
    with store.read() as tx:
        index.sync(tx)
        found = fleet_gauges.fragmentation(tx, index, now, visible)
    return tuple(sorted(found.items()))


def usage(
    store: StorePort[OpsTx],
    principal: Principal,
    grid: Grid,
    now: datetime,
    *,
    bill_tenant: str | None,
    month: Window,
) -> UsagePage:
    """What the usage page shows: a tenant sees its own use and bill, and the capacity of the pools
    it may see; the admin everyone's. `bill_tenant` None: the caller's own (the admin's first
    tenant's)."""
    with store.read() as tx:
        meters = {p.id: p.meter for p in tx.pools.all()}
        tenants = (
            tuple(t.id for t in tx.tenants.page(None, None))
            if principal.is_admin
            else (principal.tenant_id or "",)
        )
        used = []
        for window in grid.buckets():
            hours: dict[str, Fraction] = defaultdict(Fraction)
            for total in tx.usage.totals(window, now, principal.tenant_id, None):
                key = f"{total.tenant_id} · {meters.get(total.pool_id or '', UNMETERED)}"
                hours[key] += total.hours
            used.append((window, dict(hours)))
    states = capacity.accounting(store, principal, None, grid).buckets
    chosen = bill_tenant if bill_tenant in tenants else (tenants[0] if tenants else None)
    bill = None
    if chosen:
        assert month.end is not None, "a month is bounded"
        bill = get_bill(
            store, principal, chosen, since=month.start.isoformat(), until=month.end.isoformat(), now=now
        )
    refused = bill_tenant if bill_tenant and bill_tenant not in tenants else None
    return UsagePage(grid, tuple(used), states, tenants, bill, refused)


@dataclass(frozen=True, slots=True)
class EndpointDrawing:
    """One endpoint: its status, and each instance's GPUs drawn with the copy on each partition."""

    name: str
    tenant_id: str
    status: str
    reason: str | None
    nodes: tuple[FleetNode, ...]
    components: tuple[tuple[str, str, int, int], ...]
    """Each component: name, partition type, copies placed, copies asked for."""


def endpoints_page(
    store: StorePort[OpsTx], principal: Principal, now: datetime
) -> tuple[EndpointDrawing, ...]:
    """The caller's endpoints (the admin's: every one), each instance's GPUs drawn with the copy on
    each partition: `booked` where a copy runs (its holder: the component and copy), `free` where
    none does, `changing` while a relayout re-cuts the instance."""
    listed = endpoints.list_endpoints(store, principal, now, limit=MAX_ENDPOINTS_DRAWN).items
    out = []
    with store.read() as tx:
        for view in listed:
            node_ids = [i.node for i in view.instances]
            gpus = [g for g in tx.gpus.of_nodes(node_ids) if g.present]
            atoms = [a for a in tx.atoms.of_nodes(node_ids) if a.present]
            gates = tx.mig_layouts.of_nodes(node_ids)
            found = tx.components.of_endpoint(view.record.name)
            copies = tx.components.copies([c.name for c in found])
            held: dict[str, list[Holder]] = defaultdict(list)
            for name, mine in copies.items():
                for c in mine:
                    if c.atom_id is not None:
                        held[c.atom_id].append(Holder(f"{name} copy {c.copy}", view.record.tenant_id))
            by_gpu: dict[str, list[Atom]] = defaultdict(list)
            for a in atoms:
                by_gpu[a.gpu_id].append(a)
            nodes = tuple(
                FleetNode(
                    i.node,
                    "",
                    None,
                    False,
                    i.layout,
                    None,
                    tuple(
                        gpu_bar(
                            g,
                            by_gpu[g.id],
                            held,
                            changing=i.node in gates,
                            viewer=principal.tenant_id,
                            is_admin=principal.is_admin,
                        )
                        for g in sorted((g for g in gpus if g.node_id == i.node), key=lambda g: g.index)
                    ),
                )
                for i in view.instances
            )
            components = tuple(
                (
                    c.name,
                    str(c.spec.get("partitionType", "")),
                    sum(1 for x in copies[c.name] if x.atom_id is not None),
                    len(copies[c.name]),
                )
                for c in found
            )
            out.append(
                EndpointDrawing(
                    view.record.name,
                    view.record.tenant_id,
                    view.status,
                    view.record.reason,
                    nodes,
                    components,
                )
            )
    return tuple(out)
