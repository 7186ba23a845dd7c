"""The Slurm follower's decisions: from the ledger's holds on a Slurm cluster's nodes and the jobs
slurmctld knows, what to submit, cancel, bind, end and book (ADR 0015, docs/slurm.md).

On a Slurm node every hold of ours is a Slurm job, a *holding job*, and Slurm picks its cards. Our
booking there is two-phase:

- admission books atoms of the asked type on the node, as anywhere: they count against quota and
  capacity. Until the holding job runs they stand for "N of this type on this node", not for those
  very cards (the booking is *pending*);
- once Slurm runs the job, the GRES indices it gave are mapped to atoms (`slurm_gres.gres_slots`:
  index k is the atom of the node's k-th `gpu` line), and the booking is *bound* to them: moved
  there when admission had put it elsewhere (a `Rebind`).

`plan_holds` is pure: `now` and everything read are parameters. The service applies the plan in
the order Slurm's state needs (`service.fleet.slurm_follower`). Who decides what:

- **a job of ours** is one under the cluster's account whose name is `hold_job_name(allocation)`.
  One whose allocation is not live (released, cancelled, never committed) is cancelled; of two for
  one allocation and node, the oldest alive is kept and the others cancelled (every follower
  chooses alike, and a copy we cancelled never ends the allocation);
- **an allocation of ours without a job** gets one submitted (`--begin` its start, `--time` its
  length), unless it is over;
- **a job of ours that ended** (Slurm ended it, a user cancelled it, its time ran out) ends its
  allocation now (`End`), unless the allocation was already over; but one in `replicas` (a
  workload replica that runs its container as its job, docs/slurm.md#replicas-as-jobs) keeps its
  booking and gets a new job once it is in `rerun` (the follower waits a while, so the end and
  Slurm's reason are shown), as a replica whose container exits is started again;
- **a running job submitted directly** (not ours) is booked as an external hold of the tenant its
  Slurm account maps to (else `external`), on the atoms of its indices, for its time limit; it ends
  when the job ends or slurmctld forgets it;
- **a pending booking on an atom a running job holds** moves to a free atom of its type on the
  node (free: no live booking at all), so that no atom is held by a running job and by a booking
  of another holder. Without a free one it stays where it is (its holding job pends behind the
  running one) and the running job's hold is booked once it can be.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from better_compute.domain.fleet.slurm import SlurmJob
from better_compute.domain.fleet.slurm_gres import GresSlot

HOLD_PREFIX = "bc."
"""A holding job is named `bc.<allocation id>`."""

EXTERNAL_PREFIX = "slurm:"
"""An external hold's allocation is `slurm:<cluster>:<job id>`."""

MAX_JOB_NAME = 64
"""The longest name handed to Slurm (`domain.fleet.slurm.check_name`)."""


def hold_job_name(allocation_id: str) -> str:
    return f"{HOLD_PREFIX}{allocation_id}"


def allocation_of_job(name: str) -> str | None:
    """The allocation a holding job's name carries; None for a name that is not one of ours."""
    return name[len(HOLD_PREFIX) :] if name.startswith(HOLD_PREFIX) and len(name) > len(HOLD_PREFIX) else None


def external_allocation_id(cluster_id: str, job_id: int) -> str:
    return f"{EXTERNAL_PREFIX}{cluster_id}:{job_id}"


def is_external(allocation_id: str) -> bool:
    return allocation_id.startswith(EXTERNAL_PREFIX)


def holdable(allocation_id: str) -> bool:
    """Whether an allocation is one a holding job mirrors: ours, not an external hold, not a
    partition change of the layout gate, and short enough to name a job after."""
    return (
        not is_external(allocation_id)
        and not allocation_id.startswith("partition:")
        and len(hold_job_name(allocation_id)) <= MAX_JOB_NAME
    )


@dataclass(frozen=True)
class Held:
    """A live allocation's bookings on one node of the cluster: the atoms, whose, and its window."""

    allocation_id: str
    node: str
    atom_ids: tuple[str, ...]
    tenant_id: str | None
    start: datetime
    end: datetime | None


@dataclass(frozen=True)
class Submit:
    """Submit a holding job for `allocation_id` on `node`: `gres` as (type, count) pairs."""

    allocation_id: str
    node: str
    gres: tuple[tuple[str, int], ...]
    begin_seconds: int
    time_limit_seconds: int | None


@dataclass(frozen=True)
class Rebind:
    """Move `allocation_id`'s bookings: each (from atom, to atom) of `moves`."""

    allocation_id: str
    node: str
    moves: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class BookExternal:
    """Book a job submitted to Slurm directly: `atom_ids` for `tenant_id` from `start` to `end`."""

    allocation_id: str
    job_id: int
    node: str
    tenant_id: str
    atom_ids: tuple[str, ...]
    start: datetime
    end: datetime | None


@dataclass(frozen=True)
class Mirror:
    """What the follower read of one job: kept so a reservation can say why it waits."""

    allocation_id: str
    node: str
    job_id: int
    state: str
    reason: str
    external: bool
    since: datetime | None = None
    """When the follower first read the job in this state with this reason (None: not stored yet)."""


@dataclass(frozen=True)
class HoldPlan:
    submit: tuple[Submit, ...] = ()
    cancel: tuple[tuple[int, str], ...] = ()
    """(job id, why) of jobs to scancel."""
    end: tuple[tuple[str, str], ...] = ()
    """(allocation id, why) of our allocations whose job ended: they end now."""
    rebind: tuple[Rebind, ...] = ()
    book_external: tuple[BookExternal, ...] = ()
    end_external: tuple[str, ...] = ()
    """External holds whose job ended (or slurmctld forgot it)."""
    mirror: tuple[Mirror, ...] = ()
    unplaced: tuple[str, ...] = field(default=())
    """Why a running job's atoms could not be mirrored this pass (an atom a pending booking holds
    with no free atom to move it to, an index the node's GRES lines do not have)."""


def _seconds_up(delta: timedelta) -> int:
    whole = int(delta.total_seconds())
    return whole + (1 if delta.total_seconds() > whole else 0)


def _atoms_of(job: SlurmJob, node: str, slots: Sequence[GresSlot]) -> tuple[str, ...] | None:
    """The atoms of the `gpu` GRES indices `job` holds on `node`; None when an index is not one of
    the node's lines or stands for no atom."""
    found: list[str] = []
    for gres in job.gres:
        if gres.node != node or gres.name != "gpu":
            continue
        for index in gres.indices:
            if not 0 <= index < len(slots) or slots[index].atom_id is None:
                return None
            atom = slots[index].atom_id
            assert atom is not None
            found.append(atom)
    return tuple(found)


def _job_node(job: SlurmJob, nodes: Collection[str]) -> str | None:
    for candidate in (job.required_nodes, job.nodes, *(g.node for g in job.gres)):
        if candidate in nodes:
            return candidate
    return None


def plan_holds(
    *,
    cluster_id: str,
    account: str,
    tenant_of: Mapping[str, str],
    external_tenant: str,
    slots: Mapping[str, Sequence[GresSlot]],
    held: Sequence[Held],
    jobs: Sequence[SlurmJob],
    now: datetime,
    unread: Collection[str] = (),
    replicas: Set[str] = frozenset(),
    rerun: Set[str] = frozenset(),
) -> HoldPlan:
    """What the follower does in one pass over one Slurm cluster (the module says why each).

    `unread` are the cluster's nodes whose GRES lines this pass could not compute: a job on one is
    left as it is (never cancelled, its booking never ended) until a pass can read the node again.
    `replicas`: the allocations whose job's end does not end them (a replica's job ended is followed
    by a new one); `rerun`: those of them whose ended job is to be followed now."""
    type_of = {s.atom_id: s.type for node_slots in slots.values() for s in node_slots if s.atom_id}
    live = {(h.allocation_id, h.node): h for h in held if h.end is None or h.end > now}
    ours_live = {k: h for k, h in live.items() if holdable(h.allocation_id)}
    externals = {h.allocation_id: h for h in live.values() if is_external(h.allocation_id)}

    cancel: list[tuple[int, str]] = []
    end: list[tuple[str, str]] = []
    submit: list[Submit] = []
    rebind: list[Rebind] = []
    book: list[BookExternal] = []
    mirror: list[Mirror] = []
    unplaced: list[str] = []

    # Our jobs by (allocation, node); jobs of others by node.
    mine: dict[tuple[str, str], list[SlurmJob]] = defaultdict(list)
    direct: list[tuple[SlurmJob, str]] = []
    for job in sorted(jobs, key=lambda j: j.job_id):
        if _job_node(job, unread) is not None:
            continue
        node = _job_node(job, slots)
        allocation = allocation_of_job(job.name) if job.account == account else None
        if allocation is not None:
            if node is None or (allocation, node) not in ours_live:
                if not job.finished:
                    cancel.append((job.job_id, f"allocation {allocation} holds nothing on its node"))
                continue
            mine[(allocation, node)].append(job)
        elif node is not None:
            direct.append((job, node))

    # What running jobs hold, by atom: the fence the ledger must follow.
    fixed: dict[str, str] = {}  # atom -> allocation it belongs to
    bound: dict[tuple[str, str], tuple[str, ...]] = {}
    kept: dict[tuple[str, str], SlurmJob] = {}
    for key, candidates in mine.items():
        # The lowest id alive, else the lowest id: a choice every follower makes alike whatever state
        # each read, so two at once cancel the same copies, and a copy cancelled as a second one is
        # never the job whose end ends the allocation.
        alive = [j for j in candidates if not j.finished]
        chosen = alive[0] if alive else candidates[0]
        kept[key] = chosen
        cancel.extend(
            (other.job_id, f"a second holding job for {key[0]} on {key[1]}")
            for other in alive
            if other is not chosen
        )
        if chosen.state == "RUNNING":
            atoms = _atoms_of(chosen, key[1], slots[key[1]])
            if atoms is None:
                unplaced.append(f"job {chosen.job_id} holds a GRES index node {key[1]} has no atom for")
                continue
            bound[key] = atoms
            for atom in atoms:
                fixed[atom] = key[0]
    running_direct: dict[int, tuple[str, tuple[str, ...]]] = {}
    for job, node in direct:
        if job.state != "RUNNING":
            continue
        atoms = _atoms_of(job, node, slots[node])
        if atoms is None:
            unplaced.append(f"job {job.job_id} holds a GRES index node {node} has no atom for")
            continue
        running_direct[job.job_id] = (node, atoms)
        for atom in atoms:
            fixed[atom] = external_allocation_id(cluster_id, job.job_id)

    # Where every live booking sits now, and which atoms are free of any.
    holder: dict[str, str] = {}
    for h in live.values():
        for atom in h.atom_ids:
            holder[atom] = h.allocation_id
    moved: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)

    def free_of_type(node: str, kind: str) -> str | None:
        for slot in slots[node]:
            atom = slot.atom_id
            if atom and slot.type == kind and atom not in holder and atom not in fixed:
                return atom
        return None

    def move(key: tuple[str, str], current: str, target: str) -> None:
        """Move `key`'s booking now on `current` to `target` (recorded from its original atom)."""
        original = next((o for o, now_on in moved[key].items() if now_on == current), current)
        moved[key][original] = target
        if holder.get(current) == key[0]:
            del holder[current]
        holder[target] = key[0]

    # Bound bookings move onto the atoms Slurm gave (a swap with another booking of ours is a move
    # of that one first: it goes to the atom the bound one leaves, and on from there when bound).
    for key, atoms in sorted(bound.items()):
        h = ours_live[key]
        current = set(h.atom_ids)
        wanted = [a for a in atoms if a not in current]
        leaving = [a for a in h.atom_ids if a not in set(atoms)]
        for target in wanted:
            wanted_type = type_of.get(target)
            source = next((a for a in leaving if type_of.get(a) == wanted_type), None)
            if source is None:
                unplaced.append(f"{key[0]}'s job holds {target}, of a type it did not book")
                continue
            leaving.remove(source)
            occupant = holder.get(target)
            if occupant is not None and occupant != key[0]:
                other = next((k for k in ours_live if k[0] == occupant and k[1] == key[1]), None)
                if other is None:
                    unplaced.append(f"{target} is held by {occupant}, not by {key[0]} whose job runs on it")
                    continue
                # The other one takes the atom this one leaves: a pending booking stays there; one
                # whose job runs elsewhere (two jobs started on each other's atoms at once) moves on
                # to its own in its turn, all in the pass's one Rebind transaction.
                move(other, target, source)
            move(key, source, target)

    # Pending bookings on atoms a running job holds move to a free atom of their type.
    for key, h in sorted(ours_live.items()):
        if key in bound:
            continue
        for atom in h.atom_ids:
            here = moved[key].get(atom, atom)
            owner = fixed.get(here)
            if owner is None or owner == key[0]:
                continue
            here_type = type_of.get(here)
            free = free_of_type(key[1], here_type) if here_type else None
            if free is None:
                unplaced.append(
                    f"{key[0]} waits on {here}, which {owner} holds, with no free {here_type} to move to"
                )
                continue
            move(key, here, free)

    # Moves become one Rebind per allocation and node, each source to its final atom.
    for key, moves in sorted(moved.items()):
        pairs = tuple((source, target) for source, target in moves.items() if source != target)
        if pairs:
            rebind.append(Rebind(key[0], key[1], pairs))

    # Jobs for allocations that have none; ends for allocations whose job ended.
    for key, h in sorted(ours_live.items()):
        held_by = kept.get(key)
        if held_by is not None:
            mirror.append(
                Mirror(key[0], key[1], held_by.job_id, held_by.state, held_by.reason, external=False)
            )
        if held_by is not None and held_by.finished and key[0] in replicas and key[0] not in rerun:
            continue  # its end shown for a while before the next job (the follower's back-off)
        if held_by is None or (held_by.finished and key[0] in rerun):
            kinds: dict[str, int] = {}
            for atom in h.atom_ids:
                kind = type_of.get(moved[key].get(atom, atom), "")
                if not kind:
                    unplaced.append(f"{key[0]} holds {atom}, which is no gpu GRES of {key[1]}")
                    break
                kinds[kind] = kinds.get(kind, 0) + 1
            else:
                begin = max(h.start, now)
                limit = None if h.end is None else _seconds_up(h.end - begin)
                submit.append(Submit(key[0], key[1], tuple(kinds.items()), _seconds_up(begin - now), limit))
            continue
        if held_by.finished:
            end.append((key[0], f"its Slurm job {held_by.job_id} ended {held_by.state}"))

    # Jobs submitted directly: booked while they run, ended when they end.
    for job_id, (node, atoms) in sorted(running_direct.items()):
        allocation = external_allocation_id(cluster_id, job_id)
        seen = next(j for j, _ in direct if j.job_id == job_id)
        mirror.append(Mirror(allocation, node, job_id, seen.state, seen.reason, external=True))
        if allocation in externals:
            continue
        blocked = [a for a in atoms if holder.get(a) not in (None, allocation)]
        if blocked:
            unplaced.append(f"job {job_id}'s {blocked[0]} is held by {holder[blocked[0]]} this pass")
            continue
        limit = seen.time_limit_minutes
        book.append(
            BookExternal(
                allocation,
                job_id,
                node,
                tenant_of.get(seen.account, external_tenant),
                atoms,
                now,
                None if limit is None else now + timedelta(minutes=limit),
            )
        )
        for atom in atoms:
            holder[atom] = allocation
    running_ids = {external_allocation_id(cluster_id, j) for j in running_direct}
    end_external = tuple(sorted(a for a in externals if a not in running_ids))
    return HoldPlan(
        submit=tuple(submit),
        cancel=tuple(cancel),
        end=tuple(end),
        rebind=tuple(rebind),
        book_external=tuple(book),
        end_external=end_external,
        mirror=tuple(mirror),
        unplaced=tuple(unplaced),
    )
