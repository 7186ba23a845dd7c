"""Priority classes: a named priority for workloads (higher wins) and whether they may be preempted
(docs/scheduling.md); `standard` (priority 0, not preemptible) always exists."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from better_compute.wire.common import PageCursor, PageLimit, WireAnswer, WireRequest
from better_compute.wire.device_classes import MAX_CLASS_NAME

MIN_PRIORITY = -1_000_000
MAX_PRIORITY = 1_000_000
"""The range of `priority` (the server's `priority_classes.MIN_PRIORITY`/`MAX_PRIORITY`; a test keeps
them equal)."""


class PriorityClassCreate(WireRequest):
    """`priorityClasses.create` (admin): `name` (as a device class's; it is the id), `priority` (an
    integer from -1,000,000 to 1,000,000, higher wins) and `preemptible` (default false)."""

    name: str = Field(json_schema_extra={"maxLength": MAX_CLASS_NAME})
    priority: int = Field(strict=True, json_schema_extra={"minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY})
    preemptible: bool = Field(default=False, strict=True)


class PriorityClassPublic(WireAnswer):
    """A priority class; `id` is its name."""

    id: str
    name: str
    priority: int
    preemptible: bool
    created_at: datetime


class PriorityClassListQuery(WireRequest):
    """`priorityClasses.list` (query parameters): by name."""

    limit: PageLimit = None
    cursor: PageCursor = None
