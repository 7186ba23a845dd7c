"""`doctor.run` (admin): what in the fleet needs an operator, as findings (docs/operations.md#doctor)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from better_compute.wire.common import WireAnswer, WireRequest


class DoctorQuery(WireRequest):
    """`doctor.run` (query parameters): how many minutes without a signed report or spec read make a
    joined node `node.silent` (`silentMinutes`, 1 to 10080; default 10), and how many days a layout
    change may wait from its request before `capacity.mig.waiting` (`migWaitingDays`, 1 to 3650;
    default 7)."""

    silent_minutes: int = Field(default=10, ge=1, le=10080)
    mig_waiting_days: int = Field(default=7, ge=1, le=3650)


class DoctorFinding(WireAnswer):
    """One finding: its `code` (`capacity.mig.stuck`, `node.silent`, ...), what it is about
    (`subject`: a node, GPU, pool, atom or allocation id), what was found and what to do."""

    code: str
    subject: str
    detail: str
    action: str


class DoctorReport(WireAnswer):
    """Every finding, sorted by (code, subject); none when all is well. `checkedAt`: when the
    fleet was read."""

    findings: list[DoctorFinding]
    checked_at: datetime
