"""The policies repository: policies by tenant, pool and subject."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from sqlalchemy import Connection, and_, delete, or_, select

from better_compute.domain.placement.constraints import Constraints
from better_compute.domain.tenancy.iam import Policy, SubjectType
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import policies


def policy_of(r: Mapping[str, Any]) -> Policy:
    """A policy from its row; the admission snapshot's rows carry only name, pool and limits."""
    limits = r["limits"] or {}
    return Policy(
        name=r["name"],
        tenant_id=r["tenant_id"],
        pool_id=r["pool_id"],
        gpu_count=limits.get("gpuCount"),
        gpu_slices=limits.get("gpuSlices"),
        id=r.get("id", ""),
        created_at=r.get("created_at"),
        constraints=constraints_of(r.get("constraints") or {}),
        subject_type=cast(SubjectType, r.get("subject_type") or "tenant"),
        subject_id=r.get("subject_id") or "",
        generation=r.get("generation") or 1,
    )


def constraints_of(raw: Mapping[str, Any]) -> Constraints:
    def names(key: str) -> tuple[str, ...]:
        return tuple(raw.get(key) or ())

    return Constraints(
        allowed_regions=names("allowedRegions"),
        allowed_residencies=names("allowedResidencies"),
        allowed_device_classes=names("allowedDeviceClasses"),
        allowed_clusters=names("allowedClusters"),
        denied_clusters=names("deniedClusters"),
        cost_ceiling=raw.get("costCeiling"),
    )


class SqlPolicies:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def find(
        self,
        tenant_id: str | None,
        pool_id: str | None,
        *,
        subject_type: str | None = None,
        subject_id: str | None = None,
        with_clusters: bool = False,
    ) -> list[Policy]:
        if tenant_id is None:
            tenant = []
        elif with_clusters:
            tenant = [or_(policies.c.tenant_id == tenant_id, policies.c.subject_type == "cluster")]
        else:
            tenant = [policies.c.tenant_id == tenant_id]
        where = [
            *tenant,
            *([] if pool_id is None else [policies.c.pool_id == pool_id]),
            *([] if subject_type is None else [policies.c.subject_type == subject_type]),
            *([] if subject_id is None else [policies.c.subject_id == subject_id]),
        ]
        return [policy_of(r) for r in rows.page(self.conn, policies, where=where)]

    def get(self, policy_id: str) -> Policy | None:
        found = rows.rows(self.conn, select(policies).where(policies.c.id == policy_id))
        return policy_of(found[0]) if found else None

    def for_placement(self, tenant_id: str, workload_id: str | None) -> list[Policy]:
        subjects = [
            and_(policies.c.subject_type == "tenant", policies.c.subject_id == tenant_id),
            policies.c.subject_type == "cluster",
        ]
        if workload_id is not None:
            subjects.append(and_(policies.c.subject_type == "workload", policies.c.subject_id == workload_id))
        return [policy_of(r) for r in rows.page(self.conn, policies, where=[or_(*subjects)])]

    def add(self, policy: Policy) -> bool:
        return rows.insert_new(self.conn, policies, [_row(policy)]) == 1

    def replace(self, policy: Policy, generation: int) -> bool:
        """Write the policy's limits, constraints and generation while it is still at `generation`."""
        values = {
            "limits": policy.limits(),
            "constraints": policy.constraints.as_mapping(),
            "generation": policy.generation,
        }
        return rows.compare_and_set(self.conn, policies, policy.id, {"generation": generation}, values)

    def remove(self, policy_id: str) -> Policy | None:
        found = self.conn.execute(select(policies).where(policies.c.id == policy_id)).first()
        if found is None:
            return None
        self.conn.execute(delete(policies).where(policies.c.id == policy_id))
        return policy_of(dict(found._mapping))


def _row(policy: Policy) -> dict[str, Any]:
    return {
        "id": policy.id,
        "name": policy.name,
        "tenant_id": policy.tenant_id,
        "pool_id": policy.pool_id,
        "limits": policy.limits(),
        "created_at": policy.created_at,
        "subject_type": policy.subject_type,
        "subject_id": policy.subject_id,
        "constraints": policy.constraints.as_mapping(),
        "generation": policy.generation,
    }
