"""`doctor.run` (admin): read the fleet once, ask `domain.doctor` what needs an operator, and log
the run (`doctor.run`, with its counts by code)."""

from __future__ import annotations

from datetime import datetime, timedelta

from better_compute.domain.credentials import Principal, require_admin
from better_compute.domain.doctor import STUCK_AFTER, Finding, FleetFacts, counts, diagnose
from better_compute.domain.events import DoctorRun
from better_compute.service.ports import StorePort

MAX_OVERLAPS = 100
"""The most overlapping pairs the ledger self-check reports (there should be none at all)."""

MAX_TERMINATING = 1000
"""The most stuck terminating replicas one run reports (oldest first)."""

MAX_STRANDED = 1000
"""The most stranded bookings one run reads (in booking order; one finding per allocation)."""


def run(store: StorePort, principal: Principal, now: datetime, silent_after: timedelta) -> list[Finding]:
    """Every finding about the fleet at `now` (admin only), sorted; `silent_after` is how long
    without a report makes a joined node silent. Appends one `doctor.run` event."""
    require_admin(principal, "doctor.run")
    with store.read() as tx:
        facts = FleetFacts(
            nodes=tx.nodes.page(None, None, None),
            gpus=tx.gpus.page(None, None, None),
            pools=tx.pools.all(),
            quotas=tx.quotas.find(None, None),
            gates=tx.mig_layouts.all_rows(),
            partition_holds=tx.ledger.partition_holds(now),
            overlaps=tx.ledger.overlaps(MAX_OVERLAPS),
            family_overlaps=tx.ledger.family_overlaps(now, MAX_OVERLAPS),
            stranded=tx.ledger.stranded(now, MAX_STRANDED),
            terminating=tx.workloads.terminating_since(now - STUCK_AFTER, MAX_TERMINATING),
        )
    findings = diagnose(facts, now, silent_after)
    with store.begin() as tx:
        tx.events.append(DoctorRun("fleet", findings=len(findings), counts=counts(findings)), now)
    return findings
