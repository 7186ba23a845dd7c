"""`replay.run` (admin): what recorded or given demand would have met under a fleet and a policy
set, replayed by the server's own rules in virtual time (docs/replay.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from better_compute.wire.common import WireAnswer, WireRequest


class ReplayRun(WireRequest):
    """What to replay, over `[since, until)` (at most 31 days).

    - `demand`: a demand file's object (`{"requests": [...]}`, at most 10,000 requests, scale steps
      counted); left out: this deployment's own history in the window, from its event log and ledger.
    - `fleet`: a fleet file's object (at most 2,000 nodes); left out: today's fleet.
    - `fleetChanges`: changes laid over that fleet before every run, in the fleet file's own terms
      (`addNodes`, each naming its `cluster` and optionally the `pool` it joins; `removeNodes`, node
      names; `pools`, changing the pool of that name or adding one; `clusters`, added): at most 500
      entries, and the fleet after them still at most 2,000 nodes (docs/replay.md#fleet-changes).
    - `policy`: changes laid over today's policy set (`priorityClasses`, `quotas`, `policies`,
      `prices`; at most 500 entries); left out: today's, unchanged.
    - `against`: a second set of changes, replayed beside `policy`, with the differences.

    The body is at most 8 MiB."""

    since: datetime
    until: datetime
    demand: dict[str, Any] | None = None
    fleet: dict[str, Any] | None = None
    fleet_changes: dict[str, Any] | None = None
    policy: dict[str, Any] | None = None
    against: dict[str, Any] | None = None


class ReplayFigures(WireAnswer):
    """One tenant's figures (or the whole replay's): its requests and those refused outright,
    GPU-hours held and GPU-hours asked for and not had, by the reason last given, the p50 and p99
    of the wait from an ask to having all it asked, preemptions suffered, and what the GPU-hours
    held cost (null when a meter has no price)."""

    requests: int
    refused_requests: int
    gpu_hours_granted: float
    gpu_hours_refused: dict[str, float]
    wait_p50_seconds: float | None
    wait_p99_seconds: float | None
    preemptions: int
    cost: str | None = None
    currency: str | None = None
    fragmentation: float | None = None
    """Overall figures only: the time-weighted mean share (0 to 1) of the fleet's free GPU capacity
    that the demand's request sizes cannot use (docs/replay.md#what-it-reports)."""


class ReplayOutcome(WireAnswer):
    """One request's outcome: `key` is its id in the demand (a history's: the workload or
    reservation id it had)."""

    key: str
    tenant: str
    gpu_hours_granted: float
    gpu_hours_refused: float
    refused_reason: str | None
    wait_seconds: float | None
    preemptions: int


class ReplayRunPublic(WireAnswer):
    """One run: `recorded` (what happened, a history's only), `policy` (today's policy set with
    `policy`'s changes) or `against`."""

    name: str
    elapsed_seconds: float
    overall: ReplayFigures
    tenants: dict[str, ReplayFigures]
    outcomes: list[ReplayOutcome] = Field(default_factory=list)


class ReplayReport(WireAnswer):
    """A replay's report: its window, where its demand came from (`history` or `file`), how many
    requests it made, each run, and, with `against`, what `against` changes from `policy`
    (`differences`: overall and per tenant, each figure against less policy)."""

    since: datetime
    until: datetime
    source: str
    requests: int
    runs: list[ReplayRunPublic]
    differences: dict[str, dict[str, float | None]] | None = None
