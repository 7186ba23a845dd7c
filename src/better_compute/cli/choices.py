"""The values of the CLI's enum-like options, so `--help` lists them and typer refuses any other
with the list (a usage error, exit status 2) before a request is sent.

The API's wire models hold the same lists (`better_compute.wire`); they are repeated here because
the wire models import pydantic, which a help screen must not wait for, and a test holds the two equal.
"""

from __future__ import annotations

from typing import Literal

SharingMode = Literal["exclusive", "mig", "timeslice", "mps"]
"""`pools create --mode` (wire.pools.SharingMode)."""
QuotaScope = Literal["pool", "cluster", "fleet"]
"""`quotas list --scope` (wire.quotas.QuotaScope)."""
SubjectType = Literal["tenant", "endpoint", "workload", "cluster"]
"""`--subject-type` of the policy commands (wire.policies.SubjectType)."""
ReservationStatus = Literal["scheduled", "active", "ended", "cancelled", "released"]
"""`reservations list --status` (wire.reservations.ReservationStatus)."""
