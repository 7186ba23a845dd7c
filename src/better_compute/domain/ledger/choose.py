"""Choosing atoms for a reservation inside its pool: keep each request together, leave few fragments.

The service hands in a snapshot: the atoms that are free for the whole window and, per GPU, how many
of its atoms are already booked in it. `choose` answers with the atoms per request, or with the
first request it cannot serve. The ledger commit is still the fence; this is only the decision.

Choice rules (docs/concepts.md#reservations, step 4):

1. **Together.** A request's atoms come from one GPU when they can, else from one NVLink domain,
   else from one NUMA node, else from one node; only a request that no node can hold spreads over
   nodes (fewest nodes first). Atoms on one GPU count as NV-connected to each other. Inside the
   group chosen, the finer levels still apply: in an NVLink domain that spans NUMA nodes, a request
   one NUMA node can hold stays on one. A request marked `same_gpu` stops at the first level: one
   GPU or nothing (a share of one GPU as slots must not be split over two GPUs).
2. **Few fragments.** Between groups that keep a request equally together, take the one whose GPUs
   are already the busiest (partly used GPUs fill up before untouched ones are broken into), then the
   one that leaves the fewest free atoms behind (best fit). Between single GPUs still equal, when
   the snapshot gives the pool's request distribution (`fragmentation`), the one whose node's
   expected fragmentation grows least (the fragmentation gradient of Weng et al., ATC '23: a whole
   GPU goes where it strands least, not to whichever untouched GPU comes first). The selector
   decides the MIG profile; this only decides which instance.
3. **Deterministic.** Remaining ties go to the smallest ids, so the same snapshot gives the same
   answer on every replica of the server.
4. **All or nothing, and together.** A reservation of several requests is kept together by the
   same order as one request: one GPU that can serve them all, else one NVLink domain, else one
   NUMA node, else one node (the best such group by rule 2, and inside it the finer levels again);
   only a reservation no node can hold spreads. Inside the group, requests are served in order,
   each avoiding the atoms earlier ones took (and counting them as busy, so they gather on the same
   GPUs). If the given order fails, the most constrained requests (fewest matching atoms) are tried
   first once more, since a broad request served first can take the only atom a narrow one could
   use. If that fails too, the answer is the NoFit of the given order.

Whole `gpu` requests take only bookable `gpu` atoms, which exist only on GPUs that are not split.

Cost: O(n log n) in the number of candidate atoms per request: one pass to filter and group at each
of the five levels, one sort of the chosen group. A reservation of several requests adds, per level,
trials over its groups that cost what each group holds (the shortlisted atoms, not the pool).
"""

from __future__ import annotations

import heapq
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Container, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import chain
from operator import attrgetter
from typing import Protocol

from better_compute.domain.catalog import profile_name_key
from better_compute.domain.fleet.atoms import Atom, selects
from better_compute.domain.kernel.timewin import require_aware
from better_compute.domain.ledger.admission import DeviceRequest

_DIGITS = re.compile(r"(\d+)")
_ID = attrgetter("id")


FragmentationGrowth = Callable[[str, str, int, int], float]
"""`(node, gpu, before, after)`: how much the node's expected fragmentation grows when the GPU's free
capacity goes from `before` to `after` milli-GPUs, its other GPUs as the snapshot has them. The
caller binds the pool's recorded request distribution and its view of every GPU of the node
(`domain.placement.fragmentation.fragmentation_delta` over it: placement is above the ledger, and a
shortlist holds only some of a node's GPUs)."""

_WHOLE = 1000


@dataclass(frozen=True)
class _Gradient:
    """The fragmentation tie-break of rule 2, over the candidates' GPUs."""

    growth_of: FragmentationGrowth
    node_of: Mapping[str, str]

    @classmethod
    def of(cls, growth_of: FragmentationGrowth, free: Sequence[Atom]) -> _Gradient:
        return cls(growth_of, {atom.gpu_id: atom.node for atom in free})

    def growth(self, gpu: str, count: int, busy: Counter[str], free_on_gpu: Counter[str]) -> float:
        """How much `gpu`'s node's fragmentation grows when `count` of its free atoms are taken: its
        capacity is its busy and free atoms, so a slot of 20 is 50 milli-GPUs."""
        capacity = busy[gpu] + free_on_gpu[gpu]
        before = _WHOLE * free_on_gpu[gpu] // capacity
        after = _WHOLE * (free_on_gpu[gpu] - count) // capacity
        return self.growth_of(self.node_of[gpu], gpu, before, after)


@dataclass(frozen=True)
class Chosen:
    """The atoms chosen, as ids, in the order of the reservation's device requests."""

    atoms_per_request: tuple[tuple[str, ...], ...]

    @property
    def atom_ids(self) -> tuple[str, ...]:
        return tuple(atom for ids in self.atoms_per_request for atom in ids)


@dataclass(frozen=True)
class NoFit:
    """Request `request_index` cannot be served now: `available` of its `wanted` atoms are free.

    The service turns it into INSUFFICIENT_CAPACITY: NOT_IN_POOL when `never`, else ALL_BUSY with
    the earliest start at which the request could be served (see `earliest_common_start`).
    """

    request_index: int
    reason: str
    wanted: int
    available: int
    never: bool = False
    """True when the pool has not enough such atoms at all (`never_fits`): NOT_IN_POOL, not ALL_BUSY;
    `available` is then how many the pool has, booked or not, on nodes that take new bookings."""
    cordoned: int = 0
    """How many more such atoms the pool has on cordoned nodes: never offered, never `available`."""

    @property
    def field(self) -> str:
        return f"devices[{self.request_index}]"

    @property
    def message(self) -> str:
        return f"{self.field}: {self.reason}"


@dataclass(frozen=True)
class PoolKinds:
    """What a pool has at all, bookable or busy: its atom classes and its MIG profiles, to tell a
    request that can never be served there what it could ask for instead."""

    classes: tuple[str, ...]
    profiles: tuple[str, ...]


def kinds_of(atoms: Iterable[Atom]) -> PoolKinds:
    """The classes and MIG profiles of the bookable atoms (once per pool snapshot, not per request)."""
    classes: set[str] = set()
    profiles: set[str] = set()
    for atom in atoms:
        if not atom.bookable:
            continue
        classes.add(atom.cls)
        profile = atom.attributes.get("migProfile")
        if atom.cls == "gpu.mig" and isinstance(profile, str):
            profiles.add(profile)
    return PoolKinds(tuple(sorted(classes)), tuple(sorted(profiles, key=_smallest_first)))


def _smallest_first(profile: str) -> tuple[int, int, str]:
    slices, memory, attribute = profile_name_key(profile)
    return (-slices, -memory, attribute)


def never_fits(
    requests: Sequence[DeviceRequest],
    in_pool: Sequence[int],
    kinds: PoolKinds,
    pool_id: str,
    cordoned: Sequence[int] | None = None,
    most_on_one_gpu: Sequence[int] | None = None,
) -> NoFit | None:
    """The first request the pool could not serve even were it empty, or None.

    `most_on_one_gpu[i]`, when given, is the most atoms matching request i that any one GPU of the
    pool has (on nodes that take new bookings): a `same_gpu` request for more can never be served.

    `in_pool[i]` is how many of the pool's atoms match request i at all, booked or not (its
    `matching` atoms), on nodes that take new bookings; `cordoned[i]` how many more are on cordoned
    nodes (none when not given). A refusal for one of these is NOT_IN_POOL: waiting will not help
    (only lifting a cordon would), so the message says what the pool has ("profiles in this pool:
    1g.10gb, 2g.20gb, 3g.40gb"), and how many of the matching atoms are on cordoned nodes. Other
    refusals are ALL_BUSY, with the earliest start.
    """
    for index, (request, count) in enumerate(zip(requests, in_pool, strict=True)):
        if count >= request.count:
            if request.same_gpu and most_on_one_gpu is not None and most_on_one_gpu[index] < request.count:
                most = most_on_one_gpu[index]
                narrowed = " matching the selector" if request.selector.match_expressions else ""
                reason = (
                    f"{request.count} {request.cls} atoms{narrowed} wanted on one GPU, and no GPU of pool"
                    f" {pool_id} has more than {most}"
                )
                return NoFit(index, reason, request.count, most, never=True)
            continue
        off = cordoned[index] if cordoned is not None else 0
        narrowed = " matching the selector" if request.selector.match_expressions else ""
        if off:
            noun = "atom" if request.count == 1 else "atoms"
            reason = (
                f"{request.count} {request.cls} {noun}{narrowed} wanted, pool {pool_id} has {count} on nodes"
                f" that take new bookings and {off} more on cordoned nodes"
            )
            if count + off >= request.count:
                return NoFit(index, reason, request.count, count, never=True, cordoned=off)
        elif count == 0:
            reason = f"pool {pool_id} has no {request.cls} atom{narrowed}"
        else:
            reason = (
                f"{request.count} {request.cls} atoms{narrowed} wanted, pool {pool_id} has {count} in all"
            )
        return NoFit(
            index, reason + _what_there_is(request, kinds), request.count, count, never=True, cordoned=off
        )
    return None


def cordoned_note(count: int) -> str:
    """What a refusal adds when matching atoms sit on cordoned nodes (they were not offered)."""
    if not count:
        return ""
    return f" ({count} more matching {'atom is' if count == 1 else 'atoms are'} on cordoned nodes)"


def _what_there_is(request: DeviceRequest, kinds: PoolKinds) -> str:
    if request.cls == "gpu.mig" and kinds.profiles:
        return f" (profiles in this pool: {', '.join(kinds.profiles)})"
    if not kinds.classes:
        return " (it has no bookable atoms)"
    if request.cls not in kinds.classes:
        split = "; its GPUs are split" if request.cls == "gpu" else ""
        return f" (atom classes in this pool: {', '.join(kinds.classes)}{split})"
    return ""


def matching(request: DeviceRequest, atoms: Iterable[Atom]) -> list[Atom]:
    """The atoms that could ever serve `request`: bookable, of its class, matching its selector.

    The service uses it to find which atoms' bookings decide the earliest start after a NoFit.
    """
    return [
        atom
        for atom in atoms
        if atom.cls == request.cls and atom.bookable and selects(request.selector, atom)
    ]


def choose(
    requests: Sequence[DeviceRequest],
    candidates: Iterable[Atom],
    busy_by_gpu: Mapping[str, int],
    *,
    fragmentation: FragmentationGrowth | None = None,
) -> Chosen | NoFit:
    """Choose atoms for every request from `candidates` (atoms free for the whole window), or say
    which request cannot be served. See the module docstring for the rules; `fragmentation`, the
    gradient of the pool's recorded request distribution, breaks rule 2's ties between GPUs."""
    free = [atom for atom in candidates if atom.bookable]
    gradient = None if fragmentation is None else _Gradient.of(fragmentation, free)
    # Only the candidates' GPUs' counts matter; a pool's map of busy GPUs can be thousands long.
    busy_by_gpu = {g: n for g in {atom.gpu_id for atom in free} if (n := busy_by_gpu.get(g, 0)) > 0}
    given = list(range(len(requests)))
    if len(requests) < 2:
        return _choose_in_order(requests, given, free, busy_by_gpu, gradient)
    breadth = [len(matching(request, free)) for request in requests]
    narrow_first = sorted(given, key=lambda i: (breadth[i], i))
    orders = [given] if narrow_first == given else [given, narrow_first]
    together = _together(requests, orders, free, busy_by_gpu, _LEVELS, gradient)
    if together is not None:
        return together
    first = _choose_in_order(requests, given, free, busy_by_gpu, gradient)
    if isinstance(first, Chosen) or len(orders) == 1:
        return first
    second = _choose_in_order(requests, narrow_first, free, busy_by_gpu, gradient)
    return second if isinstance(second, Chosen) else first


def _together(
    requests: Sequence[DeviceRequest],
    orders: Sequence[Sequence[int]],
    free: Sequence[Atom],
    busy_by_gpu: Mapping[str, int],
    levels: Sequence[_Level],
    gradient: _Gradient | None = None,
) -> Chosen | None:
    """The whole reservation inside one group, by the topology order one request follows (rule 1):
    the first level at which some group can serve every request, the best group there by rule 2,
    and inside it the finer levels again. None when no node can hold it all.

    Cost: per level, one pass to group and one trial per group tried; a trial costs what its group
    holds, so a level costs at most O(n) per request over the shortlisted atoms."""
    total = sum(request.count for request in requests)
    busy = Counter({gpu: n for gpu, n in busy_by_gpu.items() if n > 0})
    free_on_gpu: Counter[str] = Counter(atom.gpu_id for atom in free)
    for depth, level in enumerate(levels):
        groups: dict[Hashable, list[Atom]] = defaultdict(list)
        for atom in free:
            key = level(atom)
            if key is not None:
                groups[key].append(atom)
        ranked = sorted(
            (
                (-sum(busy[g] for g in gpus), sum(free_on_gpu[g] for g in gpus) - total, repr(key), key)
                for key, members in groups.items()
                if len(members) >= total
                for gpus in [{atom.gpu_id for atom in members}]
            ),
        )
        for *_, key in ranked:
            members = groups[key]
            served = next(
                (
                    c
                    for c in (_choose_in_order(requests, o, members, busy_by_gpu, gradient) for o in orders)
                    if isinstance(c, Chosen)
                ),
                None,
            )
            if served is None:
                continue
            spans_gpus = any(atom.gpu_id != members[0].gpu_id for atom in members)
            if len(members) > total and depth + 1 < len(levels) and spans_gpus:
                finer = _together(requests, orders, members, busy_by_gpu, levels[depth + 1 :], gradient)
                if finer is not None:
                    return finer
            return served
    return None


def _choose_in_order(
    requests: Sequence[DeviceRequest],
    order: Iterable[int],
    free: Sequence[Atom],
    busy_by_gpu: Mapping[str, int],
    gradient: _Gradient | None = None,
) -> Chosen | NoFit:
    busy: Counter[str] = Counter({gpu: n for gpu, n in busy_by_gpu.items() if n > 0})
    free_on_gpu: Counter[str] = Counter(atom.gpu_id for atom in free)
    taken: set[str] = set()
    chosen: dict[int, tuple[str, ...]] = {}
    for index in order:
        request = requests[index]
        candidates = matching(request, free)
        options = [atom for atom in candidates if atom.id not in taken]
        if len(options) < request.count:
            return _no_fit(index, request, len(options), shared=len(candidates) > len(options))
        if request.same_gpu:
            most = max(Counter(atom.gpu_id for atom in options).values())
            if most < request.count:
                return _no_fit_on_one_gpu(index, request, most, shared=len(candidates) > len(options))
            picked = _choose_one(options, request.count, busy, free_on_gpu, _LEVELS[:1], gradient)
        else:
            picked = _choose_one(options, request.count, busy, free_on_gpu, _LEVELS, gradient)
        for atom in picked:
            taken.add(atom.id)
            busy[atom.gpu_id] += 1
            free_on_gpu[atom.gpu_id] -= 1
        chosen[index] = tuple(atom.id for atom in picked)
    return Chosen(tuple(chosen[i] for i in range(len(requests))))


def _no_fit(index: int, request: DeviceRequest, available: int, shared: bool) -> NoFit:
    narrowed = " matching the selector" if request.selector.match_expressions else ""
    noun = "atom" if request.count == 1 else "atoms"
    reason = (
        f"{request.count} {request.cls} {noun}{narrowed} wanted, {available} free in the pool for that window"
    )
    if shared:
        reason += " besides those the reservation's other requests take"
    return NoFit(index, reason, request.count, available)


def _no_fit_on_one_gpu(index: int, request: DeviceRequest, most: int, shared: bool) -> NoFit:
    narrowed = " matching the selector" if request.selector.match_expressions else ""
    reason = (
        f"{request.count} {request.cls} atoms{narrowed} wanted on one GPU, at most {most} free on any"
        " one GPU of the pool for that window"
    )
    if shared:
        reason += " besides those the reservation's other requests take"
    return NoFit(index, reason, request.count, most)


_Level = Callable[[Atom], Hashable | None]


def _GPU_LEVEL(a: Atom) -> Hashable | None:
    return a.gpu_id


_LEVELS: tuple[_Level, ...] = (
    _GPU_LEVEL,
    lambda a: None if a.nvlink_domain is None else (a.node, a.nvlink_domain),
    lambda a: None if a.numa_node is None else (a.node, a.numa_node),
    lambda a: a.node,
)


def _choose_one(
    options: Sequence[Atom],
    count: int,
    busy: Counter[str],
    free_on_gpu: Counter[str],
    levels: Sequence[_Level] = _LEVELS,
    gradient: _Gradient | None = None,
) -> list[Atom]:
    """`count` atoms of `options` (at least that many), as together and as tightly packed as can be.

    Inside the group chosen at one level, the next levels still apply: an NVLink domain that spans
    NUMA nodes gives the request one NUMA node's atoms when one can hold it. At the GPU level, GPUs
    equal by rule 2 go by the fragmentation gradient when there is one."""
    for depth, level in enumerate(levels):
        groups: dict[Hashable, list[Atom]] = defaultdict(list)
        for atom in options:
            key = level(atom)
            if key is not None:
                groups[key].append(atom)
        ranked: list[tuple[tuple[int, int, str], Hashable]] = []
        for key, members in groups.items():
            if len(members) < count:
                continue
            gpus = {atom.gpu_id for atom in members}
            rank = (
                -sum(busy[gpu] for gpu in gpus),
                sum(free_on_gpu[gpu] for gpu in gpus) - count,
                repr(key),
            )
            ranked.append((rank, key))
        if ranked:
            best = min(ranked)
            chosen_key = best[1]
            if gradient is not None and level is _GPU_LEVEL:
                ties = [key for rank, key in ranked if rank[:2] == best[0][:2]]
                if len(ties) > 1:
                    chosen_key = min(
                        ties, key=lambda k: (gradient.growth(str(k), count, busy, free_on_gpu), repr(k))
                    )
            members = groups[chosen_key]
            spans_gpus = any(atom.gpu_id != members[0].gpu_id for atom in members)
            if len(members) > count and depth + 1 < len(levels) and spans_gpus:
                return _choose_one(members, count, busy, free_on_gpu, levels[depth + 1 :], gradient)
            return _pack(members, count, busy, free_on_gpu)
    by_node: dict[str, list[Atom]] = defaultdict(list)
    for atom in options:
        by_node[atom.node].append(atom)
    nodes = sorted(by_node, key=lambda node: (-len(by_node[node]), node))
    picked: list[Atom] = []
    for node in nodes:
        picked.extend(_pack(by_node[node], count - len(picked), busy, free_on_gpu))
        if len(picked) == count:
            break
    return picked


def _pack(members: Sequence[Atom], count: int, busy: Counter[str], free_on_gpu: Counter[str]) -> list[Atom]:
    """The first `count` of `members`, busiest GPUs first, then the GPUs with the fewest free atoms."""
    if count >= len(members):
        return sorted(members, key=lambda a: _atom_rank(a, busy, free_on_gpu))
    return heapq.nsmallest(count, members, key=lambda a: _atom_rank(a, busy, free_on_gpu))


def _atom_rank(
    atom: Atom, busy: Counter[str], free_on_gpu: Counter[str]
) -> tuple[int, int, str, tuple[tuple[int, int, str], ...], str]:
    return (-busy[atom.gpu_id], free_on_gpu[atom.gpu_id], atom.gpu_id, _position(atom), atom.id)


def _position(atom: Atom) -> tuple[tuple[int, int, str], ...]:
    """Where an atom comes among its GPU's equals: a MIG instance by its GPU-instance and
    compute-instance ids (the order NVML lists them in, as the node reports them; the atom's key
    names its slice, which would put smaller profiles first), anything else by its key."""
    gi, ci = atom.attributes.get("giId"), atom.attributes.get("ciId")
    if atom.cls == "gpu.mig" and isinstance(gi, int) and isinstance(ci, int):
        return ((0, gi, ""), (0, ci, ""))
    return _natural(atom.key)


def _natural(key: str) -> tuple[tuple[int, int, str], ...]:
    """`slot:2` before `slot:10`, `mig:1g.10gb@2` before `mig:1g.10gb@10` (numbers compare as numbers)."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in _DIGITS.split(key) if p)


class Span(Protocol):
    """A booked span: a Window, or anything with the same `start` and `end` (None: never ends)."""

    @property
    def start(self) -> datetime: ...

    @property
    def end(self) -> datetime | None: ...


def earliest_common_start(
    busy: Mapping[str, Iterable[Span]],
    count: int,
    duration: timedelta | None,
    not_before: datetime,
) -> datetime | None:
    """The earliest start at or after `not_before` at which `count` of these atoms are all free for
    `duration` (None: open-ended), given each matching atom's booked windows.

    Each atom contributes the set of starts that fit between its bookings; a sweep over those sets
    finds the first instant covered by `count` of them. None when that never happens (too few atoms,
    or open-ended bookings that never end). It ignores keeping the atoms together: it answers when
    the request could first be served at all.
    """
    if count < 1:
        raise ValueError("count must be at least 1")
    floor = require_aware(not_before, "not_before")
    events: list[tuple[datetime, int]] = []
    for windows in busy.values():
        for start, end in _free_starts(sorted(windows, key=lambda w: w.start), duration, floor):
            events.append((start, 0))
            if end is not None:
                events.append((end, 1))
    events.sort()
    open_now = 0
    for instant, kind in events:
        if kind == 0:
            open_now += 1
            if open_now >= count:
                return instant
        else:
            open_now -= 1
    return None


def starts_to_try(
    busy: Mapping[str, Iterable[Span]],
    needs: Iterable[tuple[Iterable[str], int]],
    duration: timedelta | None,
    not_before: datetime,
    limit: int,
) -> list[datetime]:
    """Where to look for the earliest start of a reservation whose requests need (atoms, count).

    No request can start before it could alone (`earliest_common_start`): the latest of those is the
    first start to try. Past it, a refused reservation can only become one that is served where one
    of its atoms frees (a booking's end), so those instants follow, `limit` starts in all. Empty when
    some request can never be served.
    """
    floor = not_before
    for atom_ids, count in needs:
        start = earliest_common_start({a: busy.get(a, ()) for a in atom_ids}, count, duration, not_before)
        if start is None:
            return []
        floor = max(floor, start)
    ends = sorted({s.end for spans in busy.values() for s in spans if s.end is not None and s.end > floor})
    return [floor, *ends][:limit]


def _free_starts(
    windows: Sequence[Span], duration: timedelta | None, floor: datetime
) -> list[tuple[datetime, datetime | None]]:
    """The closed intervals of starts at which one atom is free for `duration` (end None: for ever)."""
    starts: list[tuple[datetime, datetime | None]] = []
    free_from = floor
    for window in windows:
        if window.end is not None and window.end <= free_from:
            continue
        if duration is not None and window.start - free_from >= duration:
            starts.append((free_from, window.start - duration))
        if window.end is None:
            return starts
        free_from = max(free_from, window.end)
    starts.append((free_from, None))
    return starts


def shortlist(
    request: DeviceRequest,
    matching_by_gpu: Mapping[str, Sequence[Atom]],
    busy_atoms: Container[str],
    busy_by_gpu: Mapping[str, int],
    *,
    count: int | None = None,
    reserve: int = 16,
    free_by_gpu: Mapping[str, int] | None = None,
) -> list[Atom]:
    """The free matching atoms `choose` needs to see for `request`, without looking at every atom.

    A pool can hold tens of thousands of atoms; the choice is made among the GPUs it prefers anyway:
    partly used GPUs first (busiest first, rule 2), then untouched ones in the pool's stable order.
    GPUs are taken whole, so a request that fits on one GPU still finds it, until the shortlist holds
    four times the count plus `reserve` atoms and some node in it holds the count (rule 1: only a
    reservation no node can hold spreads over nodes, so a pool whose first GPUs are on small nodes
    is looked through until a node that can hold it turns up, or to its end). `matching_by_gpu` maps
    each GPU to its atoms that match the request's class and selector, in a stable order.

    `count` is how many atoms the shortlist must serve: the request's own by default; for a
    reservation of several requests, all of theirs, since requests alike (or sharing atoms) draw on
    the same shortlisted atoms. A `same_gpu` request takes only GPUs that can hold its count;
    `free_by_gpu`, when the caller keeps it, says how many of each GPU's matching atoms are free,
    which spares counting them (the answer is the same).
    """
    need = request.count if count is None else count
    wanted = 4 * need + reserve

    def holds(gpu: str) -> bool:
        if not request.same_gpu:
            return True
        if free_by_gpu is not None:
            return free_by_gpu.get(gpu, 0) >= request.count
        return _holds(matching_by_gpu[gpu], request.count, busy_atoms, busy_by_gpu.get(gpu, 0))

    busiest = [(-n, gpu) for gpu, n in busy_by_gpu.items() if n > 0 and gpu in matching_by_gpu]
    seen = {gpu for _, gpu in busiest}
    partly = [gpu for _, gpu in sorted(busiest) if holds(gpu)]
    out: list[Atom] = []
    on_node: Counter[str] = Counter()
    most = 0
    for gpu in chain(partly, (g for g in matching_by_gpu if g not in seen and holds(g))):
        atoms = matching_by_gpu[gpu]
        free = [atom for atom in atoms if atom.id not in busy_atoms]
        if not free:
            continue
        out.extend(free)
        on_node[free[0].node] += len(free)
        most = max(most, on_node[free[0].node])
        if len(out) >= wanted and most >= need:
            break
    return out


def _holds(atoms: Sequence[Atom], count: int, busy_atoms: Container[str], busy: int) -> bool:
    """Whether `count` of one GPU's `atoms` are free: a `same_gpu` request skips a GPU that cannot
    hold it, or the shortlist could fill with partly used GPUs none of which can serve it. `busy`
    (the GPU's busy atoms of any class) bounds the count from both sides before atoms are looked at."""
    if len(atoms) < count:
        return False
    if len(atoms) - busy >= count:
        return True
    return len(atoms) - sum(map(busy_atoms.__contains__, map(_ID, atoms))) >= count
