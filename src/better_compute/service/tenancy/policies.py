"""Policies: per-reservation limits and placement constraints the fleet admin attaches to a tenant, a
workload, an endpoint or a cluster (rules in `domain.tenancy.iam` and `domain.placement.constraints`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from better_compute.domain.kernel.errors import (
    AlreadyExists,
    ConcurrentChange,
    GenerationMismatch,
    InvalidInput,
    NotFound,
)
from better_compute.domain.tenancy.credentials import Principal, require_admin
from better_compute.domain.tenancy.events import PolicyCreated, PolicyDeleted, PolicyUpdated
from better_compute.domain.tenancy.iam import SUBJECT_TYPES, Policy, parse_policy, updated
from better_compute.domain.tenancy.tenancy import (
    check_name,
    check_ref,
    pool_not_found,
    tenant_not_found,
    tenant_scope,
)
from better_compute.service.kernel.paging import Listing, page
from better_compute.service.kernel.ports import StorePort
from better_compute.service.tenancy.ports import TenancyTx

UPDATE_ATTEMPTS = 3
"""How often an update without a client's `generation` is tried again when another update wins."""


def create(
    store: StorePort[TenancyTx],
    principal: Principal,
    *,
    name: str,
    tenant_id: str | None,
    pool_id: str | None,
    limits: Mapping[str, int | None] | None,
    subject_type: str | None = None,
    subject_id: str | None = None,
    constraints: Mapping[str, Any] | None = None,
    now: datetime,
    new_id: Callable[[], str],
) -> Policy:
    """Create a policy (admin only), named by `new_id()` (`Ids.policy`). `constraints` holds the
    placement constraints by their wire names (`allowedRegions`, ...; `domain.placement.constraints`);
    `limits` None sets no limit. A tenant's policy names are unique, and so are a cluster's: a reused
    one is CONFLICT."""
    require_admin(principal, "policies.create")
    raw: dict[str, Any] = {
        "name": check_name(name, "name", 128),
        "tenantId": None if tenant_id is None else check_ref(tenant_id, "tenantId"),
        "poolId": None if pool_id is None else check_ref(pool_id, "poolId"),
        "subjectType": subject_type,
        "subjectId": subject_id,
        **(constraints or {}),
    }
    if limits is not None:
        raw["limits"] = {k: v for k, v in limits.items() if v is not None}
    policy = parse_policy({k: v for k, v in raw.items() if v is not None})
    with store.begin() as tx:
        return create_in(tx, policy, policy_id=new_id(), now=now)


def create_in(tx: TenancyTx, policy: Policy, *, policy_id: str, now: datetime) -> Policy:
    """Store `policy` (as `domain.tenancy.iam.parse_policy` made it) as `policy_id`, created at `now`, inside
    the caller's transaction, with its event: the one path every new policy takes (a workload's
    `<workload>-placement` policy is created in the workload's own transaction). Its subject, its
    tenant and its pool must exist (NOT_FOUND), and its name be free (CONFLICT)."""
    policy = replace(policy, id=policy_id, created_at=now, generation=1)
    if policy.tenant_id is not None and tx.tenants.hold(policy.tenant_id) is None:
        raise tenant_not_found(policy.tenant_id)
    subject_exists(tx, policy)
    if policy.pool_id is not None and tx.pools.get(policy.pool_id) is None:
        raise pool_not_found(policy.pool_id)
    if not tx.policies.add(policy):
        owner = (
            f"tenant {policy.tenant_id}" if policy.tenant_id is not None else f"cluster {policy.subject_id}"
        )
        raise AlreadyExists(
            f"{owner} already has a policy named {policy.name}",
            {"tenantId": policy.tenant_id, "subjectId": policy.subject_id, "name": policy.name},
        )
    tx.events.append(
        PolicyCreated(policy.id, policy.tenant_id, policy.name, policy.subject_type, policy.subject_id), now
    )
    return policy


def subject_exists(tx: TenancyTx, policy: Policy) -> None:
    """Refuse (NOT_FOUND) a policy whose subject does not exist. A tenant's subject is its tenant
    (checked with the tenant) and a cluster must be known. Endpoints are not yet a resource of
    this server: their refs are taken as given, and the change that adds them adds their check here.
    A workload must exist and be the policy's tenant's."""
    match policy.subject_type:
        case "cluster":
            if tx.clusters.get(policy.subject_id) is None:
                raise NotFound(f"cluster {policy.subject_id} not found", {"clusterId": policy.subject_id})
        case "workload":
            found = tx.workloads.get(policy.subject_id)
            if found is None or found.tenant_id != policy.tenant_id:
                raise NotFound(f"workload {policy.subject_id} not found", {"workloadId": policy.subject_id})
        case "tenant" | "endpoint":
            pass


def list_policies(
    store: StorePort[TenancyTx],
    principal: Principal,
    *,
    tenant_id: str | None = None,
    pool_id: str | None = None,
    subject_type: str | None = None,
    subject: str | None = None,
    limit: int | None = None,
    after: str | None = None,
) -> Listing[Policy]:
    """Policies by tenant, pool and subject; a tenant token sees only its own policies and the
    clusters' (which apply to every tenant)."""
    scope = tenant_scope(principal, tenant_id)
    if subject_type is not None and subject_type not in SUBJECT_TYPES:
        raise InvalidInput(
            f"subjectType must be tenant, endpoint, workload or cluster, not {subject_type[:32]!r}",
            {"field": "subjectType", "accepted": list(SUBJECT_TYPES)},
        )
    subject_id = None if subject is None else check_ref(subject, "subject")
    with store.read() as tx:
        if subject_type == "workload" and subject_id is not None:
            subject_id = _workload_subject(tx, principal, scope, subject_id)
        found = tx.policies.find(
            scope,
            pool_id,
            subject_type=subject_type,
            subject_id=subject_id,
            with_clusters=not principal.is_admin,
        )
    return page(found, lambda p: p.id, limit, after)


def _workload_subject(tx: TenancyTx, principal: Principal, scope: str | None, ref: str) -> str:
    """The workload id a `subject` names: the id itself, or else the one workload of that name the
    principal sees (seed 001 reads a workload's policies by its ref). A name several projects use is
    refused for an admin, as everywhere a workload is named; a name nobody uses stays as given and
    finds nothing. `scope` is the tenant the listing is narrowed to (None: every tenant)."""
    found = tx.workloads.get(ref)
    if found is not None and principal.acts_for(found.tenant_id):
        return ref
    named = [w for w in tx.workloads.named(ref, scope, 2) if principal.acts_for(w.tenant_id)]
    if len(named) > 1:
        raise InvalidInput(
            f"more than one project has a workload named {ref}; give the workload's id",
            {"field": "subject", "name": ref},
        )
    return named[0].id if named else ref


def get(store: StorePort[TenancyTx], principal: Principal, policy_id: str) -> Policy:
    """One policy. A tenant token reads its own tenant's policies and the clusters'; any other is
    NOT_FOUND, as a policy that does not exist."""
    check_ref(policy_id, "id")
    with store.read() as tx:
        found = tx.policies.get(policy_id)
    if found is None or not _visible(principal, found):
        raise _not_found(policy_id)
    return found


def update(
    store: StorePort[TenancyTx],
    principal: Principal,
    policy_id: str,
    *,
    changes: Mapping[str, Any],
    generation: int | None = None,
    now: datetime,
) -> Policy:
    """Replace a policy's limits and/or constraints (admin only; `domain.tenancy.iam.updated` says how
    `changes` apply); its name and subject are fixed. Every update bumps `generation`; one given
    must equal the policy's (compare-and-swap), else CONFLICT. Reservations already admitted stand."""
    require_admin(principal, "policies.update")
    check_ref(policy_id, "id")
    for _ in range(UPDATE_ATTEMPTS):
        with store.begin() as tx:
            old = tx.policies.get(policy_id)
            if old is None:
                raise _not_found(policy_id)
            if generation is not None and generation != old.generation:
                raise _moved(policy_id, generation, old.generation)
            new = replace(updated(old, changes), generation=old.generation + 1)
            if tx.policies.replace(new, old.generation):
                tx.events.append(PolicyUpdated(new.id, new.tenant_id, new.name, new.generation), now)
                return new
        # Another update won between the read and the write.
        if generation is not None:
            raise _moved(policy_id, generation, None)
    raise ConcurrentChange(
        f"policy {policy_id} kept changing under this update; try again", {"id": policy_id}
    )


def delete(store: StorePort[TenancyTx], principal: Principal, policy_id: str, now: datetime) -> Policy:
    """Delete a policy (admin only): reservations admitted from then on are no longer limited by it;
    those it admitted stand. Returns the policy as it was."""
    require_admin(principal, "policies.delete")
    with store.begin() as tx:
        gone = tx.policies.remove(check_ref(policy_id, "id"))
        if gone is None:
            raise _not_found(policy_id)
        tx.events.append(PolicyDeleted(gone.id, gone.tenant_id, gone.name), now)
    return gone


def _visible(principal: Principal, policy: Policy) -> bool:
    return principal.is_admin or policy.tenant_id is None or policy.tenant_id == principal.tenant_id


def _not_found(policy_id: str) -> NotFound:
    return NotFound(f"policy {policy_id} not found", {"id": policy_id})


def _moved(policy_id: str, expected: int, current: int | None) -> GenerationMismatch:
    now = "" if current is None else f" (it is at {current})"
    return GenerationMismatch(
        f"policy {policy_id} is not at generation {expected}{now}; read it again and retry",
        {"id": policy_id, "expected": expected, **({} if current is None else {"current": current})},
    )
