"""The workloads repository: workloads, their deployments and replicas, and operations."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, select, update

from better_compute.domain.kernel.containers import ContainerSpec, container_of
from better_compute.domain.kernel.events import Event, type_of
from better_compute.domain.placement.capability import parse_capability
from better_compute.domain.placement.records import Operation
from better_compute.domain.placement.workloads import (
    REPLICA_SEPARATOR,
    Deployment,
    RunningReplica,
    Terminating,
    Workload,
    WorkloadSpec,
    replica_index,
)
from better_compute.storage.kernel import events as event_log
from better_compute.storage.kernel import pg_simple, rows
from better_compute.storage.kernel.tables import (
    deployments,
    operations,
    replicas,
    terminating_replicas,
    workloads,
)

# A workload's create and each placement write several rows and events. Built with SQLAlchemy's
# expression language that is a statement per row and most of a create's time, so on PostgreSQL
# each is one hand-written statement (rows passed as JSON); SQLite, one writer in process, keeps
# the plain statements.
_PG_CREATE = (
    "WITH w AS (INSERT INTO workloads (id, tenant_id, name, spec, unplaced, reason, policy_id, generation,"
    " created_at) VALUES (%(id)s, %(t)s, %(name)s, %(spec)s::json, %(unplaced)s::int, %(reason)s::text,"
    " %(policy)s::text, %(gen)s::int, %(created)s::timestamptz) ON CONFLICT DO NOTHING RETURNING id),"
    " e AS (INSERT INTO events (type, subject, payload, at)"
    " SELECT %(etype)s::text, %(esubject)s::text, %(epayload)s::json, %(at)s::timestamptz FROM w)"
    " SELECT count(*) FROM w"
)

# Every part is guarded by `w` (the workload's compare-and-set), so the statement writes all or nothing.
_PG_RECORD = (
    "WITH w AS (UPDATE workloads SET spec = %(spec)s::json, unplaced = %(unplaced)s::int,"
    " reason = %(reason)s::text, policy_id = %(policy)s::text, generation = %(gen)s::int"
    " WHERE id = %(id)s AND generation = %(expected)s::int RETURNING id),"
    " n AS (INSERT INTO deployments (id, workload_id, tenant_id, cluster_id, desired_replicas, phase, reason,"
    " message, shortfall, generation, created_at, updated_at, next_replica, preempted_by) SELECT d.id,"
    " d.workload_id, d.tenant_id, d.cluster_id, d.desired_replicas, d.phase, d.reason, d.message,"
    " d.shortfall, d.generation, d.created_at, d.updated_at, d.next_replica, d.preempted_by"
    " FROM json_populate_recordset(NULL::deployments, %(new)s::json) d"
    " WHERE EXISTS (SELECT 1 FROM w)),"
    " o AS (UPDATE deployments t SET desired_replicas = d.desired_replicas, phase = d.phase,"
    " reason = d.reason, message = d.message, shortfall = d.shortfall, generation = d.generation,"
    " updated_at = d.updated_at, next_replica = d.next_replica, preempted_by = d.preempted_by"
    " FROM json_populate_recordset(NULL::deployments, %(old)s::json) d"
    " WHERE t.id = d.id AND EXISTS (SELECT 1 FROM w)),"
    " r AS (INSERT INTO replicas (deployment_id, idx, allocation_id, created_at)"
    " SELECT r.deployment_id, r.idx, r.allocation_id, r.created_at"
    " FROM json_populate_recordset(NULL::replicas, %(replicas)s::json) r WHERE EXISTS (SELECT 1 FROM w)),"
    " e AS (INSERT INTO events (type, subject, payload, at)"
    " SELECT x.e->>'type', x.e->>'subject', x.e->'payload', %(at)s::timestamptz"
    " FROM json_array_elements(%(events)s::json) WITH ORDINALITY AS x(e, ord)"
    " WHERE EXISTS (SELECT 1 FROM w) ORDER BY x.ord)"
    " SELECT count(*) FROM w"
)


RUNNING_CHUNK = 2_000
"""Deployments read per statement by `running` (SQLite takes at most 32,766 parameters)."""


def _workload_params(w: Workload) -> dict[str, Any]:
    return {
        "id": w.id,
        "spec": json.dumps(spec_document(w.spec)),
        "unplaced": w.unplaced,
        "reason": w.reason,
        "policy": w.policy_id,
        "gen": w.generation,
    }


def _json_row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}


def _pg_one(conn: Connection, sql: str, params: Mapping[str, Any]) -> int:
    row = pg_simple.cursor(conn).execute(sql, params, prepare=True).fetchone()
    return 0 if row is None else int(row[0])


def spec_document(spec: WorkloadSpec) -> dict[str, Any]:
    return {
        "deviceClass": spec.device_class,
        "deviceCount": spec.device_count,
        "replicas": spec.replicas,
        "strategy": spec.strategy,
        "clusterFloors": dict(spec.cluster_floors),
        "maxClusters": spec.max_clusters,
        "priorityClass": spec.priority_class,
        "cluster": spec.pinned_cluster,
        "requiresSingleTopologyDomain": spec.single_domain,
        "topologyDomainKind": spec.domain_kind,
        "allowedRegions": list(spec.allowed_regions),
        "allowedClusters": list(spec.allowed_clusters),
        "drainedClusters": list(spec.drained_clusters),
        **({"capability": spec.capability.document()} if spec.capability is not None else {}),
        **({"container": spec.container.document()} if spec.container is not None else {}),
    }


def _spec(name: str, tenant_id: str, d: Mapping[str, Any]) -> WorkloadSpec:
    return WorkloadSpec(
        name=name,
        tenant_id=tenant_id,
        device_class=d["deviceClass"],
        device_count=int(d["deviceCount"]),
        replicas=int(d["replicas"]),
        strategy=d["strategy"],
        cluster_floors={str(k): int(v) for k, v in (d.get("clusterFloors") or {}).items()},
        max_clusters=d.get("maxClusters"),
        priority_class=d.get("priorityClass") or "standard",
        pinned_cluster=d.get("cluster"),
        single_domain=bool(d.get("requiresSingleTopologyDomain")),
        domain_kind=d.get("topologyDomainKind"),
        allowed_regions=tuple(d.get("allowedRegions") or ()),
        allowed_clusters=tuple(d.get("allowedClusters") or ()),
        drained_clusters=tuple(d.get("drainedClusters") or ()),
        capability=parse_capability(d["capability"]) if d.get("capability") else None,
        container=container_of(d.get("container")),
    )


def _workload(r: Mapping[str, Any]) -> Workload:
    return Workload(
        id=r["id"],
        spec=_spec(r["name"], r["tenant_id"], r["spec"]),
        generation=int(r["generation"]),
        created_at=r["created_at"],
        unplaced=int(r["unplaced"]),
        reason=r["reason"],
        policy_id=r["policy_id"],
    )


def _deployment(r: Mapping[str, Any]) -> Deployment:
    return Deployment(
        id=r["id"],
        workload_id=r["workload_id"],
        tenant_id=r["tenant_id"],
        cluster_id=r["cluster_id"],
        desired_replicas=int(r["desired_replicas"]),
        phase=r["phase"],
        reason=r["reason"],
        message=r["message"] or "",
        shortfall=int(r["shortfall"]),
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        generation=int(r["generation"]),
        next_replica=int(r["next_replica"]),
        preempted_by=r.get("preempted_by"),
    )


def _deployment_row(d: Deployment) -> dict[str, Any]:
    return {
        "id": d.id,
        "workload_id": d.workload_id,
        "tenant_id": d.tenant_id,
        "cluster_id": d.cluster_id,
        "desired_replicas": d.desired_replicas,
        "phase": d.phase,
        "reason": d.reason,
        "message": d.message,
        "shortfall": d.shortfall,
        "generation": d.generation,
        "created_at": d.created_at,
        "updated_at": d.updated_at,
        "next_replica": d.next_replica,
        "preempted_by": d.preempted_by,
    }


def _terminating(r: Mapping[str, Any]) -> Terminating:
    return Terminating(
        allocation_id=r["allocation_id"],
        tenant_id=r["tenant_id"],
        workload_id=r["workload_id"],
        deployment_id=r["deployment_id"],
        cluster_id=r["cluster_id"],
        since=r["since"],
        preempted_by=r.get("preempted_by"),
    )


class SqlWorkloads:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    # -- workloads ---------------------------------------------------------------------------
    def add(self, w: Workload) -> bool:
        """Insert a new workload; False when the tenant already has one of that name."""
        return (
            rows.insert_new(
                self.conn,
                workloads,
                [
                    {
                        "id": w.id,
                        "tenant_id": w.tenant_id,
                        "name": w.spec.name,
                        "spec": spec_document(w.spec),
                        "unplaced": w.unplaced,
                        "reason": w.reason,
                        "policy_id": w.policy_id,
                        "generation": w.generation,
                        "created_at": w.created_at,
                    }
                ],
            )
            == 1
        )

    def create(self, w: Workload, event: Event, at: datetime) -> bool:
        """Insert a new workload and, when it was inserted, its creation event; False (nothing
        written) when the tenant already has one of that name."""
        if self.conn.dialect.name != "postgresql":
            if not self.add(w):
                return False
            event_log.append(self.conn, event, at)
            return True
        params = {
            **_workload_params(w),
            "t": w.tenant_id,
            "name": w.spec.name,
            "created": w.created_at,
            "at": at,
            "etype": type_of(event),
            "esubject": event.subject,
            "epayload": json.dumps(event.payload()),
        }
        return _pg_one(self.conn, _PG_CREATE, params) == 1

    def record_placement(
        self,
        w: Workload,
        generation: int,
        written: Sequence[tuple[Deployment, bool]],
        added: Sequence[tuple[str, int, str]],
        events: Sequence[Event],
        now: datetime,
    ) -> bool:
        """A placement's outcome at once: the workload's figures (compare-and-set on `generation`),
        its deployments (each new, or written over its row), their new replicas (deployment, index,
        allocation) and the events, in order. False, with nothing written, when the workload's
        generation moved."""
        if self.conn.dialect.name != "postgresql":
            if not self.update(w, generation):
                return False
            for d, new in written:
                self.put_deployment(d, new=new)
            for deployment_id, idx, allocation in added:
                self.add_replicas(deployment_id, [(idx, allocation)], now)
            for event in events:
                event_log.append(self.conn, event, now)
            return True
        params = {
            **_workload_params(w),
            "expected": generation,
            "new": json.dumps([_json_row(_deployment_row(d)) for d, new in written if new]),
            "old": json.dumps([_json_row(_deployment_row(d)) for d, new in written if not new]),
            "replicas": json.dumps(
                [
                    {"deployment_id": d, "idx": i, "allocation_id": a, "created_at": now.isoformat()}
                    for d, i, a in added
                ]
            ),
            "events": json.dumps(
                [{"type": type_of(e), "subject": e.subject, "payload": e.payload()} for e in events]
            ),
            "at": now,
        }
        return _pg_one(self.conn, _PG_RECORD, params) == 1

    def many(self, workload_ids: Sequence[str]) -> list[Workload]:
        """The workloads of these ids that exist, by id (read in bounded statements)."""
        out: list[Workload] = []
        ids = sorted(set(workload_ids))
        for at in range(0, len(ids), RUNNING_CHUNK):
            stmt = select(workloads).where(workloads.c.id.in_(ids[at : at + RUNNING_CHUNK]))
            out.extend(_workload(r) for r in rows.rows(self.conn, stmt))
        return sorted(out, key=lambda w: w.id)

    def get(self, workload_id: str) -> Workload | None:
        found = rows.rows(self.conn, select(workloads).where(workloads.c.id == workload_id))
        return _workload(found[0]) if found else None

    def by_name(self, tenant_id: str, name: str) -> Workload | None:
        found = rows.rows(
            self.conn, select(workloads).where(workloads.c.tenant_id == tenant_id, workloads.c.name == name)
        )
        return _workload(found[0]) if found else None

    def named(self, name: str, tenant_id: str | None, limit: int) -> list[Workload]:
        """Up to `limit` workloads called `name`: the tenant's (at most one), or any tenant's."""
        where = [workloads.c.name == name]
        if tenant_id is not None:
            where.append(workloads.c.tenant_id == tenant_id)
        stmt = select(workloads).where(*where).order_by(workloads.c.id).limit(limit)
        return [_workload(r) for r in rows.rows(self.conn, stmt)]

    def page(self, tenant_id: str | None, limit: int | None, after: str | None) -> list[Workload]:
        where = [] if tenant_id is None else [workloads.c.tenant_id == tenant_id]
        return [_workload(r) for r in rows.page(self.conn, workloads, where=where, limit=limit, after=after)]

    def unplaced(self, limit: int) -> list[Workload]:
        """Workloads with replicas no cluster took, oldest first."""
        stmt = select(workloads).where(workloads.c.unplaced > 0).order_by(workloads.c.id).limit(limit)
        return [_workload(r) for r in rows.rows(self.conn, stmt)]

    def update(self, w: Workload, generation: int) -> bool:
        """Write the workload's spec and placement figures if its generation is still `generation`."""
        return rows.compare_and_set(
            self.conn,
            workloads,
            w.id,
            {"generation": generation},
            {
                "spec": spec_document(w.spec),
                "unplaced": w.unplaced,
                "reason": w.reason,
                "policy_id": w.policy_id,
                "generation": w.generation,
            },
        )

    def remove(self, workload_id: str) -> None:
        ids = select(deployments.c.id).where(deployments.c.workload_id == workload_id)
        self.conn.execute(delete(replicas).where(replicas.c.deployment_id.in_(ids)))
        self.conn.execute(delete(deployments).where(deployments.c.workload_id == workload_id))
        self.conn.execute(delete(workloads).where(workloads.c.id == workload_id))

    # -- deployments -------------------------------------------------------------------------
    def deployments_of(self, workload_ids: Sequence[str]) -> dict[str, list[Deployment]]:
        out: dict[str, list[Deployment]] = {w: [] for w in workload_ids}
        if not workload_ids:
            return out
        stmt = (
            select(deployments)
            .where(deployments.c.workload_id.in_(list(workload_ids)))
            .order_by(deployments.c.workload_id, deployments.c.cluster_id)
        )
        for r in rows.rows(self.conn, stmt):
            out[r["workload_id"]].append(_deployment(r))
        return out

    def put_deployment(self, d: Deployment, *, new: bool = False) -> None:
        """Insert a new deployment, or write one over its row: a plain insert or update, whose
        compiled form SQLAlchemy keeps (an upsert is built anew each time)."""
        row = _deployment_row(d)
        if new:
            self.conn.execute(deployments.insert(), [row])
            return
        self.conn.execute(update(deployments).where(deployments.c.id == d.id).values(row))

    def remove_deployment(self, deployment_id: str) -> None:
        self.conn.execute(delete(replicas).where(replicas.c.deployment_id == deployment_id))
        self.conn.execute(delete(deployments).where(deployments.c.id == deployment_id))

    def pending_workloads(self, limit: int) -> list[str]:
        """Workloads with a deployment short of its replicas (pending or admitted), oldest first."""
        stmt = (
            select(deployments.c.workload_id)
            .where(deployments.c.phase.in_(("pending", "admitted")))
            .group_by(deployments.c.workload_id)
            .order_by(deployments.c.workload_id)
            .limit(limit)
        )
        return [r[0] for r in self.conn.execute(stmt)]

    # -- replicas ----------------------------------------------------------------------------
    def containers_of(self, allocation_ids: Sequence[str]) -> dict[str, ContainerSpec]:
        """What each of these replicas runs (its workload's `shape.container`), by allocation id;
        a replica whose workload names no container, and any other allocation, is left out. One
        read by the deployments' primary key (a replica's id is `<deploymentId>.r<n>`)."""
        by_deployment: dict[str, list[str]] = {}
        for allocation_id in allocation_ids:
            if replica_index(allocation_id) is not None:
                by_deployment.setdefault(allocation_id.rpartition(REPLICA_SEPARATOR)[0], []).append(
                    allocation_id
                )
        if not by_deployment:
            return {}
        stmt = (
            select(deployments.c.id, workloads.c.spec)
            .join(workloads, workloads.c.id == deployments.c.workload_id)
            .where(deployments.c.id.in_(sorted(by_deployment)))
        )
        out: dict[str, ContainerSpec] = {}
        for r in rows.rows(self.conn, stmt):
            container = container_of(r["spec"].get("container"))
            if container is not None:
                out.update(dict.fromkeys(by_deployment[r["id"]], container))
        return out

    def replicas_of(self, deployment_ids: Sequence[str]) -> dict[str, list[tuple[int, str]]]:
        """Per deployment, its replicas as (index, allocation id), in index order."""
        out: dict[str, list[tuple[int, str]]] = {d: [] for d in deployment_ids}
        if not deployment_ids:
            return out
        stmt = (
            select(replicas.c.deployment_id, replicas.c.idx, replicas.c.allocation_id)
            .where(replicas.c.deployment_id.in_(list(deployment_ids)))
            .order_by(replicas.c.deployment_id, replicas.c.idx)
        )
        for dep, idx, alloc in self.conn.execute(stmt):
            out[dep].append((int(idx), alloc))
        return out

    def awaiting(self, workload_id: str) -> set[str]:
        stmt = (
            select(terminating_replicas.c.cluster_id)
            .where(terminating_replicas.c.preempted_by == workload_id)
            .distinct()
        )
        return {r[0] for r in self.conn.execute(stmt)}

    def running(self, allocation_ids: Sequence[str]) -> list[RunningReplica]:
        """The replicas among `allocation_ids` (other allocations are left out), with their
        deployment, workload, tenant, cluster and priority class."""
        wanted = {a for a in allocation_ids if replica_index(a) is not None}
        if not wanted:
            return []
        deployment_ids = sorted({a.rpartition(".r")[0] for a in wanted})
        present: list[tuple[str, int, str]] = []
        owners: dict[str, tuple[str, str, str]] = {}
        for at in range(0, len(deployment_ids), RUNNING_CHUNK):  # a statement's parameters are bounded
            chunk = deployment_ids[at : at + RUNNING_CHUNK]
            # plain tuples, and each workload's spec read once: a cluster's replicas run to thousands
            got = self.conn.execute(
                select(replicas.c.allocation_id, replicas.c.idx, replicas.c.deployment_id).where(
                    replicas.c.deployment_id.in_(chunk)
                )
            )
            present.extend((a, int(i), d) for a, i, d in got if a in wanted)
            for d, w, t, c in self.conn.execute(
                select(
                    deployments.c.id,
                    deployments.c.workload_id,
                    deployments.c.tenant_id,
                    deployments.c.cluster_id,
                ).where(deployments.c.id.in_(chunk))
            ):
                owners[d] = (w, t, c)
        workload_ids = sorted({w for w, _, _ in owners.values()})
        classes: dict[str, str] = {}
        for at in range(0, len(workload_ids), RUNNING_CHUNK):
            for w, spec in self.conn.execute(
                select(workloads.c.id, workloads.c.spec).where(
                    workloads.c.id.in_(workload_ids[at : at + RUNNING_CHUNK])
                )
            ):
                document = json.loads(spec) if isinstance(spec, str) else spec
                classes[w] = document.get("priorityClass") or "standard"
        out = []
        for allocation_id, index, deployment_id in present:
            owner = owners.get(deployment_id)
            if owner is None:
                continue
            workload_id, tenant_id, cluster_id = owner
            out.append(
                RunningReplica(
                    allocation_id=allocation_id,
                    number=index,
                    deployment_id=deployment_id,
                    workload_id=workload_id,
                    tenant_id=tenant_id,
                    cluster_id=cluster_id,
                    priority_class=classes.get(workload_id, "standard"),
                )
            )
        return out

    def add_replicas(self, deployment_id: str, items: Sequence[tuple[int, str]], now: datetime) -> None:
        if items:
            self.conn.execute(
                replicas.insert(),
                [
                    {"deployment_id": deployment_id, "idx": i, "allocation_id": a, "created_at": now}
                    for i, a in items
                ],
            )

    def remove_replicas(self, deployment_id: str, indexes: Sequence[int]) -> None:
        if indexes:
            self.conn.execute(
                delete(replicas).where(
                    replicas.c.deployment_id == deployment_id, replicas.c.idx.in_(list(indexes))
                )
            )

    # -- terminating replicas ----------------------------------------------------------------
    def add_terminating(self, items: Sequence[Terminating]) -> None:
        if items:
            self.conn.execute(
                terminating_replicas.insert(),
                [
                    {
                        "allocation_id": t.allocation_id,
                        "tenant_id": t.tenant_id,
                        "workload_id": t.workload_id,
                        "deployment_id": t.deployment_id,
                        "cluster_id": t.cluster_id,
                        "since": t.since,
                        "preempted_by": t.preempted_by,
                    }
                    for t in items
                ],
            )

    def terminating_of(self, workload_ids: Sequence[str]) -> list[Terminating]:
        """The workloads' replicas that are terminating, by allocation id."""
        if not workload_ids:
            return []
        stmt = (
            select(terminating_replicas)
            .where(terminating_replicas.c.workload_id.in_(list(workload_ids)))
            .order_by(terminating_replicas.c.allocation_id)
        )
        return [_terminating(r) for r in rows.rows(self.conn, stmt)]

    def terminating_since(self, at: datetime, limit: int) -> list[Terminating]:
        """Up to `limit` replicas terminating since `at` or earlier, oldest first."""
        stmt = (
            select(terminating_replicas)
            .where(terminating_replicas.c.since <= at)
            .order_by(terminating_replicas.c.since, terminating_replicas.c.allocation_id)
            .limit(limit)
        )
        return [_terminating(r) for r in rows.rows(self.conn, stmt)]

    def terminating_among(self, allocation_ids: Sequence[str]) -> set[str]:
        """Which of these allocations are terminating replicas'."""
        if not allocation_ids:
            return set()
        stmt = select(terminating_replicas.c.allocation_id).where(
            terminating_replicas.c.allocation_id.in_(list(allocation_ids))
        )
        return {r[0] for r in self.conn.execute(stmt)}

    def end_terminating(self, allocation_id: str) -> Terminating | None:
        """Forget a terminating replica (its node released it); the row, or None if it was none."""
        found = rows.rows(
            self.conn,
            select(terminating_replicas).where(terminating_replicas.c.allocation_id == allocation_id),
        )
        if not found:
            return None
        self.conn.execute(
            delete(terminating_replicas).where(terminating_replicas.c.allocation_id == allocation_id)
        )
        return _terminating(found[0])

    # -- operations --------------------------------------------------------------------------
    def add_operation(self, op: Operation) -> None:
        self.conn.execute(
            operations.insert().values(
                id=op.id,
                type=op.type,
                tenant_id=op.tenant_id,
                workload_id=op.workload_id,
                payload=dict(op.payload),
                status=op.status,
                result=dict(op.result),
                created_at=op.created_at,
                finished_at=op.finished_at,
            )
        )

    def operation(self, operation_id: str) -> Operation | None:
        found = rows.rows(self.conn, select(operations).where(operations.c.id == operation_id))
        if not found:
            return None
        r = found[0]
        return Operation(
            id=r["id"],
            type=r["type"],
            tenant_id=r["tenant_id"],
            workload_id=r["workload_id"],
            payload=r["payload"],
            status=r["status"],
            result=r["result"],
            created_at=r["created_at"],
            finished_at=r["finished_at"],
        )
