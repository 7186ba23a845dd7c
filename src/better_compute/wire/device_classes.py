"""Device classes: a named atom class and selector (`h100-80gb-sxm` = `gpu` with `gpuModel In
[H100-80GB]`), which workloads and quotas name instead of spelling the selector."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from better_compute.wire.common import PageCursor, PageLimit, WireAnswer, WireRequest
from better_compute.wire.quotas import AtomClass
from better_compute.wire.reservations import Selector, SelectorPublic

MAX_CLASS_NAME = 63
"""The longest device or priority class name (the server's `tenancy.MAX_CLASS_NAME`; a test keeps
them equal). Declared in OpenAPI only: the server's own check names the rule it breaks."""


class DeviceClassCreate(WireRequest):
    """`deviceClasses.create` (admin): `name` (1-63 lowercase letters, digits, `-` or `.`, starting and
    ending with a letter or digit; it is the class's id), `class` (`gpu`, `gpu.mig` or `gpu.slot`)
    and `selector` over atom attributes, as a device request's (at most 32 expressions of at most
    256 values); no selector: every atom of the class."""

    name: str = Field(json_schema_extra={"maxLength": MAX_CLASS_NAME})
    cls: AtomClass = Field(alias="class")
    selector: Selector | None = None


class DeviceClassPublic(WireAnswer):
    """A device class; `id` is its name."""

    id: str
    name: str
    cls: AtomClass = Field(alias="class")
    selector: SelectorPublic
    created_at: datetime


class DeviceClassListQuery(WireRequest):
    """`deviceClasses.list` (query parameters): by name."""

    limit: PageLimit = None
    cursor: PageCursor = None
