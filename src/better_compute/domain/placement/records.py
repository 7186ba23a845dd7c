"""Placement's records: the long-running operations a workload request leaves behind."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class Operation:
    """A long-running request (`workload.drain`), kept so its caller can read how it ended."""

    id: str
    type: str
    tenant_id: str | None
    workload_id: str | None
    payload: Mapping[str, Any]
    status: str
    """`running`, `succeeded` or `failed`."""
    result: Mapping[str, Any]
    created_at: datetime
    finished_at: datetime | None = None
