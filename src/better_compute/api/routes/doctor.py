"""`doctor.run` (admin): what in the fleet needs an operator (docs/operations.md#doctor)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query

from better_compute.api.auth import PrincipalDep
from better_compute.api.deps import NowDep, StoreDep
from better_compute.api.query import StrictQueryRoute
from better_compute.domain.ops.doctor import Finding
from better_compute.service.ops import doctor
from better_compute.wire.doctor import DoctorFinding, DoctorQuery, DoctorReport

router = APIRouter(prefix="/v1", tags=["doctor"], route_class=StrictQueryRoute)


@router.get("/doctor", response_model=DoctorReport)
def run_doctor(
    q: Annotated[DoctorQuery, Query()], principal: PrincipalDep, store: StoreDep, now: NowDep
) -> DoctorReport:
    findings = doctor.run(
        store,
        principal,
        now,
        timedelta(minutes=q.silent_minutes),
        mig_waiting_after=timedelta(days=q.mig_waiting_days),
    )
    return doctor_report(now, findings)


def doctor_report(checked_at: datetime, findings: list[Finding]) -> DoctorReport:
    return DoctorReport(
        findings=[
            DoctorFinding(code=f.code, subject=f.subject, detail=f.detail, action=f.action) for f in findings
        ],
        checked_at=checked_at,
    )
