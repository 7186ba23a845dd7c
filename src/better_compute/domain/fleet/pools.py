"""Pools: one owner, one sharing mode fixed at creation, and the policy that shapes their atoms."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, get_args

from better_compute.domain import catalog
from better_compute.domain.catalog import layouts
from better_compute.domain.kernel.errors import InvalidInput, InvalidState, NotFound, listed
from better_compute.domain.kernel.timewin import Window, parse_duration

if TYPE_CHECKING:
    from better_compute.domain.fleet.atoms import Atom
    from better_compute.domain.fleet.records import Gpu, Node
    from better_compute.domain.kernel.atom_classes import AtomClass

SharingMode = Literal["exclusive", "mig", "timeslice", "mps"]
SHARING_MODES: tuple[SharingMode, ...] = get_args(SharingMode)

ScrubMode = Literal["none", "reset", "zero"]
SCRUB_MODES: tuple[ScrubMode, ...] = get_args(ScrubMode)
SCRUBS_BY_MODE: Mapping[SharingMode, tuple[ScrubMode, ...]] = {
    "exclusive": ("none", "reset", "zero"),
    "mig": ("none", "zero"),
    "timeslice": ("none",),
    "mps": ("none",),
}
"""What `policy.scrub` each sharing mode allows between tenants. A GPU reset cleans a whole GPU, so
only where an atom is one (exclusive pools); a zeroing pass covers one MIG instance or one GPU.
timeslice and mps pools share a GPU among holders at once, so there is nothing to clean in
between."""

SLOT_MODES: tuple[SharingMode, ...] = ("timeslice", "mps")
"""The sharing modes whose GPUs are booked in `replicas` slots."""

CLASSES_BY_MODE: Mapping[SharingMode, tuple[AtomClass, ...]] = {
    "exclusive": ("gpu",),
    "mig": ("gpu", "gpu.mig"),
    "timeslice": ("gpu", "gpu.slot"),
    "mps": ("gpu", "gpu.slot"),
}
"""The atom classes a pool of each mode can hold (`atoms.derive_gpu_atoms`): whole GPUs in every
mode (a split GPU's parent is one, unbookable), MIG instances in mig pools, slots in shared ones. A
GPU whose MIG mode is on gives MIG instances in any pool; such atoms are counted where they are."""


def booked_class(mode: SharingMode) -> AtomClass:
    """The class a pool of `mode` is booked by: a whole GPU in an exclusive pool, a MIG instance in
    a mig pool, a slot in a shared one (the last of `CLASSES_BY_MODE[mode]`)."""
    return CLASSES_BY_MODE[mode][-1]


MIN_REPLICAS = 1
MAX_REPLICAS = 48
"""MPS serves at most 48 clients per GPU; time slicing is held to the same bound."""


@dataclass(frozen=True)
class PoolSharing:
    """The part of a pool that decides how its GPUs become atoms."""

    pool_id: str
    mode: SharingMode
    replicas: int = 1


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """A pool's sharing settings: `replicas` for timeslice and mps pools, `mig_layout` for mig pools.

    The wire and the fleet file keep the name `policy` for them (`policy.migLayout`); in code,
    "policy" is the policies resource only.
    """

    replicas: int | None = None
    mig_layout: str | None = None
    max_duration: str | None = None
    """The longest a reservation in the pool may be, as set (`8h`, `P2D`); None: no limit."""
    scrub: ScrubMode = "none"
    """What the node does to an atom released by one tenant before another may have it
    (`SCRUBS_BY_MODE`); `none` keeps atoms as they are."""

    def as_mapping(self) -> dict[str, Any]:
        """The settings as the wire, the events and the store spell them (only those that apply)."""
        out: dict[str, Any] = {}
        if self.replicas is not None:
            out["replicas"] = self.replicas
        if self.mig_layout is not None:
            out["migLayout"] = self.mig_layout
        if self.max_duration is not None:
            out["maxDuration"] = self.max_duration
        if self.scrub != "none":
            out["scrub"] = self.scrub
        return out

    @property
    def layout(self) -> str:
        """The MIG layout asked for (a pool that never named one keeps its GPUs whole)."""
        return self.mig_layout or "all-disabled"


def stored_settings(mode: SharingMode, stored: Mapping[str, Any]) -> PoolSettings:
    """Settings as written by `check_settings` earlier: trusted, only their defaults filled in."""
    longest = stored.get("maxDuration")
    max_duration = None if longest is None else str(longest)
    scrub = stored.get("scrub") or "none"
    kept: ScrubMode = scrub if scrub in SCRUBS_BY_MODE[mode] else "none"
    if mode in ("timeslice", "mps"):
        return PoolSettings(replicas=int(stored.get("replicas", 1)), max_duration=max_duration)
    if mode == "mig":
        return PoolSettings(
            mig_layout=str(stored.get("migLayout", "all-disabled")), max_duration=max_duration, scrub=kept
        )
    return PoolSettings(max_duration=max_duration, scrub=kept)


def check_scrub(mode: SharingMode, raw: object, where: str) -> ScrubMode:
    """`policy.scrub` as sent (None: `none`), one the pool's sharing mode allows (`SCRUBS_BY_MODE`)."""
    if raw is None:
        return "none"
    field = f"{where}.policy.scrub"
    if raw not in SCRUB_MODES:
        raise InvalidInput(
            f"{field} must be one of {', '.join(SCRUB_MODES)}, not {raw!r}", {"field": field, "value": raw}
        )
    allowed = SCRUBS_BY_MODE[mode]
    if raw not in allowed:
        shared = "their holders share a GPU at once, so there is no moment to clean it between them"
        why = {
            "timeslice": shared,
            "mps": shared,
            "mig": "a GPU reset would clean every MIG instance of the GPU, not the one released",
        }[mode]
        raise InvalidInput(
            f"{field} {raw} does not apply to {mode} pools ({why}); {mode} pools allow "
            + " or ".join(allowed),
            {"field": field, "value": raw, "mode": mode, "allowed": list(allowed)},
        )
    return raw


def check_max_duration(raw: object, where: str) -> str | None:
    """`policy.maxDuration` as sent: a positive duration (`8h`, `2d`, `PT8H`), kept as written."""
    if raw is None:
        return None
    field = f"{where}.policy.maxDuration"
    if not isinstance(raw, str):
        raise InvalidInput(f"{field} must be a duration such as 8h or 2d", {"field": field})
    parse_duration(raw, field)
    return raw


def check_duration_allowed(pool_id: str, max_duration: str | None, duration: timedelta | None) -> None:
    """A reservation (or what an extension makes of it) may last at most the pool's maxDuration, so
    that one booking cannot hold a pool's atoms for longer than its owner allows; an open-ended one
    is refused where there is a limit."""
    if max_duration is None:
        return
    longest = parse_duration(max_duration, "maxDuration")
    if duration is None or duration > longest:
        asked = "open-ended" if duration is None else f"{_hours(duration)} long"
        spelled = _hours(longest)
        limit = max_duration if spelled == max_duration else f"{max_duration} ({spelled})"
        raise InvalidInput(
            f"pool {pool_id} allows reservations of at most {limit}; this one would be {asked}",
            {"field": "duration", "poolId": pool_id, "maxDuration": max_duration},
        )


def _hours(length: timedelta) -> str:
    seconds = int(length.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h" + (f"{minutes:02d}m" if minutes or secs else "") + (f"{secs:02d}s" if secs else "")


def check_settings(
    mode: SharingMode, raw: Mapping[str, Any], where: str, *, without_nodes: bool = False
) -> PoolSettings:
    """A pool's settings as sent: `migLayout` for mig pools, `replicas` (1-48) for timeslice and mps
    pools, `maxDuration` for any, `scrub` where the mode allows it (`check_scrub`); a field that
    does not apply to the mode is refused. A pool `without_nodes` has no GPU to check its layout
    on, so the layout must at least fit some catalog model (with nodes, `check_layout_fits` checks
    it on theirs and names the node)."""
    allowed = {"mig": {"migLayout"}, "timeslice": {"replicas"}, "mps": {"replicas"}, "exclusive": set()}[mode]
    allowed = allowed | {"maxDuration", "scrub"}
    unknown = set(raw) - allowed
    if unknown:
        raise InvalidInput(
            f"{where}: policy field {min(unknown)!r} does not apply to {mode} pools",
            {"field": f"{where}.policy"},
        )
    longest = check_max_duration(raw.get("maxDuration"), where)
    scrub = check_scrub(mode, raw.get("scrub"), where)
    if mode in ("timeslice", "mps"):
        return PoolSettings(replicas=check_replicas(raw.get("replicas", 1)), max_duration=longest)
    if mode == "mig":
        layout = layouts.format_layout(layouts.parse_layout(str(raw.get("migLayout", "all-disabled"))))
        if without_nodes:
            check_layout_possible(layout, where)
        return PoolSettings(mig_layout=layout, max_duration=longest, scrub=scrub)
    return PoolSettings(max_duration=longest, scrub=scrub)


def check_layout_possible(layout: str, where: str) -> None:
    """A layout must place on at least one catalog model: a pool with no nodes otherwise took any
    well-formed text (`mixed:9x9g.99gb`), and every node added later would be refused for it."""
    if layout == "all-disabled" or any(layouts.is_valid(layout, m) for m in catalog.mig_models()):
        return
    raise InvalidInput(
        f"{where}: policy.migLayout {layout} fits no GPU model in the catalog "
        "(`better-compute gpus` lists each model's profiles)",
        {"field": f"{where}.policy.migLayout", "layout": layout},
    )


def check_mode(mode: str) -> SharingMode:
    if mode not in SHARING_MODES:
        raise InvalidInput(
            f"sharing mode must be one of {', '.join(SHARING_MODES)}, not {mode!r}",
            {"field": "mode", "value": mode},
        )
    return mode


def check_replicas(replicas: object) -> int:
    """Replicas split one GPU into slots; 1 to 48 is what MPS can serve."""
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise InvalidInput("policy.replicas must be an integer", {"field": "policy.replicas"})
    if not MIN_REPLICAS <= replicas <= MAX_REPLICAS:
        raise InvalidInput(
            f"policy.replicas must be between {MIN_REPLICAS} and {MAX_REPLICAS}, not {replicas}",
            {"field": "policy.replicas", "value": replicas},
        )
    return replicas


def mps_units(replicas: int) -> int:
    """Each MPS slot's share of the GPU's 100 MPS units."""
    return 100 // check_replicas(replicas)


def atoms_leaving(before: Iterable[Atom], after: Mapping[str, Atom]) -> list[str]:
    """The atoms a change takes away from their pool: present before, and now gone or elsewhere."""
    return sorted(
        a.id
        for a in before
        if a.id not in after or not after[a.id].present or after[a.id].pool_id != a.pool_id
    )


def check_none_held(leaving: Sequence[str], held: Sequence[Window]) -> None:
    """No atom under a live booking may vanish or leave its pool: its holder would lose its device,
    or be billed to a pool it no longer runs in. `held` are the live bookings of `leaving`."""
    if not held:
        return
    ends = [s.end for s in held]
    free = None if any(e is None for e in ends) else max(e for e in ends if e is not None)
    raise InvalidState(
        f"{len(held)} live booking(s) hold atoms this change would remove from the pool"
        + (f"; they end by {free.isoformat()}" if free else "; some are open-ended"),
        {"atomIds": list(leaving[:20]), "freeFrom": free.isoformat() if free else None},
    )


def check_mode_kept(pool_id: str, mode: SharingMode, asked: str | None) -> None:
    """A pool's sharing mode decides what its GPUs become, so it is fixed at creation."""
    if asked is not None and asked != mode:
        raise InvalidInput(
            f"a pool's sharing mode is fixed at creation: pool {pool_id} is {mode}; "
            f"create another pool for {asked}",
            {"field": "mode", "mode": mode},
        )


def check_members(
    node_ids: Sequence[str],
    known: Mapping[str, Node],
    cluster_id: str,
    pool_of_node: Mapping[str, str],
    pool_id: str | None,
) -> None:
    """A pool's nodes exist (`known`), sit in the pool's cluster, are listed once, and belong to no
    other pool (`pool_of_node`: the pool each node is in now)."""
    seen: set[str] = set()
    for node in node_ids:
        if node in seen:
            raise InvalidInput(f"nodes: {node} is listed twice", {"field": "nodes", "node": node})
        seen.add(node)
    for node in node_ids:
        if node not in known:
            raise NotFound(f"node {node} not found", {"node": node})
        if known[node].cluster_id != cluster_id:
            raise InvalidInput(
                f"node {node} is in cluster {known[node].cluster_id}, not in the pool's cluster {cluster_id}",
                {"field": "nodes", "node": node, "clusterId": known[node].cluster_id},
            )
    for node, other in sorted(pool_of_node.items()):
        if other != pool_id:
            raise InvalidState(
                f"node {node} already belongs to pool {other}; a node is in at most one pool",
                {"node": node, "poolId": other},
            )


def check_layout_fits(gpus: Iterable[Gpu], layout: str) -> None:
    """The layout must place on every GPU model of these GPUs (checked once per model, named by the
    first node that has it); a GPU the catalog does not know can only stay whole."""
    checked: set[str] = set()
    for gpu in sorted(gpus, key=lambda g: (g.node_id, g.index)):
        if not gpu.present:
            continue
        if gpu.model is None:
            if layout != "all-disabled":
                raise InvalidInput(
                    f"policy.migLayout: node {gpu.node_id} has a GPU the catalog does not know "
                    f"({gpu.product}), so {layout} cannot be checked on it",
                    {"field": "policy.migLayout", "node": gpu.node_id, "product": gpu.product},
                )
            continue
        if gpu.model in checked:
            continue
        try:
            layouts.validate(layout, gpu.model)
        except InvalidInput as exc:
            raise type(exc)(
                f"policy.migLayout on node {gpu.node_id} ({gpu.model}): {exc.message}",
                {**exc.details, "field": "policy.migLayout", "node": gpu.node_id},
            ) from exc
        checked.add(gpu.model)


def check_deletable(pool_id: str, members: Sequence[str], has_reservations: bool) -> None:
    """Only an empty pool may be deleted: no member nodes (their atoms, and whoever books them, would
    lose their pool) and no reservations (their history, and what is billed for it, names the pool).
    Its quota rows and policies go with it."""
    if members:
        shown = listed(members)
        raise InvalidState(
            f"pool {pool_id} still has {len(members)} node(s) ({shown}); move them out first "
            "(pools.update with the nodes that stay, or none)",
            {"poolId": pool_id, "nodes": list(members[:20])},
        )
    if has_reservations:
        raise InvalidState(
            f"pool {pool_id} has reservations, which keep its history; it cannot be deleted",
            {"poolId": pool_id},
        )
