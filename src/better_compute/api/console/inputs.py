"""What the console's forms and queries take: each value read leniently (a page never fails on a
query; it shows the nearest it may), and the reserve form's body for admission to check."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from better_compute.domain.kernel.timewin import Window
from better_compute.domain.metering.accounting import Grid
from better_compute.domain.metering.billing import month_of
from better_compute.domain.tenancy.credentials import Principal

if TYPE_CHECKING:
    from better_compute.service.ops.console import PoolChoice

DEFAULT_DAYS = 1
MAX_DAYS = 31
"""How far either side of now the bookings timeline reaches by default, and at most; the usage
page's reach into the past, likewise."""


def whole_number(text: str) -> bool:
    """ASCII digits only: `"²".isdigit()` is true, but `int("²")` fails."""
    return text.isascii() and text.isdigit()


def days_of(text: str | None) -> int:
    """The timeline's reach either side of now, in days: the default when not a number, held
    within 1 to MAX_DAYS (a page never refuses a range; it shows the nearest it may)."""
    try:
        asked = int(text) if text is not None else DEFAULT_DAYS
    except ValueError:
        asked = DEFAULT_DAYS
    return max(1, min(MAX_DAYS, asked))


HOURLY_DAYS = 2
"""The usage page draws hourly bars for up to this many days, daily bars beyond."""
WORKLOADS_SHOWN = 100
"""Workloads the placement page lists (`workloads list` has the rest)."""
EVENTS_PER_PAGE = 50
MAX_PAYLOAD_SHOWN = 400
"""Characters of an event's payload a row shows (`events.list` has the whole)."""
DOCTOR_SILENT_AFTER = timedelta(minutes=10)
"""How long without a signed report or spec read makes a joined node silent, as `better-compute
doctor` defaults."""

CLASSES = ("gpu", "gpu.mig", "gpu.slot")
"""The device classes the reserve form offers."""


def opening_form(choices: Sequence[PoolChoice]) -> dict[str, str]:
    """What the reserve form shows before anything is typed: the first pool, the class it is booked
    by and, for MIG instances, its smallest profile, a combination admission takes (before, every
    pool opened on `gpu.mig`, which an exclusive or shared pool refuses)."""
    if not choices:
        return {}
    first = choices[0]
    form = {"pool": first.id, "class": first.cls}
    if first.cls == "gpu.mig" and first.profiles:
        form["profile"] = first.profiles[0]
    return form


def reservation_body(form: Mapping[str, str], principal: Principal) -> dict[str, Any]:
    """The `reservations.create` body the reserve form asks for: what admission then checks, as it
    checks the API's (every field's limits and refusals are admission's own)."""
    device: dict[str, Any] = {"class": form.get("class", "gpu")}
    count = form.get("count", "1").strip()
    device["count"] = int(count) if whole_number(count) else count
    profile = form.get("profile", "").strip()
    if profile:
        device["selector"] = {"matchExpressions": [{"key": "migProfile", "op": "In", "values": [profile]}]}
    if form.get("sameGpu"):
        # checked: asked as the API asks it; admission refuses it on a class other than gpu.slot
        device["sameGpu"] = True
    body: dict[str, Any] = {
        "poolId": form.get("pool", ""),
        "duration": form.get("duration", "").strip(),
        "devices": [device],
    }
    start = form.get("start", "").strip()
    if start:
        body["start"] = start
    tenant = form.get("tenant", "").strip()
    if principal.is_admin and tenant:
        body["tenantId"] = tenant
    return body


MONTH = re.compile(r"^(\d{4})-(\d{2})$")
STATE_ORDER = ("booked", "changing", "unhealthy", "cordoned", "free")
"""The capacity chart's stack, bottom up: use first, idle last."""


def month_named(text: str | None, now: datetime) -> Window:
    """The calendar month (UTC) `YYYY-MM` names; this month when it names none."""
    found = MONTH.match(text or "")
    if found and 1 <= int(found[2]) <= 12 and 1970 <= int(found[1]) <= 9998:
        return month_of(datetime(int(found[1]), int(found[2]), 1, tzinfo=UTC))
    return month_of(now)


def bucket_label(window: Window, grid: Grid) -> str:
    return window.start.strftime("%H:%M" if grid.size < timedelta(days=1) else "%m-%d")


def whole(text: str | None) -> int | str:
    """A form's whole number, or its text as typed, for the parser to refuse by name."""
    value = (text or "1").strip()
    return int(value) if whole_number(value) else value
