"""`doctor.run` (admin): what in the fleet needs an operator, as findings (docs/operations.md#doctor)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from better_compute.wire.common import WireAnswer, WireRequest

SILENT_MINUTES_DEFAULT = 10
SILENT_MINUTES_MAX = 10080
"""`silentMinutes`: the silence window of `node.silent`, 1 minute to a week."""
MIG_WAITING_DAYS_DEFAULT = 7
MIG_WAITING_DAYS_MAX = 3650
"""`migWaitingDays`: how long a layout change may wait before `capacity.mig.waiting`, 1 day to ten
years. The API's query and the CLI's options both read these bounds."""


class DoctorQuery(WireRequest):
    """`doctor.run` (query parameters): how many minutes without a signed report or spec read make a
    joined node `node.silent` (`silentMinutes`, 1 to 10080; default 10), and how many days a layout
    change may wait from its request before `capacity.mig.waiting` (`migWaitingDays`, 1 to 3650;
    default 7)."""

    silent_minutes: int = Field(default=SILENT_MINUTES_DEFAULT, ge=1, le=SILENT_MINUTES_MAX)
    mig_waiting_days: int = Field(default=MIG_WAITING_DAYS_DEFAULT, ge=1, le=MIG_WAITING_DAYS_MAX)


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
