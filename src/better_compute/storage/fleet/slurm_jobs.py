"""The Slurm jobs the follower mirrors (`slurm_jobs`): what it last read of each, by allocation and node;
and the job id each allocation had (`slurm_job_ids`), kept once the job is gone from the mirror."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, and_, delete, or_, select, tuple_, update

from better_compute.domain.fleet.slurm_holds import Mirror
from better_compute.storage.kernel import rows
from better_compute.storage.kernel.tables import slurm_followers, slurm_job_ids, slurm_jobs

MAX_REASON = 200


class SqlSlurmJobs:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def put(self, cluster_id: str, mirrors: Sequence[Mirror], now: datetime) -> None:
        """The cluster's rows become `mirrors`: each new or changed one written (its `updated_at`, read
        back as `since`, is when it first read so), any other row of the cluster dropped. Each
        mirrored job's id is kept for its allocation as well (`job_ids`), and never dropped."""
        self._keep_ids(cluster_id, mirrors, now)
        keep = [(m.allocation_id, m.node) for m in mirrors]
        gone = delete(slurm_jobs).where(slurm_jobs.c.cluster_id == cluster_id)
        if keep:
            gone = gone.where(tuple_(slurm_jobs.c.allocation_id, slurm_jobs.c.node_id).not_in(keep))
        self.conn.execute(gone)
        c = slurm_jobs.c
        stored = {
            (r[0], r[1]): (int(r[2]), r[3], r[4], bool(r[5]))
            for r in self.conn.execute(
                select(c.allocation_id, c.node_id, c.job_id, c.state, c.reason, c.external).where(
                    c.cluster_id == cluster_id
                )
            ).all()
        }
        rows.upsert(
            self.conn,
            slurm_jobs,
            [
                {
                    "allocation_id": m.allocation_id,
                    "node_id": m.node,
                    "cluster_id": cluster_id,
                    "job_id": m.job_id,
                    "state": m.state[:24],
                    "reason": m.reason[:MAX_REASON],
                    "external": m.external,
                    "updated_at": now,
                }
                for m in mirrors
                if stored.get((m.allocation_id, m.node))
                != (m.job_id, m.state[:24], m.reason[:MAX_REASON], m.external)
            ],
            ["allocation_id", "node_id"],
        )

    def of_allocations(self, allocation_ids: Sequence[str]) -> dict[str, list[Mirror]]:
        out: dict[str, list[Mirror]] = {a: [] for a in allocation_ids}
        if not allocation_ids:
            return out
        c = slurm_jobs.c
        found = self.conn.execute(
            select(c.allocation_id, c.node_id, c.job_id, c.state, c.reason, c.external, c.updated_at)
            .where(and_(c.allocation_id.in_(list(allocation_ids))))
            .order_by(c.allocation_id, c.node_id)
        ).all()
        for r in found:
            out[r[0]].append(Mirror(r[0], r[1], int(r[2]), r[3], r[4], bool(r[5]), r[6]))
        return out

    def lease(self, cluster_id: str, owner: str, now: datetime, until: datetime) -> bool:
        """Take (or renew) the lease to follow `cluster_id` until `until`; False while another owner's
        lease runs. On PostgreSQL two takers of one row queue on it and the second, re-reading the
        row the first wrote, finds the lease taken; a first lease is an insert the second skips."""
        f = slurm_followers.c
        taken = self.conn.execute(
            update(slurm_followers)
            .where(f.cluster_id == cluster_id, or_(f.lease_until <= now, f.lease_owner == owner))
            .values(lease_owner=owner[:64], lease_until=until)
        )
        if taken.rowcount == 1:
            return True
        row = {"cluster_id": cluster_id, "lease_owner": owner[:64], "lease_until": until}
        return rows.insert_new(self.conn, slurm_followers, [row]) == 1

    def _keep_ids(self, cluster_id: str, mirrors: Sequence[Mirror], now: datetime) -> None:
        """Write the job id of each mirrored allocation where it is not the one kept already: a
        pass writes nothing for jobs it saw before. The last job mirrored wins (a duplicate holding
        job, cancelled by the pass that finds it, is not mirrored; the one kept is)."""
        wanted: dict[str, int] = {}
        for m in mirrors:
            wanted.setdefault(m.allocation_id, m.job_id)
        if not wanted:
            return
        kept = self.job_ids(sorted(wanted))
        rows.upsert(
            self.conn,
            slurm_job_ids,
            [
                {"allocation_id": a, "cluster_id": cluster_id, "job_id": j, "recorded_at": now}
                for a, j in sorted(wanted.items())
                if kept.get(a) != j
            ],
            ["allocation_id"],
        )

    def job_ids(self, allocation_ids: Sequence[str]) -> dict[str, int]:
        """The Slurm job id kept for each of `allocation_ids` that had a job; the others left out."""
        if not allocation_ids:
            return {}
        c = slurm_job_ids.c
        found = self.conn.execute(
            select(c.allocation_id, c.job_id).where(c.allocation_id.in_(list(allocation_ids)))
        ).all()
        return {r[0]: int(r[1]) for r in found}
