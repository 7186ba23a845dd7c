"""IAM policies on reservations: per-reservation limits on whole GPUs and on fractions.

The rule as users read it: docs/concepts.md#quotas-iam-policies-and-tenancy.

A policy is attached to a tenant, in every pool or in one, and caps what a single reservation may
ask for: `gpuCount` counts whole `gpu` atoms, `gpuSlices` counts fractional atoms (`gpu.mig` and
`gpu.slot`). They are kept apart because a seventh of a GPU is not a GPU: a policy written as
"at most 2 GPUs per reservation" must not refuse a notebook asking for three MIG slices, so a
`gpuCount` limit never counts slices. Policies are cumulative: every one that applies must pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from better_compute.domain.errors import Forbidden, InvalidInput
from better_compute.domain.quota import check_limit

LimitKey = Literal["gpuCount", "gpuSlices"]
LIMIT_KEYS: tuple[LimitKey, ...] = ("gpuCount", "gpuSlices")
_POLICY_FIELDS = frozenset({"name", "tenantId", "poolId", "limits"})


@dataclass(frozen=True)
class Policy:
    """Limits per reservation for one tenant; `pool_id` None applies in every pool. A stored policy
    has its `id` and creation time; one being parsed has neither yet."""

    name: str
    tenant_id: str
    pool_id: str | None = None
    gpu_count: int | None = None
    gpu_slices: int | None = None
    id: str = ""
    created_at: datetime | None = None

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


def parse_policy(raw: object) -> Policy:
    """A policy from `{name, tenantId, poolId?, limits: {gpuCount?, gpuSlices?}}`.

    At least one limit is required: a policy that limits nothing is a mistake worth telling.
    """
    if not isinstance(raw, Mapping):
        raise InvalidInput("policy must be an object with name, tenantId and limits", {"field": "policy"})
    unknown = sorted(str(k) for k in raw if k not in _POLICY_FIELDS)
    if unknown:
        raise InvalidInput(
            f"{unknown[0]}: unknown field; use name, tenantId, poolId and limits", {"field": unknown[0]}
        )
    name = _text(raw.get("name"), "name")
    tenant_id = _text(raw.get("tenantId"), "tenantId")
    pool_raw = raw.get("poolId")
    pool_id = None if pool_raw is None else _text(pool_raw, "poolId")
    limits = raw.get("limits")
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
    return Policy(name, tenant_id, pool_id, values["gpuCount"], values["gpuSlices"])


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

    Applicable: the policy's pool is `pool_id` or unset, and, when `tenant_id` is given, the policy
    is that tenant's. Policies are checked by name, so the same request always names the same one.
    """
    asked: dict[LimitKey, int] = {"gpuCount": gpu_count, "gpuSlices": gpu_slices}
    for policy in sorted(policies, key=lambda p: (p.name, p.pool_id or "")):
        if not policy.applies_to(pool_id, tenant_id):
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
