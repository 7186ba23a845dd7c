"""Reservations: admit, choose atoms and book them in one transaction; get, list, cancel, release.

Create follows snapshot -> pure decision -> commit: one read brings the pool, quota rows, policies,
what the tenant holds and the event log's tail for the booking index; `domain` decides (admission,
IAM, quota, choose); one write commits the reservation, its bookings and their events. A tenant's
reservations in one pool are serialised (an advisory lock on PostgreSQL; SQLite has one writer), so
quota is counted on a snapshot that cannot change under it. Different tenants admit in parallel: the
exclusion constraint settles a race for an atom, the booking index catches up, and the request is
decided again, a bounded number of times.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.fleet.bindings import (
    STRANDED,
    BindingState,
    ShownBinding,
    binding_of,
    stranded_reason,
)
from better_compute.domain.fleet.pools import check_duration_allowed
from better_compute.domain.fleet.slurm_holds import Mirror
from better_compute.domain.kernel.errors import (
    AllBusy,
    BookingConflict,
    ConcurrentChange,
    InsufficientCapacity,
    InvalidInput,
    InvalidState,
    NotFound,
    NotInPool,
)
from better_compute.domain.kernel.timewin import Window, parse_duration, parse_instant, window_for
from better_compute.domain.ledger import admission, choose
from better_compute.domain.ledger.commands import Reserve, reserve_of
from better_compute.domain.ledger.events import (
    LedgerExtended,
    LedgerReleased,
    ReservationCancelled,
    ReservationExtended,
    ReservationReleased,
)
from better_compute.domain.ledger.ledger import earliest_free
from better_compute.domain.ledger.records import Reservation
from better_compute.domain.ledger.reservations import (
    ReservationStatus,
    check_cancel,
    check_cursor,
    check_replay,
    extended_end,
    release_end,
    request_fingerprint,
    status_at,
)
from better_compute.domain.ledger.scrub import owed_by, owed_to_others
from better_compute.domain.placement.capability import parse_capability
from better_compute.domain.placement.events import ReservationPreempted
from better_compute.domain.tenancy import iam, quota
from better_compute.domain.tenancy.credentials import Caller, Principal, confirmed, credential_to_confirm
from better_compute.domain.tenancy.tenancy import (
    check_ref,
    pool_not_found,
    sees_pool,
    tenant_not_found,
    tenant_scope,
)
from better_compute.service.kernel.paging import Listing
from better_compute.service.kernel.ports import StorePort
from better_compute.service.kernel.telemetry import SILENT, Telemetry
from better_compute.service.ledger.booking_index import BookingIndex, PoolAtoms
from better_compute.service.ledger.ports import Gradients, KeyTaken, LedgerTx, NotBookable, Overlap
from better_compute.service.placement import capabilities
from better_compute.service.tenancy.credentials import confirm_live
from better_compute.service.tenancy.quotas import quota_lock

MAX_ATTEMPTS = 4


@dataclass(frozen=True)
class ReservationView:
    """A reservation as a use case returns it: its record, the atoms it holds, and its status now."""

    reservation: Reservation
    atoms: list[Atom]
    status: ReservationStatus
    replayed: bool = False
    binding: ShownBinding = "pending"
    """Whether the nodes have handed its atoms over (domain.fleet.bindings); `pending` until one reports,
    `stranded` while it holds an atom it cannot have."""
    binding_detail: str | None = None
    """Why it is `stranded` (`domain.fleet.bindings.stranded_reason`); None otherwise."""
    slurm_jobs: tuple[Mirror, ...] = ()
    """On a Slurm cluster, its holding jobs as the follower last read them (domain.fleet.slurm_holds)."""

    @property
    def id(self) -> str:
        return self.reservation.id


def _tenant_for(caller: Caller, named: str | None) -> str:
    """The tenant a reservation is for: the token's own, or the one an admin names (the visibility
    rule is `tenant_scope`'s: another tenant named by a tenant token is NOT_FOUND). Who the caller
    is settles it, not whether its credential is still live, so a recalled caller will do (a
    refusal from here reaches a revoked token's caller as 401: `credentials.acting_as` confirms the
    token first)."""
    tenant_id = tenant_scope(caller, check_ref(named, "tenantId") if named else None)
    if tenant_id is None:
        raise InvalidInput("tenantId is required with an admin credential", {"field": "tenantId"})
    return tenant_id


def _window(asked: Reserve, now: datetime) -> Window:
    begins = None if asked.start is None else parse_instant(asked.start)
    return window_for(begins, asked.duration, now)


def _waiting_on_slurm(status: ReservationStatus, jobs: Sequence[Mirror]) -> ReservationStatus:
    """On a Slurm cluster a booking binds when its holding job runs (ADR 0015): until every one of
    its jobs runs, a reservation that would read `active` is `scheduled` (its jobs say why)."""
    if status == ReservationStatus.ACTIVE and any(j.state != "RUNNING" for j in jobs):
        return ReservationStatus.SCHEDULED
    return status


def _view(tx: LedgerTx, r: Reservation, now: datetime, *, replayed: bool = False) -> ReservationView:
    atoms = tx.reservations.held_atoms([r.id])[r.id]
    jobs = tuple(tx.slurm_jobs.of_allocations([r.id])[r.id])
    status = _waiting_on_slurm(status_at(Window(r.starts_at, r.ends_at), r.status, now), jobs)
    binding, why = _binding(tx, r, atoms, tx.bindings.of_allocations([r.id])[r.id], status)
    return ReservationView(r, atoms, status, replayed, binding, why, jobs)


def _binding(
    tx: LedgerTx,
    r: Reservation,
    atoms: Sequence[Atom],
    reported: Mapping[str, BindingState],
    status: ReservationStatus,
) -> tuple[ShownBinding, str | None]:
    """The reservation's binding, and why when it is `stranded`: a reservation not over yet that
    holds an atom it cannot have (`domain.fleet.bindings.stranded_reason`), whatever its nodes said."""
    if status in (ReservationStatus.SCHEDULED, ReservationStatus.ACTIVE):
        held = [a for a in atoms if not (a.present and a.bookable and a.pool_id == r.pool_id)]
        if held:  # rare: the GPUs' health is read only then
            gpus = {a.gpu_id for a in held}
            unhealthy = {
                g.id
                for g in tx.gpus.of_nodes(sorted({a.node for a in held}))
                if g.id in gpus and not g.healthy
            }
            why = stranded_reason(held, r.pool_id, unhealthy)
            if why is not None:
                return STRANDED, why
    return binding_of(reported, {a.node for a in atoms}), None


Gradient = Callable[[Container[str]], choose.FragmentationGrowth]
"""The pool's fragmentation gradient over the free capacity that the atoms taken leave
(`Gradients.of_pool`)."""


def _decide(
    pool_atoms: PoolAtoms,
    requests: list[admission.DeviceRequest],
    busy_ids: set[str],
    gradient: Gradient | None = None,
) -> tuple[choose.Chosen | choose.NoFit, dict[str, Atom]]:
    """Choose among the pool's atoms that are not in `busy_ids`; also returns the atoms that were
    considered, by id. `gradient`, when given, breaks rule 2's ties between GPUs by the pool's
    recorded request sizes (over the free capacity `busy_ids` leaves)."""
    busy_by_gpu: Counter[str] = Counter(pool_atoms.atoms[a].gpu_id for a in busy_ids if a in pool_atoms.atoms)
    total = sum(request.count for request in requests)
    shortlisted: dict[str, Atom] = {}
    for request in requests:
        matching = pool_atoms.matching_by_gpu(request)
        for atom in choose.shortlist(request, matching, busy_ids, busy_by_gpu, count=total):
            shortlisted[atom.id] = atom
    growth = None if gradient is None else gradient(busy_ids)
    return choose.choose(requests, list(shortlisted.values()), busy_by_gpu, fragmentation=growth), shortlisted


def _refusal(
    index: BookingIndex,
    pool_atoms: PoolAtoms,
    requests: list[admission.DeviceRequest],
    window: Window,
    pool_id: str,
    decision: choose.NoFit,
    gradient: Gradient | None = None,
) -> InsufficientCapacity:
    """NOT_IN_POOL when some request could not be served even by an empty pool (choose.never_fits;
    atoms of cordoned nodes are not counted, and the message says how many there are), else
    ALL_BUSY with the earliest start. Counting what matches reads the per-shape matching atoms
    `_decide` has just grouped (cached), so a refusal costs no pass over the pool."""
    in_pool = [sum(len(a) for a in pool_atoms.matching_by_gpu(r).values()) for r in requests]
    cordoned = [pool_atoms.cordoned_matching(r) for r in requests]
    # a `sameGpu` line for more slots than any GPU of the pool has can never be served
    most = [
        max(map(len, pool_atoms.matching_by_gpu(r).values()), default=0) if r.same_gpu else r.count
        for r in requests
    ]
    never = choose.never_fits(requests, in_pool, pool_atoms.kinds(), pool_id, cordoned, most)
    if never is not None:
        return NotInPool(
            never.message,
            {
                "request": never.request_index,
                "field": never.field,
                "wanted": never.wanted,
                "inPool": never.available,
                **({"cordoned": never.cordoned} if never.cordoned else {}),
                "earliestStart": None,
            },
        )
    earliest = _earliest(index, pool_atoms, requests, window, gradient)
    off = cordoned[decision.request_index]
    return AllBusy(
        decision.message
        + choose.cordoned_note(off)
        + (f"; the earliest start at which it could be served is {earliest}" if earliest else ""),
        {
            "request": decision.request_index,
            "field": decision.field,
            "wanted": decision.wanted,
            "available": decision.available,
            **({"cordoned": off} if off else {}),
            "earliestStart": earliest,
        },
    )


EARLIEST_TRIALS = 8
"""How many starts a reservation of several requests is tried at to find its earliest start."""


def _earliest(
    index: BookingIndex,
    pool_atoms: PoolAtoms,
    requests: list[admission.DeviceRequest],
    window: Window,
    gradient: Gradient | None = None,
) -> str | None:
    """The earliest start at which the whole reservation could be served, when one is known: the
    first of `choose.starts_to_try` at which choosing for all of its requests succeeds (the first
    one, for a reservation of one request), choosing as admission would then (with `gradient`)."""
    shapes = {(r.cls, r.selector, r.count): r for r in requests}  # requests alike are looked at once
    needs = [
        ([a.id for atoms in pool_atoms.matching_by_gpu(r).values() for a in atoms], r.count)
        for r in shapes.values()
    ]
    windows = index.windows_of(list(dict.fromkeys(a for ids, _ in needs for a in ids)), pool_atoms.atoms)
    # A lone request's earliest start is when enough of its atoms are free at all; one that wants
    # them on one GPU is tried at each start, like a reservation of several, since free atoms on
    # different GPUs do not serve it.
    single = len(requests) == 1 and not requests[0].same_gpu
    try:
        starts = choose.starts_to_try(
            windows, needs, window.duration, window.start, 1 if single else EARLIEST_TRIALS
        )
        for start in starts:
            if single:
                return start.isoformat()
            then = Window(start, None if window.duration is None else start + window.duration)
            decision, _ = _decide(pool_atoms, requests, index.taken(index.busy(then), pool_atoms), gradient)
            if isinstance(decision, choose.Chosen):
                return start.isoformat()
    except OverflowError:  # past the year 9999
        return None
    return None


def _replayed(
    store: StorePort[LedgerTx], caller: Caller, tenant_id: str, key: str, fingerprint: str, now: datetime
) -> ReservationView | None:
    """The first reservation made with `key`, for a retry whose start has passed (admission's own
    read is not made then, so a remembered token's credential is confirmed live here)."""
    with store.read() as tx:
        confirm_live(tx, caller)
        found = tx.reservations.by_key(tenant_id, key)
        if found is None:
            return None
        check_replay(key, found.fingerprint, fingerprint)
        return _view(tx, found, now, replayed=True)


@dataclass(frozen=True)
class _Admitting:
    """A reservation request checked as far as it can be without the store: what `_create_in` decides
    on, attempt after attempt."""

    asked: Reserve
    tenant_id: str
    pool_id: str
    requests: list[admission.DeviceRequest]
    by_capability: bool
    window: Window
    key: str | None
    fingerprint: str
    gradients: Gradients | None = None


def create(
    store: StorePort[LedgerTx],
    index: BookingIndex,
    caller: Caller,
    request: Reserve | Mapping[str, Any],
    now: datetime,
    new_id: Callable[[], str],
    *,
    telemetry: Telemetry = SILENT,
    gradients: Gradients | None = None,
) -> ReservationView:
    """Admit and book a reservation, or return the first one made with the same idempotency key.

    `request` is the command the API built from its wire model, or the request as JSON, read here
    (`domain.ledger.commands.reserve_of`). `caller` may be a remembered token's `RecalledPrincipal`:
    admission's read confirms its credential is live, in the transaction that decides, at no cost of
    its own. Each booking the ledger refuses for an atom taken first is reported to `telemetry` before
    it is decided again. `gradients`, the server's (`Services.gradients`), makes the choice between
    GPUs equal by rule 2 fragmentation-aware (docs/concepts.md#reservations); without it such ties
    go to the smallest ids."""
    asked = request if isinstance(request, Reserve) else reserve_of(request)
    tenant_id = _tenant_for(caller, asked.tenant_id)
    pool_id = check_ref(asked.pool_id, "poolId")
    by_capability = capability_lines(asked.devices)
    requests = admission.parse_device_requests(
        [_stand_in(line) for line in asked.devices] if by_capability else asked.devices
    )
    key = check_ref(asked.idempotency_key, "idempotencyKey") if asked.idempotency_key else None
    fingerprint = request_fingerprint(asked.as_sent(tenant_id))
    try:
        window = _window(asked, now)
    except InvalidInput:
        # A retry may come after its `start` has passed: the first reservation still answers it.
        first = _replayed(store, caller, tenant_id, key, fingerprint, now) if key else None
        if first is None:
            raise
        return first
    admitting = _Admitting(
        asked, tenant_id, pool_id, requests, by_capability, window, key, fingerprint, gradients
    )
    index.forget_ended(now)
    for attempt in range(MAX_ATTEMPTS):
        claims: list[str] = []
        committed = False
        try:
            with store.begin() as tx:
                view = _create_in(tx, index, caller, admitting, now, new_id, claims)
            committed = True
            return view
        except Overlap as clash:
            telemetry.ledger_conflict()
            if attempt == MAX_ATTEMPTS - 1:
                raise BookingConflict(clash.atom_id or "unknown", None) from None
            with store.read() as tx:
                if attempt == 0:
                    index.sync(tx)  # usually a booking that committed a moment ago
                else:
                    index.reload(tx)  # twice behind: rebuild the index from the ledger itself
        except NotBookable as gone:
            # An atom chosen stopped being bookable (a pool change, a node report) between the read
            # and the commit: nothing was written; the index learns the change and chooses again.
            if attempt == MAX_ATTEMPTS - 1:
                raise ConcurrentChange(
                    f"the atoms of pool {pool_id} kept changing while this reservation was admitted; retry",
                    {"poolId": pool_id, "atomIds": gone.atom_ids[:20]},
                ) from None
            index.forget_pool(pool_id)
            with store.read() as tx:
                index.sync(tx)
        except KeyTaken:
            # Another request with this key won the race; the next attempt replays its reservation.
            if attempt == MAX_ATTEMPTS - 1:
                raise ConcurrentChange(
                    f"idempotencyKey {key!r} is in use by a concurrent request; retry"
                ) from None
        finally:
            index.release(claims, committed)
    raise AssertionError("unreachable")


def _create_in(
    tx: LedgerTx,
    index: BookingIndex,
    caller: Caller,
    admitting: _Admitting,
    now: datetime,
    new_id: Callable[[], str],
    claims: list[str],
) -> ReservationView:
    tenant_id, pool_id, window = admitting.tenant_id, admitting.pool_id, admitting.window
    key, requests, devices = admitting.key, admitting.requests, admitting.asked.devices
    # Quota is per tenant and pool: its check and the booking must not interleave with another
    # reservation of the same tenant in the pool. Other tenants go ahead; atoms they race for are
    # settled by the exclusion constraint (and, within this process, by claims).
    read = index.prepare(tx)
    snap = tx.reservations.snapshot(
        tenant_id,
        pool_id,
        key,
        read,
        lock_key=quota_lock(tenant_id, pool_id),
        credential_id=credential_to_confirm(caller),
    )
    principal = confirmed(caller, snap.credential_live)
    index.apply(tx, read, snap.events, snap.newest_event, snap.log)
    if snap.replay_id is not None:
        first = tx.reservations.get(snap.replay_id)
        assert first is not None
        assert key is not None
        check_replay(key, first.fingerprint, admitting.fingerprint)
        return _view(tx, first, now, replayed=True)
    # A pool the tenant may not see answers exactly as a pool that does not exist: nothing after this
    # (its sharing mode, the tenant's quota there) may tell the two apart.
    owner, mode = snap.pool_owner, snap.pool_mode
    if (
        owner is None
        or mode is None
        or not sees_pool(principal, owner, {pool_id} if snap.limits else (), pool_id)
    ):
        raise pool_not_found(pool_id)
    if not snap.tenant_exists:
        raise tenant_not_found(tenant_id)
    if admitting.by_capability:
        # resolved only now that the pool is known to be the tenant's to see: a kind the pool has
        # is never told to a tenant that may not use it
        offers = capabilities.pool_offers(tx, index, pool_id, tenant_id, owner, snap.limits, now)
        lines, _ = capabilities.device_lines(devices, offers)
        requests = admission.parse_device_requests(lines)
        devices = tuple(lines)
    admission.check_against_pool(mode, requests)
    check_duration_allowed(pool_id, snap.pool_max_duration, window.duration)
    requested: dict[str, int] = {str(k): v for k, v in admission.requested_by_class(requests).items()}
    gpu_count, gpu_slices = iam.reservation_counts(requested)
    iam.check_policies(snap.policies, pool_id, gpu_count, gpu_slices, tenant_id=tenant_id)
    # Under the tenant's lock and caught up with the log, the index knows everything the tenant holds.
    busy = index.busy(window)
    held = index.held(tenant_id, pool_id, busy, window)
    quota.check_quota(tenant_id, owner, snap.limits, held, requested, pool_id=pool_id)

    pool_atoms = index.pool_atoms(tx, pool_id)
    # In a pool that scrubs between tenants, atoms another tenant left and the node has not scrubbed
    # since are not this tenant's to have (domain.ledger.scrub); asked of the database, in this
    # transaction, since no index holds when a booking ended with time. The commit re-checks them
    # under the atoms' locks against a release racing this admission.
    scrub = snap.pool_scrub not in (None, "none")
    owed = (
        owed_to_others(owed_by(tx.atoms.ended_unscrubbed(now, pool_id=pool_id), now), tenant_id)
        if scrub
        else set()
    )
    # Every live booking of a GPU's family counts, whole and parts, bookable now or not: an atom
    # is taken by a booking of its GPU's parent, or of a part of another kind, as by its own.
    taken = index.taken(busy, pool_atoms)
    # Only now that the pool is known to exist and be the tenant's to see: a pool id nobody has
    # costs no read of a record, and keeps no room in it.
    gradients = admitting.gradients
    gradient = None if gradients is None else gradients.of_pool(pool_id, pool_atoms, now)
    decision, shortlisted = _decide(pool_atoms, requests, taken | index.claimed() | owed, gradient)
    if isinstance(decision, choose.NoFit):
        raise _refusal(index, pool_atoms, requests, window, pool_id, decision, gradient)
    claims.extend(decision.atom_ids)
    index.claim(decision.atom_ids)
    reservation = Reservation(
        id=new_id(),
        tenant_id=tenant_id,
        pool_id=pool_id,
        status=ReservationStatus.SCHEDULED.value,
        starts_at=window.start,
        ends_at=window.end,
        devices=tuple(devices),
        gpu_count=gpu_count,
        gpu_slices=gpu_slices,
        counts=requested,
        fingerprint=admitting.fingerprint,
        created_at=now,
        idempotency_key=key,
        preemptible=bool(admitting.asked.preemptible),
    )
    tx.reservations.commit(reservation, decision.atom_ids, now, scrub=scrub)
    atoms = [shortlisted[a] for a in decision.atom_ids]
    return ReservationView(reservation, atoms, status_at(window, reservation.status, now))


CAPABILITY_LINE_FIELDS = frozenset({"capability", "count", "sharing"})


def capability_lines(lines: object) -> bool:
    """Whether some of a reservation's device lines ask by capability (each such line is checked:
    `capability` instead of `class` and `selector`, with `count` and `sharing`)."""
    if not isinstance(lines, Sequence) or isinstance(lines, str | bytes):
        return False
    asked = False
    for i, line in enumerate(lines):
        if not isinstance(line, Mapping) or line.get("capability") is None:
            continue
        asked = True
        stray = sorted(str(k) for k in line if k not in CAPABILITY_LINE_FIELDS)
        if stray:
            raise InvalidInput(
                f"devices[{i}].{stray[0]}: a line asked by capability takes capability, count and sharing"
                " (the capability chooses the class)",
                {"field": f"devices[{i}].{stray[0]}"},
            )
        parse_capability(line["capability"], f"devices[{i}].capability")
    return asked


def _stand_in(line: object) -> object:
    """What a line asked by capability is checked as before it is resolved: its count and sharing."""
    if isinstance(line, Mapping) and line.get("capability") is not None:
        return {"class": "gpu", **{k: v for k, v in line.items() if k != "capability"}}
    return line


def preempt_in(tx: LedgerTx, reservation: Reservation, preemptor_id: str, why: str, now: datetime) -> None:
    """End a preemptible reservation now for the workload `preemptor_id` (the caller holds its
    tenant's quota lock and read it in this transaction): it is `released`, as by its tenant (or
    `cancelled` when it starts now), the rest of its window frees, and `reservation.preempted`
    says who and why."""
    _end_now(tx, reservation, now)
    tx.events.append(ReservationPreempted(reservation.id, reservation.tenant_id, preemptor_id, why), now)


def _visible(tx: LedgerTx, principal: Principal, reservation_id: str) -> Reservation:
    found = tx.reservations.get(reservation_id)
    if found is None or not principal.acts_for(found.tenant_id):
        raise NotFound(f"reservation {reservation_id} not found", {"id": reservation_id})
    return found


def get(
    store: StorePort[LedgerTx], principal: Principal, reservation_id: str, now: datetime
) -> ReservationView:
    with store.read() as tx:
        return _view(tx, _visible(tx, principal, reservation_id), now)


def list_reservations(
    store: StorePort[LedgerTx],
    principal: Principal,
    now: datetime,
    *,
    tenant_id: str | None = None,
    pool_id: str | None = None,
    status: str | None = None,
    limit: int = 100,
    cursor: str | None = None,
) -> Listing[ReservationView]:
    """A page of reservations, newest first (ids are time-ordered); `cursor` is the last id of the
    previous page, and the page holds only older ones. A tenant sees only its own (`tenant_scope`).
    One item more than the page is looked for, so a cursor is given only when a next page exists."""
    if cursor is not None:
        check_cursor(cursor)
    tenant_id = tenant_scope(principal, tenant_id or None)
    out: list[ReservationView] = []
    after = cursor
    wanted = limit + 1
    with store.read() as tx:
        while len(out) < wanted:
            batch = tx.reservations.page(tenant_id or None, pool_id or None, wanted, after)
            if not batch:
                break
            held = tx.reservations.held_atoms([r.id for r in batch])
            reported = tx.bindings.of_allocations([r.id for r in batch])
            jobs = tx.slurm_jobs.of_allocations([r.id for r in batch])
            for r in batch:
                mine = tuple(jobs[r.id])
                shown = _waiting_on_slurm(status_at(Window(r.starts_at, r.ends_at), r.status, now), mine)
                binding, why = _binding(tx, r, held[r.id], reported[r.id], shown)
                view = ReservationView(
                    r, held[r.id], shown, binding=binding, binding_detail=why, slurm_jobs=mine
                )
                if status is None or view.status.value == status:
                    out.append(view)
                    if len(out) == wanted:
                        break
            after = batch[-1].id
            if len(batch) < wanted:
                break
    page = out[:limit]
    return Listing(page, page[-1].id if len(out) > limit and page else None)


def _bump(tx: LedgerTx, r: Reservation, status: ReservationStatus, ends_at: datetime | None) -> Reservation:
    """Write a new status and end if nobody changed the reservation since it was read (its
    generation); returns the reservation as written."""
    if not tx.reservations.compare_and_set(r.id, r.generation, status.value, ends_at):
        raise ConcurrentChange(f"reservation {r.id} changed while this request ran; retry", {"id": r.id})
    return replace(r, status=status.value, ends_at=ends_at, generation=r.generation + 1)


def cancel(
    store: StorePort[LedgerTx], principal: Principal, reservation_id: str, now: datetime
) -> ReservationView:
    """Cancel before the start: the whole window frees."""
    with store.begin() as tx:
        r = _visible(tx, principal, reservation_id)
        tx.reservations.lock(quota_lock(r.tenant_id, r.pool_id))
        check_cancel(Window(r.starts_at, r.ends_at), r.status, now)
        tx.ledger.cancel_allocation(reservation_id, now)
        r = _bump(tx, r, ReservationStatus.CANCELLED, r.ends_at)
        tx.events.append(ReservationCancelled(reservation_id, now), now)
        return ReservationView(r, [], ReservationStatus.CANCELLED)


def release(
    store: StorePort[LedgerTx], principal: Principal, reservation_id: str, now: datetime
) -> ReservationView:
    """End an active reservation now; the rest of its window frees for others."""
    with store.begin() as tx:
        r = _visible(tx, principal, reservation_id)
        tx.reservations.lock(quota_lock(r.tenant_id, r.pool_id))
        r = _end_now(tx, r, release_end(Window(r.starts_at, r.ends_at), r.status, now))
        if r.status == ReservationStatus.CANCELLED:
            return ReservationView(r, [], ReservationStatus.CANCELLED)
        return _view(tx, r, now)


def _end_now(tx: LedgerTx, reservation: Reservation, now: datetime) -> Reservation:
    """End a started reservation at `now` (the caller holds its tenant's quota lock): `released`,
    the rest of its window freed; or `cancelled`, the whole window freed, when it starts at `now`
    (nothing of it has run, and a window that ends as it starts is no window)."""
    if reservation.starts_at >= now:
        tx.ledger.cancel_allocation(reservation.id, now)
        reservation = _bump(tx, reservation, ReservationStatus.CANCELLED, reservation.ends_at)
        tx.events.append(ReservationCancelled(reservation.id, now), now)
        return reservation
    tx.ledger.end_allocation(reservation.id, now, LedgerReleased(reservation.id, now))
    reservation = _bump(tx, reservation, ReservationStatus.RELEASED, now)
    tx.events.append(ReservationReleased(reservation.id, now), now)
    return reservation


def end_in(tx: LedgerTx, reservation_id: str, now: datetime) -> bool:
    """End a reservation whose Slurm holding job ended, in the caller's transaction (the Slurm
    follower): released now, as its tenant's release would, or cancelled when it had not started;
    False when it was over already."""
    found = tx.reservations.get(reservation_id)
    if found is None:
        return False
    tx.reservations.lock(quota_lock(found.tenant_id, found.pool_id))
    r = tx.reservations.get(reservation_id)  # again, under its tenant's lock
    if r is None or status_at(Window(r.starts_at, r.ends_at), r.status, now) not in (
        ReservationStatus.SCHEDULED,
        ReservationStatus.ACTIVE,
    ):
        return False
    _end_now(tx, r, now)
    return True


def extend(
    store: StorePort[LedgerTx],
    index: BookingIndex,
    principal: Principal,
    reservation_id: str,
    duration: str,
    now: datetime,
    *,
    telemetry: Telemetry = SILENT,
) -> ReservationView:
    """Move a scheduled or active reservation's end later by `duration`, on the atoms it holds.

    Under the tenant's quota lock (as admission takes it), the added time is checked against the
    tenant's quota like a new reservation of the same devices; whether the atoms are free then is
    the ledger's to decide, in the same write (PostgreSQL's exclusion constraint), so an extension
    racing another booking of the same atom loses cleanly: BookingConflict, naming the atom and when
    it is free again."""
    by = parse_duration(duration)
    added: Window | None = None
    try:
        with store.begin() as tx:
            r = _visible(tx, principal, reservation_id)
            read = index.prepare(tx)
            snap = tx.reservations.snapshot(
                r.tenant_id, r.pool_id, None, read, lock_key=quota_lock(r.tenant_id, r.pool_id)
            )
            index.apply(tx, read, snap.events, snap.newest_event, snap.log)
            current = tx.reservations.get(reservation_id)  # as it is under the lock
            assert current is not None
            r = current
            if tx.slurm_jobs.of_allocations([r.id])[r.id]:
                # Its holding job's time limit is Slurm's: a longer booking would outlive the job,
                # and the follower ends a booking whose job ended (docs/slurm.md).
                raise InvalidState(
                    f"reservation {r.id} is held by a Slurm job whose time limit cannot be moved yet;"
                    " reserve again for the added time",
                    {"id": r.id, "reason": "slurm_hold"},
                )
            window = Window(r.starts_at, r.ends_at)
            end = extended_end(window, r.status, by, now)
            check_duration_allowed(r.pool_id, snap.pool_max_duration, end - r.starts_at)
            assert r.ends_at is not None
            added = Window(r.ends_at, end)
            held = index.held(r.tenant_id, r.pool_id, index.busy(added), added)
            if snap.pool_owner is not None:
                quota.check_quota(
                    r.tenant_id, snap.pool_owner, snap.limits, held, dict(r.counts), pool_id=r.pool_id
                )
            tx.ledger.extend_allocation(r.id, end, LedgerExtended(r.id, end), now)
            tx.events.append(ReservationExtended(r.id, end), now)
            r = _bump(tx, r, ReservationStatus(r.status), end)
            return _view(tx, r, now)
    except Overlap as clash:
        telemetry.ledger_conflict()
        assert added is not None  # only the ledger's write raises Overlap
        raise _extension_conflict(store, reservation_id, added, clash.atom_id) from None


def _extension_conflict(
    store: StorePort[LedgerTx], reservation_id: str, added: Window, hint: str | None
) -> BookingConflict:
    """The refusal of an extension: the first atom of the reservation booked by someone else in the
    added time, until when the reservation could be extended, and when that atom is free again."""
    with store.read() as tx:
        atoms = [a.id for a in tx.reservations.held_atoms([reservation_id])[reservation_id]]
        for atom_id in [hint, *atoms] if hint else atoms:
            # Its own bookings and its GPU family's: the whole GPU and its parts exclude each other.
            busy = [b for b in tx.ledger.taking_spans([atom_id], added.start) if b.overlaps(added)]
            if busy:
                until = min(b.start for b in busy)
                free = earliest_free(busy, added)
                return BookingConflict(
                    atom_id,
                    free,
                    f"atom {atom_id} is booked by another reservation from {until.isoformat()}; "
                    f"the reservation can be extended to {until.isoformat()} at most"
                    + (f", or the atom is free again from {free.isoformat()}" if free else ""),
                )
    return BookingConflict(hint or "unknown", added.start)
