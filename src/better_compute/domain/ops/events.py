"""The operators' events: a fleet file registered, a doctor run.

Each is a frozen dataclass on `domain.kernel.events.Event`; `domain.ops.event_types` registers
every context's types, for reading the log back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from better_compute.domain.kernel.events import Event


@dataclass(frozen=True, slots=True)
class FleetRegistered(Event):
    TYPE: ClassVar[str] = "fleet.registered"
    clusters: int
    nodes: int
    pools: int


@dataclass(frozen=True, slots=True)
class DoctorRun(Event):
    """`better-compute doctor` ran (`subject`: `fleet`): how many findings, and how many of each
    code (docs/operations.md#doctor). One event per run, not one per finding: a doctor run every
    minute by a cron job would otherwise repeat every standing finding into the stream."""

    TYPE: ClassVar[str] = "doctor.run"
    findings: int
    counts: Mapping[str, int]
