"""Inference endpoints (docs/endpoints.md): `endpoints.create`, `get`, `list` and `delete`.

Creating an endpoint checks its layout against the GPU models of each variant's pool, takes
`instanceCount` idle nodes of the pool and cuts each one to the layout through the layout gate, in
one transaction: each node is held from now (the partition holds, which the ledger's exclusion
constraint refuses if a tenant's booking landed meanwhile) and granted the endpoint's layout at
once (`mig_gate.cut_now_in`); the node is told it from then on (`nodes.mig_layout`). When the node
reports it converged, the gate hands it over to the endpoint's own hold (`endpoint_holds`), and
once no instance is still being cut the endpoint is `InService`. A pool without enough idle nodes
leaves the endpoint `Failed` with the reason, nothing taken; it is taken again when capacity may
have freed (`retry`, driven by `service.ops.placement_retry` as pending workloads are), and goes
`Creating` once its variants find their nodes.

Deleting ends the endpoint's hold and puts each node back to its pool's layout through the gate
the same way (held from now, granted at once), so no tenant lands on a partition about to go.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from better_compute.domain.endpoints import endpoints as rules
from better_compute.domain.endpoints.commands import (
    CreateEndpoint,
    RelayoutEndpoint,
    create_endpoint_of,
    parse_component,
    parse_endpoint,
    relayout_endpoint_of,
)
from better_compute.domain.endpoints.events import EndpointCreated, EndpointDeleted, EndpointUpdated
from better_compute.domain.endpoints.records import EndpointInstance, EndpointRecord
from better_compute.domain.fleet.records import Pool
from better_compute.domain.gate.mig_gate import told_layout
from better_compute.domain.kernel.errors import (
    AlreadyExists,
    ConcurrentChange,
    DomainError,
    InvalidInput,
    InvalidState,
    NotFound,
)
from better_compute.domain.tenancy.credentials import Principal
from better_compute.domain.tenancy.tenancy import (
    check_ref,
    pool_not_found,
    require_pool_owner,
    require_pool_user,
    tenant_not_found,
    tenant_scope,
)
from better_compute.service.endpoints import components, endpoint_holds, endpoint_relayout
from better_compute.service.endpoints.ports import EndpointsTx
from better_compute.service.gate import mig_gate
from better_compute.service.kernel.paging import Listing, fetch, page
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ledger.ports import NotBookable, Overlap
from better_compute.service.tenancy import quotas


@dataclass(frozen=True, slots=True)
class InstanceView:
    """One node of an endpoint: `Creating` while its GPUs are being cut, `InService` after, with
    the partitions of each type its GPUs have now."""

    node: str
    variant: str
    layout: str
    state: str
    gpus: int
    partitions: dict[str, int]


@dataclass(frozen=True, slots=True)
class EndpointView:
    record: EndpointRecord
    spec: rules.EndpointSpec
    status: str
    instances: tuple[InstanceView, ...]


def endpoint_not_found(name: str) -> NotFound:
    return NotFound(f"endpoint {name} not found", {"name": name})


def _pool(tx: EndpointsTx, principal: Principal, tenant_id: str, pool_id: str) -> Pool:
    """The mig pool a variant names, which the caller may take nodes of (its owner or the admin)
    for the endpoint's tenant, who must be able to use it (`require_pool_user`)."""
    pool = tx.pools.get(pool_id)
    if pool is None:
        raise pool_not_found(pool_id)
    visible = principal.is_admin or pool_id in quotas.quota_pool_ids(tx, principal.tenant_id)
    require_pool_owner(principal, pool_id, pool.owner_tenant_id, visible, "endpoints.create")
    offered = any(q.limit > 0 for q in tx.quotas.find(tenant_id, pool_id))
    require_pool_user(tenant_id, pool_id, pool.owner_tenant_id, offered)
    if pool.mode != "mig":
        raise InvalidInput(
            f"pool {pool_id} is a {pool.mode} pool; an endpoint's instances come from a mig pool",
            {"field": "poolId", "poolId": pool_id, "mode": pool.mode},
        )
    return pool


def _check_layout(tx: EndpointsTx, variant: rules.Variant, members: Sequence[str]) -> None:
    """The layout must place on every GPU model of the pool (the seed's check at create time)."""
    models = sorted({g.model for g in tx.gpus.of_nodes(list(members)) if g.present and g.model})
    if not models:
        raise InvalidInput(
            f"variant {variant.name}: pool {variant.pool_id} has no GPUs to check the layout against",
            {"field": "poolId", "poolId": variant.pool_id},
        )
    for model in models:
        rules.check_variant_layout(variant, model)


def _candidates(tx: EndpointsTx, members: Sequence[str], now: datetime) -> list[rules.Candidate]:
    nodes = tx.nodes.by_ids(list(members))
    gates = tx.mig_layouts.of_nodes(list(members))
    serving = tx.endpoints.instances_of_nodes(list(members))
    gpus = Counter(g.node_id for g in tx.gpus.of_nodes(list(members)) if g.present)
    found = []
    for node_id in sorted(members):
        node = nodes[node_id]
        until, open_ended = tx.ledger.tenants_booked_until(node_id, now)
        found.append(
            rules.Candidate(
                node=node_id,
                gpus=gpus[node_id],
                joined=node.public_key is not None,
                carries_pool_layout=node.carries_pool_layout,
                cordoned=node.cordoned,
                serving=serving[node_id].endpoint if node_id in serving else None,
                changing=node_id in gates,
                booked=open_ended or until is not None,
            )
        )
    return found


def create(
    store: StorePort[EndpointsTx], principal: Principal, request: CreateEndpoint | object, now: datetime
) -> EndpointView:
    """Create an endpoint and start cutting its instances (or record it `Failed`, with why).
    `request` is the command the API builds, or the request as JSON (`create_endpoint_of`)."""
    spec = rules.endpoint_spec(
        request if isinstance(request, CreateEndpoint) else create_endpoint_of(request)
    )
    tenant_scope(principal, spec.tenant_id)  # a tenant token creates for its own tenant only
    try:
        with store.begin() as tx:
            if tx.tenants.get(spec.tenant_id) is None:
                raise tenant_not_found(spec.tenant_id)
            pools = {v.pool_id: _pool(tx, principal, spec.tenant_id, v.pool_id) for v in spec.variants}
            members = tx.pools.members(sorted(pools))
            for variant in spec.variants:
                _check_layout(tx, variant, members[variant.pool_id])
            if tx.endpoints.get(spec.name) is not None:
                raise _taken(spec.name)
            every = sorted({n for p in pools for n in members[p]})
            tx.nodes.lock(every)  # pool changes, reports and gate steps wait for this
            picked, reason = _pick(tx, spec, members, now)
            status = "Failed" if reason else "Creating"
            record = EndpointRecord(
                spec.name, spec.tenant_id, rules.endpoint_json(spec), status, reason, now, now
            )
            if not tx.endpoints.add(record):
                raise _taken(spec.name)
            count = 0
            if reason is None:
                count = _cut(tx, spec, pools, picked, now)
            taken = tuple(sorted(n for nodes in picked.values() for n in nodes)) if reason is None else ()
            tx.events.append(
                EndpointCreated(
                    spec.name, spec.tenant_id, status, count, reason or "", dict(record.spec), taken
                ),
                now,
            )
            return _view(tx, record, now)
    except (Overlap, NotBookable):
        raise ConcurrentChange(
            f"a booking landed on a node endpoint {spec.name} was taking; create it again",
            {"name": spec.name},
        ) from None


def _pick(
    tx: EndpointsTx, spec: rules.EndpointSpec, members: Mapping[str, Sequence[str]], now: datetime
) -> tuple[dict[str, tuple[str, ...]], str | None]:
    """The nodes each variant takes (`domain.endpoints.endpoints.pick_instances`, a node once at most), or
    why some variant cannot have them all. The caller holds the members' node locks."""
    candidates = {v.pool_id: _candidates(tx, members[v.pool_id], now) for v in spec.variants}
    picked: dict[str, tuple[str, ...]] = {}
    reasons: list[str] = []
    for variant in spec.variants:
        taken = {n for nodes in picked.values() for n in nodes}
        free = [c for c in candidates[variant.pool_id] if c.node not in taken]
        choice = rules.pick_instances(variant, free)
        picked[variant.name] = choice.nodes
        if choice.reason is not None:
            reasons.append(choice.reason)
    return picked, "; ".join(reasons) or None


RETRY_BATCH = 100
"""`Failed` endpoints one retry pass takes again at most, oldest first."""


def retry(store: StorePort[EndpointsTx], now: datetime, limit: int = RETRY_BATCH) -> int:
    """Take again every `Failed` endpoint, oldest first, each in a transaction of its own: one whose
    variants now find enough idle nodes takes them and is `Creating` (`endpoint.updated`), as at
    its creation; one still short stays `Failed`, its reason saying why now. Called when capacity
    may have freed (`service.ops.placement_retry`), as a pending workload is placed again (Kueue keeps
    it pending); no timer decides it. A read decides first whether anything changed: an endpoint
    still short for the same reason takes no write transaction (on SQLite, the one writer lock
    every request shares). Answers how many took their nodes."""
    with store.read() as tx:
        failed = tx.endpoints.by_status(["Failed"], limit)
    started = 0
    for record in failed:
        with store.read() as tx:
            *_, reason = _retry_plan(tx, record, now, lock=False)
        if reason is not None and reason == record.reason:
            continue
        try:
            with store.begin() as tx:
                started += _retry_in(tx, record.name, now)
        except (Overlap, NotBookable):
            continue  # a booking landed on a node it was taking: the next pass looks again
    return started


def _retry_plan(
    tx: EndpointsTx, record: EndpointRecord, now: datetime, *, lock: bool
) -> tuple[rules.EndpointSpec, dict[str, Pool], dict[str, tuple[str, ...]], str | None]:
    """What taking the endpoint again would do now: its spec, pools, the nodes each variant would
    take, or why it cannot. With `lock`, the pools' nodes are locked first (the nodes, then the
    endpoint: the documented order) and only members read under the locks are taken."""
    spec = parse_endpoint(record.spec)
    pools: dict[str, Pool] = {}
    for variant in spec.variants:
        pool = tx.pools.get(variant.pool_id)
        if pool is None or pool.mode != "mig":
            return spec, pools, {}, f"pool {variant.pool_id} is no mig pool any more"
        pools[pool.id] = pool
    members = tx.pools.members(sorted(pools))
    try:
        for variant in spec.variants:
            _check_layout(tx, variant, members[variant.pool_id])
    except DomainError as refused:  # the pool's GPUs changed since its creation
        return spec, pools, {}, refused.message
    if lock:
        every = sorted({n for p in pools for n in members[p]})
        tx.nodes.lock(every)
        locked = set(every)  # a node added to the pool since it was read is left for the next pass
        members = {
            p: [n for n in found if n in locked] for p, found in tx.pools.members(sorted(pools)).items()
        }
    picked, reason = _pick(tx, spec, members, now)
    return spec, pools, picked, reason


def _retry_in(tx: EndpointsTx, name: str, now: datetime) -> bool:
    record = tx.endpoints.get(name)
    if record is None or record.status != "Failed":
        return False
    spec, pools, picked, reason = _retry_plan(tx, record, now, lock=True)
    again = tx.endpoints.get(name, lock=True)
    if again is None or again.status != "Failed":
        return False  # deleted, or taken again by another process, meanwhile
    if reason is not None:
        return _still_failed(tx, again, reason, now)
    tx.endpoints.set_status(name, "Creating", None, now)
    _cut(tx, spec, pools, picked, now)
    taken = tuple(sorted(n for nodes in picked.values() for n in nodes))
    tx.events.append(EndpointUpdated(name, again.tenant_id, "Creating", nodes=taken), now)
    return True


def _still_failed(tx: EndpointsTx, record: EndpointRecord, reason: str, now: datetime) -> bool:
    """The endpoint stays `Failed`; its reason says why now (written only when it changed)."""
    if reason != record.reason:
        tx.endpoints.set_status(record.name, "Failed", reason, now)
    return False


def _taken(name: str) -> AlreadyExists:
    return AlreadyExists(f"endpoint {name} already exists", {"name": name})


def _cut(
    tx: EndpointsTx,
    spec: rules.EndpointSpec,
    pools: dict[str, Pool],
    picked: dict[str, tuple[str, ...]],
    now: datetime,
) -> int:
    """Claim the picked nodes and cut each one to its variant's layout through the gate."""
    instances: list[EndpointInstance] = []
    for variant in spec.variants:
        layout = rules.variant_layout(variant)
        pool = pools[variant.pool_id]
        nodes = picked[variant.name]
        instances.extend(EndpointInstance(n, spec.name, variant.name, layout, now) for n in nodes)
        tx.nodes.set_mig_layout(list(nodes), layout)
        for node_id in nodes:
            mig_gate.cut_now_in(tx, pool.id, node_id, told_layout(pool, None), layout, now)
    tx.endpoints.add_instances(instances)
    return len(instances)


def _view(tx: EndpointsTx, record: EndpointRecord, now: datetime) -> EndpointView:
    spec = parse_endpoint(record.spec)
    instances = tx.endpoints.instances(record.name)
    node_ids = [i.node_id for i in instances]
    gates = tx.mig_layouts.of_nodes(node_ids)
    gpus = Counter(g.node_id for g in tx.gpus.of_nodes(node_ids) if g.present)
    partitions: dict[str, Counter[str]] = {n: Counter() for n in node_ids}
    for atom in tx.atoms.of_nodes(node_ids):
        profile = atom.attributes.get("migProfile")
        if atom.present and atom.cls == "gpu.mig" and isinstance(profile, str):
            partitions[atom.node][f"mig-{profile}"] += 1
    shown = tuple(
        InstanceView(
            i.node_id,
            i.variant,
            i.layout,
            ("Updating" if record.status == "Updating" else "Creating")
            if i.node_id in gates
            else "InService",
            gpus[i.node_id],
            dict(sorted(partitions[i.node_id].items())),
        )
        for i in instances
    )
    specs = [parse_component(c.spec) for c in tx.components.of_endpoint(record.name)]
    ready = components.ready_counts_in(tx, specs, now)
    short = rules.short_of_ready([(c, ready.get(c.name, 0)) for c in specs])
    status = rules.endpoint_status(record.status, bool(gates), short)
    return EndpointView(record, spec, status, shown)


def update(
    store: StorePort[EndpointsTx], principal: Principal, request: RelayoutEndpoint | object, now: datetime
) -> EndpointView:
    """Change an endpoint's layout live (`{name, variants: [{name, acceleratorPartitionLayouts}]}`):
    checked up front, then rolled instance by instance through the gate (`endpoint_relayout`).
    Refused when the endpoint is not `InService` (or `Updating` and waiting), when the new layout
    does not fit the pool's GPUs, and when no order of the roll keeps every component at or above
    its `minCopies`, naming the component and why. `request` is the command the API builds, or
    the request as JSON (`relayout_endpoint_of` reads it once the endpoint is found, as always)."""
    if isinstance(request, RelayoutEndpoint):
        named: object = request.name
    else:
        named = request.get("name") if isinstance(request, dict) else None
    name = check_ref(named, "name")
    with store.begin() as tx:
        _visible(tx, principal, name)
        tx.nodes.lock([i.node_id for i in tx.endpoints.instances(name)])  # nodes, then the endpoint
        record = tx.endpoints.get(name, lock=True)
        if record is None:
            raise endpoint_not_found(name)
        current = _view(tx, record, now)
        waiting = current.status == "Updating" and record.reason is not None
        if current.status != "InService" and not waiting:
            raise InvalidState(
                f"endpoint {name} is {current.status}; its layout changes once it is InService",
                {"name": name, "status": current.status},
            )
        old = parse_endpoint(record.spec)
        asked = request if isinstance(request, RelayoutEndpoint) else relayout_endpoint_of(request)
        new = rules.relayout(old, asked)
        if new == old and not waiting:
            return current
        instances = tx.endpoints.instances(name)
        members = tx.pools.members(sorted({v.pool_id for v in new.variants}))
        gpus = Counter(g.node_id for g in tx.gpus.of_nodes([i.node_id for i in instances]) if g.present)
        for variant, before in zip(new.variants, old.variants, strict=True):
            if variant.partition_types == before.partition_types:
                continue
            _check_layout(tx, variant, members[variant.pool_id])
            mine = sorted(i.node_id for i in instances if i.variant == variant.name)
            found = [c for c in tx.components.of_endpoint(name) if c.spec.get("variantName") == variant.name]
            specs = [parse_component(c.spec) for c in found]
            copies = tx.components.copies([c.name for c in found])
            placed = {c: [x.node_id for x in copies[c] if x.node_id is not None] for c in copies}
            rules.plan_relayout(
                mine, dict(gpus), before.partition_types, variant.partition_types, specs, placed
            )
        tx.endpoints.set_spec(name, rules.endpoint_json(new), "Updating", now)
        tx.events.append(EndpointUpdated(name, record.tenant_id, "Updating"), now)
        endpoint_relayout.next_cut_in(tx, name, now)
        refreshed = tx.endpoints.get(name)
        assert refreshed is not None
        return _view(tx, refreshed, now)


def _visible(tx: EndpointsTx, principal: Principal, name: str) -> EndpointRecord:
    check_ref(name, "name")
    record = tx.endpoints.get(name)
    if record is None or not principal.acts_for(record.tenant_id):
        raise endpoint_not_found(name)
    return record


def get(store: StorePort[EndpointsTx], principal: Principal, name: str, now: datetime) -> EndpointView:
    """The endpoint with its instances and their partitions (another tenant's is NOT_FOUND)."""
    with store.read() as tx:
        return _view(tx, _visible(tx, principal, name), now)


def list_endpoints(
    store: StorePort[EndpointsTx],
    principal: Principal,
    now: datetime,
    *,
    tenant_id: str | None = None,
    limit: int | None = None,
    after: str | None = None,
) -> Listing[EndpointView]:
    """Endpoints by name: a tenant's own, or (the admin) every tenant's or the one named."""
    scope = tenant_scope(principal, check_ref(tenant_id, "tenantId") if tenant_id else None)
    with store.read() as tx:
        found = page(tx.endpoints.page(scope, fetch(limit), after), lambda r: r.name, limit, None)
        return Listing([_view(tx, r, now) for r in found.items], found.next_cursor)


@dataclass(frozen=True)
class NodeReturn:
    """A node of an endpoint being deleted, going back to its pool's layout (`layout_to`; None when
    the node is in no pool, so nothing is cut)."""

    node: str
    pool_id: str | None
    layout_from: str
    layout_to: str | None


@dataclass(frozen=True)
class EndpointDeletion:
    """What a delete did, or with `dry_run` would do: the endpoint as it was (`Deleting`), the
    components removed with it and each node's way back to its pool's layout."""

    view: EndpointView
    components: tuple[str, ...]
    nodes: tuple[NodeReturn, ...]
    dry_run: bool = False


class _Planned(Exception):
    """Raised inside a dry run's transaction so that everything it wrote is rolled back."""

    def __init__(self, deletion: EndpointDeletion) -> None:
        super().__init__("dry run")
        self.deletion = deletion


def delete(
    store: StorePort[EndpointsTx], principal: Principal, name: str, now: datetime, *, dry_run: bool = False
) -> EndpointDeletion:
    """Delete the endpoint: its hold ends and each node goes back to its pool's layout through the
    gate (held from now, granted at once), taking tenants' work once it has converged. Answers the
    endpoint as it was, `Deleting`, its components and each node's way back. `dry_run` runs the very
    same steps (every check, every refusal) and rolls them back: the answer is what a delete would do
    now, and nothing is written."""
    try:
        with store.begin() as tx:
            _visible(tx, principal, name)
            # Its nodes' locks before its own (the gate's hand-over takes them in that order). An
            # endpoint's nodes never change after its creation, so the ones read first are all of them.
            tx.nodes.lock([i.node_id for i in tx.endpoints.instances(name)])
            record = tx.endpoints.get(name, lock=True)
            if record is None:
                raise endpoint_not_found(name)
            instances = tx.endpoints.instances(name)
            node_ids = [i.node_id for i in instances]
            pools = tx.pools.of_nodes(node_ids)
            view = _view(tx, record, now)
            removed = components.remove_of_endpoint_in(tx, name, now)
            endpoint_holds.release(tx, name, node_ids, now)
            tx.nodes.set_mig_layout(node_ids, None)
            tx.endpoints.remove(name)
            returns: list[NodeReturn] = []
            try:
                for instance in instances:
                    pool = pools.get(instance.node_id)
                    back = told_layout(pool, None)
                    returns.append(
                        NodeReturn(instance.node_id, pool.id if pool else None, instance.layout, back)
                    )
                    if pool is not None and back is not None:
                        mig_gate.cut_now_in(tx, pool.id, instance.node_id, instance.layout, back, now)
            except (Overlap, NotBookable):  # its own hold ended at now: nothing else can be there
                raise ConcurrentChange(
                    f"endpoint {name} changed while it was deleted; retry", {"name": name}
                ) from None
            tx.events.append(EndpointDeleted(name, record.tenant_id, len(instances)), now)
            deletion = EndpointDeletion(
                EndpointView(view.record, view.spec, "Deleting", view.instances),
                tuple(removed),
                tuple(sorted(returns, key=lambda r: r.node)),
                dry_run,
            )
            if dry_run:
                raise _Planned(deletion)
    except _Planned as planned:
        return planned.deletion
    return deletion


__all__ = [
    "RETRY_BATCH",
    "EndpointDeletion",
    "EndpointView",
    "InstanceView",
    "NodeReturn",
    "create",
    "delete",
    "endpoint_not_found",
    "get",
    "list_endpoints",
    "retry",
    "update",
]
