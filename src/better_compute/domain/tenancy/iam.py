"""IAM policies on reservations: per-reservation limits on whole GPUs and on fractions; and the
placement constraints the same policies may carry (`domain.placement.constraints`).

The rule as users read it: docs/concepts.md#quotas-iam-policies-and-tenancy.

A policy is attached to a subject: a tenant (in every pool or in one), a workload, an endpoint or a
cluster. A tenant's policy may cap what a single reservation may ask for: `gpuCount` counts whole
`gpu` atoms, `gpuSlices` counts fractional atoms (`gpu.mig` and `gpu.slot`). They are kept apart
because a seventh of a GPU is not a GPU: a policy written as "at most 2 GPUs per reservation" must
not refuse a notebook asking for three MIG slices, so a `gpuCount` limit never counts slices.
Policies are cumulative: every one that applies must pass. A policy that sets only placement
constraints limits no reservation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from better_compute.domain.kernel.errors import Forbidden, InvalidInput
from better_compute.domain.placement.constraints import CONSTRAINT_KEYS, Constraints, parse_constraints
from better_compute.domain.tenancy.quota import check_limit
from better_compute.domain.tenancy.tenancy import check_ref

LimitKey = Literal["gpuCount", "gpuSlices"]
LIMIT_KEYS: tuple[LimitKey, ...] = ("gpuCount", "gpuSlices")

SubjectType = Literal["tenant", "endpoint", "workload", "cluster"]
SUBJECT_TYPES: tuple[SubjectType, ...] = ("tenant", "endpoint", "workload", "cluster")
"""What a policy is attached to. A tenant's, a workload's and an endpoint's policy belong to that
tenant (the workload's or endpoint's); a cluster's belongs to no tenant and applies to every tenant
placing in the cluster."""

MAX_SUBJECT = 64
"""The longest subject id a policy stores (the `policies.subject_id` column)."""

_POLICY_FIELDS = frozenset(
    {"name", "tenantId", "poolId", "limits", "subjectType", "subjectId", *CONSTRAINT_KEYS}
)
_NOTHING_SET = (
    "a policy must set limits (gpuCount, gpuSlices), placement constraints (allowedRegions, "
    "allowedResidencies, allowedDeviceClasses, allowedClusters, deniedClusters, costCeiling) or both"
)


@dataclass(frozen=True)
class Policy:
    """Limits per reservation and/or placement constraints, attached to a subject; `pool_id` None
    applies in every pool. A stored policy has its `id`, creation time and `generation` (bumped by
    every update); one being parsed has no id or time yet.

    `tenant_id` is the tenant the policy belongs to (None for a cluster's policy). A tenant's policy
    built without `subject_id` has its tenant for subject."""

    name: str
    tenant_id: str | None
    pool_id: str | None = None
    gpu_count: int | None = None
    gpu_slices: int | None = None
    id: str = ""
    created_at: datetime | None = None
    constraints: Constraints = field(default_factory=Constraints)
    subject_type: SubjectType = "tenant"
    subject_id: str = ""
    generation: int = 1

    def __post_init__(self) -> None:
        if not self.subject_id and self.subject_type == "tenant" and self.tenant_id:
            object.__setattr__(self, "subject_id", self.tenant_id)

    def limits(self) -> dict[str, int]:
        """The limits it sets, as the wire and the store spell them."""
        pairs = (("gpuCount", self.gpu_count), ("gpuSlices", self.gpu_slices))
        return {k: v for k, v in pairs if v is not None}

    def applies_to(self, pool_id: str, tenant_id: str | None = None) -> bool:
        if tenant_id is not None and self.tenant_id != tenant_id:
            return False
        return self.pool_id is None or self.pool_id == pool_id

    def limit(self, key: LimitKey) -> int | None:
        return self.gpu_count if key == "gpuCount" else self.gpu_slices

    def as_mapping(self) -> dict[str, Any]:
        """The policy as `parse_policy` reads it (what `updated` starts from)."""
        out: dict[str, Any] = {
            "name": self.name,
            "subjectType": self.subject_type,
            "subjectId": self.subject_id,
            **self.constraints.as_mapping(),
        }
        if self.tenant_id is not None:
            out["tenantId"] = self.tenant_id
        if self.pool_id is not None:
            out["poolId"] = self.pool_id
        if self.limits():
            out["limits"] = self.limits()
        return out


def parse_policy(raw: object) -> Policy:
    """A policy from `{name, tenantId?, poolId?, subjectType?, subjectId?, limits?, <constraints>}`.

    Without `subjectType` the policy is a tenant's (`tenantId`'s, as it always was). A workload's or
    an endpoint's policy names its subject and the subject's tenant (`tenantId`); a cluster's names
    the cluster and no tenant. Limits cap a tenant's reservations, so only a tenant's policy may set
    them (and `poolId`, which scopes them). At least one limit or one constraint is required: a
    policy that does nothing is a mistake worth telling.
    """
    if not isinstance(raw, Mapping):
        raise InvalidInput("policy must be an object with name, tenantId and limits", {"field": "policy"})
    unknown = sorted(str(k) for k in raw if k not in _POLICY_FIELDS)
    if unknown:
        raise InvalidInput(
            f"{unknown[0]}: unknown field; use name, tenantId, poolId, subjectType, subjectId, limits"
            f" or a placement constraint ({', '.join(CONSTRAINT_KEYS)})",
            {"field": unknown[0]},
        )
    name = _text(raw.get("name"), "name")
    subject_type = _subject_type(raw.get("subjectType"))
    tenant_id, subject_id = _subject(raw, subject_type)
    pool_raw = raw.get("poolId")
    pool_id = None if pool_raw is None else _text(pool_raw, "poolId")
    if pool_id is not None and subject_type != "tenant":
        raise InvalidInput(
            f"poolId scopes a tenant's limits; a {subject_type} policy takes no poolId", {"field": "poolId"}
        )
    limits = raw.get("limits")
    values: dict[LimitKey, int | None] = dict.fromkeys(LIMIT_KEYS)
    if limits is not None:
        values = _limits(limits)
        if subject_type != "tenant":
            raise InvalidInput(
                f"limits cap a tenant's reservations; a {subject_type} policy may set placement"
                " constraints only",
                {"field": "limits"},
            )
    constraints = parse_constraints(raw)
    if all(v is None for v in values.values()) and constraints.is_empty():
        raise InvalidInput(_NOTHING_SET, {"field": "limits"})
    return Policy(
        name,
        tenant_id,
        pool_id,
        values["gpuCount"],
        values["gpuSlices"],
        constraints=constraints,
        subject_type=subject_type,
        subject_id=subject_id,
    )


def updated(policy: Policy, changes: Mapping[str, Any]) -> Policy:
    """`policy` with its limits and/or constraints replaced (`policies.update`): `limits` replaces
    every limit (null removes them), a constraint given replaces that constraint (null or an empty
    list removes it), and what is not given is kept. Its name and subject are fixed; the result
    must still set something, as a new policy must. The generation is the caller's to bump."""
    fixed = sorted(str(k) for k in changes if k not in ("limits", *CONSTRAINT_KEYS))
    if fixed:
        raise InvalidInput(
            f"{fixed[0]}: a policy's name, subject, tenant and pool are fixed; change limits or"
            " constraints, or delete the policy and create another",
            {"field": fixed[0]},
        )
    merged = {**policy.as_mapping(), **changes}
    parsed = parse_policy({k: v for k, v in merged.items() if v is not None})
    return Policy(
        parsed.name,
        policy.tenant_id,
        policy.pool_id,
        parsed.gpu_count,
        parsed.gpu_slices,
        id=policy.id,
        created_at=policy.created_at,
        constraints=parsed.constraints,
        subject_type=policy.subject_type,
        subject_id=policy.subject_id,
        generation=policy.generation,
    )


def _subject_type(raw: object) -> SubjectType:
    if raw is None:
        return "tenant"
    if raw not in SUBJECT_TYPES:
        raise InvalidInput(
            f"subjectType must be tenant, endpoint, workload or cluster, not {str(raw)[:32]!r}",
            {"field": "subjectType", "accepted": list(SUBJECT_TYPES)},
        )
    return raw


def _subject(raw: Mapping[Any, Any], subject_type: SubjectType) -> tuple[str | None, str]:
    """(the tenant the policy belongs to, its subject id)."""
    subject_raw, tenant_raw = raw.get("subjectId"), raw.get("tenantId")
    subject = None if subject_raw is None else _ref(subject_raw, "subjectId")
    if subject_type == "tenant":
        if tenant_raw is None and subject is not None:
            return subject, subject
        tenant = _text(tenant_raw, "tenantId")
        if subject is not None and subject != tenant:
            raise InvalidInput(
                f"subjectId names tenant {subject} but tenantId names {tenant}; a tenant's policy"
                " belongs to that tenant",
                {"field": "subjectId"},
            )
        return tenant, tenant
    if subject is None:
        raise InvalidInput(
            f"subjectId must name the {subject_type} the policy is attached to", {"field": "subjectId"}
        )
    if subject_type == "cluster":
        if tenant_raw is not None:
            raise InvalidInput(
                "tenantId: a cluster's policy belongs to no tenant (it applies to every tenant placing in"
                " the cluster); leave tenantId out",
                {"field": "tenantId"},
            )
        return None, subject
    if tenant_raw is None:
        raise InvalidInput(
            f"tenantId must name the tenant of {subject_type} {subject}", {"field": "tenantId"}
        )
    return _text(tenant_raw, "tenantId"), subject


def _limits(limits: object) -> dict[LimitKey, int | None]:
    if not isinstance(limits, Mapping):
        raise InvalidInput("limits must be an object with gpuCount and/or gpuSlices", {"field": "limits"})
    unknown = sorted(str(k) for k in limits if k not in LIMIT_KEYS)
    if unknown:
        raise InvalidInput(
            f"limits.{unknown[0]}: unknown limit; use gpuCount (whole GPUs) or gpuSlices (fractions)",
            {"field": f"limits.{unknown[0]}"},
        )
    values = {key: _limit(limits.get(key), f"limits.{key}") for key in LIMIT_KEYS}
    if all(v is None for v in values.values()):
        raise InvalidInput("limits must set gpuCount, gpuSlices or both", {"field": "limits"})
    return values


def _ref(raw: object, field: str) -> str:
    ref = check_ref(raw, field)
    if len(ref) > MAX_SUBJECT:
        raise InvalidInput(f"{field} must be at most {MAX_SUBJECT} characters", {"field": field})
    return ref


def _text(raw: object, field: str) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise InvalidInput(f"{field} must be a non-empty string", {"field": field})
    return raw.strip()


def _limit(raw: object, field: str) -> int | None:
    """A limit is bounded as a quota row's is (0 to MAX_LIMIT)."""
    return None if raw is None else check_limit(raw, field)


def reservation_counts(requested: Mapping[str, int]) -> tuple[int, int]:
    """(`gpuCount`, `gpuSlices`) of a reservation from its atoms per class."""
    return requested.get("gpu", 0), requested.get("gpu.mig", 0) + requested.get("gpu.slot", 0)


def check_policies(
    policies: Iterable[Policy],
    pool_id: str,
    gpu_count: int,
    gpu_slices: int,
    *,
    tenant_id: str | None = None,
) -> None:
    """Refuse a reservation that any applicable policy forbids, naming the policy and the limit.

    Applicable: the policy is a tenant's (only those set limits), its pool is `pool_id` or unset,
    and, when `tenant_id` is given, the policy is that tenant's. Policies are checked by name, so the
    same request always names the same one.
    """
    asked: dict[LimitKey, int] = {"gpuCount": gpu_count, "gpuSlices": gpu_slices}
    for policy in sorted(policies, key=lambda p: (p.name, p.pool_id or "")):
        if policy.subject_type != "tenant" or not policy.applies_to(pool_id, tenant_id):
            continue
        for key in LIMIT_KEYS:
            limit = policy.limit(key)
            if limit is not None and asked[key] > limit:
                what = "whole GPUs" if key == "gpuCount" else "GPU slices (MIG instances and slots)"
                raise Forbidden(
                    f"policy {policy.name} limits {key} to {limit} per reservation; "
                    f"this reservation asks for {asked[key]} {what}",
                    {"policy": policy.name, "limit": limit, "requested": asked[key], "key": key},
                )
