"""`replay.run` (admin): recorded or given demand replayed by the server's own rules in virtual
time, on a throwaway store (docs/replay.md)."""

from __future__ import annotations

import re

from fastapi import APIRouter

from better_compute.api.auth import PrincipalDep
from better_compute.api.deps import ServicesDep
from better_compute.domain.ops.replay import Figures, differences
from better_compute.service.ops import replay
from better_compute.wire.replay import ReplayFigures, ReplayOutcome, ReplayReport, ReplayRun, ReplayRunPublic

REPLAY_PATH = re.compile(r"/v1/replay")
"""The route's path, for the body cap of its own (`api.limits.BodyLimits`)."""

router = APIRouter(prefix="/v1", tags=["replay"])


@router.post("/replay", response_model=ReplayReport)
def run_replay(body: ReplayRun, principal: PrincipalDep, services: ServicesDep) -> ReplayReport:
    report = replay.replay(
        services.store,
        services.scratch,
        principal,
        since=body.since,
        until=body.until,
        demand=body.demand,
        fleet=body.fleet,
        policy=body.policy,
        against=body.against,
        fleet_changes=body.fleet_changes,
    )
    return replay_report(report)


def _figures(f: Figures) -> ReplayFigures:
    return ReplayFigures(
        requests=f.requests,
        refused_requests=f.refused_requests,
        gpu_hours_granted=f.gpu_hours_granted,
        gpu_hours_refused=dict(f.gpu_hours_refused),
        wait_p50_seconds=f.wait_p50_s,
        wait_p99_seconds=f.wait_p99_s,
        preemptions=f.preemptions,
        cost=f.cost,
        currency=f.currency,
        fragmentation=f.fragmentation,
    )


def _run(r: replay.Run) -> ReplayRunPublic:
    return ReplayRunPublic(
        name=r.name,
        elapsed_seconds=r.elapsed_s,
        overall=_figures(r.overall),
        tenants={t: _figures(f) for t, f in r.tenants.items()},
        outcomes=[
            ReplayOutcome(
                key=o.key,
                tenant=o.tenant,
                gpu_hours_granted=o.granted_hours,
                gpu_hours_refused=o.refused_hours,
                refused_reason=o.refused_reason,
                wait_seconds=o.wait_s,
                preemptions=o.preempted,
            )
            for o in r.outcomes
        ],
    )


def replay_report(report: replay.Report) -> ReplayReport:
    by_name = {r.name: r for r in report.runs}
    diff = None
    if "against" in by_name:
        a, b = by_name["policy"], by_name["against"]
        diff = {"overall": differences(a.overall, b.overall)}
        for tenant in sorted(set(a.tenants) | set(b.tenants)):
            diff[tenant] = differences(a.tenants.get(tenant, Figures()), b.tenants.get(tenant, Figures()))
    return ReplayReport(
        since=report.window.since,
        until=report.window.until,
        source=report.source,
        requests=report.requests,
        runs=[_run(r) for r in report.runs],
        differences=diff,
    )
