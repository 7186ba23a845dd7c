"""Time windows: durations, instants and the half-open windows a reservation books.

Every instant the domain keeps is timezone-aware and in UTC: a naive timestamp has no meaning a
fleet spread over regions could agree on, so it is refused rather than guessed. Windows are
half-open, ``[start, end)``, so a booking that ends at 12:00 and one that starts at 12:00 do not
overlap; ``end`` None is an open-ended window that never ends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise

from better_compute.domain.kernel.errors import InvalidInput

START_TOLERANCE = timedelta(seconds=60)
"""How far in the past a requested start may lie: clocks and round trips drift by a few seconds."""

MAX_DURATION_TEXT = 64
"""The longest duration text read, in characters. The longest sensible one (`P1W2DT3H4M5.25S`) is
15, so no real request comes near it; refusing longer text before reading any digit keeps parsing
cheap and clear of Python's refusal to convert digit runs past 4,300 digits to an integer."""

_UNIT_SECONDS: dict[str, int] = {"w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1}
_SHORT_PART = re.compile(r"(\d+)([wdhms])")
_SHORT_FORM = re.compile(r"(?:\d+[wdhms])+")
_ISO_FORM = re.compile(
    r"P(?!$)(?:(?P<w>\d+)W)?(?:(?P<d>\d+)D)?"
    r"(?:T(?!$)(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:[.,]\d+)?)S)?)?"
)
_DURATION_HELP = "use a positive duration such as 30m, 4h, 2d, 1h30m or an ISO 8601 duration such as PT4H"


def parse_duration(text: object, field: str = "duration") -> timedelta:
    """A positive duration from `30m`, `4h`, `2d`, `90s`, `1w`, `1h30m` or ISO 8601 (`PT4H`, `P1DT2H`).

    The short form takes its units largest first, each at most once, so `30m1h` (likely a typo) is
    refused instead of read. ISO years and months are refused: they have no fixed length, and a
    booking must know exactly when it ends. Text longer than MAX_DURATION_TEXT is refused unread.
    """
    if not isinstance(text, str):
        raise InvalidInput(f"{field} must be a string such as '4h'", {"field": field})
    if len(text) > MAX_DURATION_TEXT:
        # Not echoed: the text may be megabytes long.
        raise InvalidInput(
            f"{field} is {len(text)} characters long; a duration is at most {MAX_DURATION_TEXT} "
            f"characters ({_DURATION_HELP})",
            {"field": field, "maxLength": MAX_DURATION_TEXT},
        )
    raw = text.strip()
    seconds: float
    if _SHORT_FORM.fullmatch(raw):
        seconds = _short_seconds(raw, field)
    elif (iso := _ISO_FORM.fullmatch(raw.upper())) is not None:
        parts = iso.groupdict()
        seconds = sum(_UNIT_SECONDS[u] * int(v) for u, v in parts.items() if v is not None and u != "s")
        if parts["s"] is not None:
            seconds += float(parts["s"].replace(",", "."))
    else:
        upper = raw.upper()
        if upper.startswith("P") and re.search(r"\d+[YM]", upper.split("T")[0]):
            reason = "ISO years and months have no fixed length; use weeks, days or hours"
        else:
            reason = _DURATION_HELP
        raise InvalidInput(f"{field} {text!r} is not a duration: {reason}", {"field": field, "value": text})
    if seconds <= 0:
        raise InvalidInput(f"{field} must be positive, not {text!r}", {"field": field, "value": text})
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise InvalidInput(
            f"{field} {text!r} is too large to be a duration: a window must end by the year 9999",
            {"field": field, "value": text},
        ) from None


def _short_seconds(raw: str, field: str) -> int:
    units = [unit for _, unit in _SHORT_PART.findall(raw)]
    order = list(_UNIT_SECONDS)
    if any(order.index(a) >= order.index(b) for a, b in pairwise(units)):
        raise InvalidInput(
            f"{field} {raw!r} must give its units largest first, each once (as in 1h30m)",
            {"field": field, "value": raw},
        )
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in _SHORT_PART.findall(raw))


def parse_instant(text: object, field: str = "start") -> datetime:
    """A UTC instant from an ISO 8601 timestamp that carries its offset (`2025-01-01T10:00:00Z`)."""
    if not isinstance(text, str):
        raise InvalidInput(f"{field} must be an ISO 8601 timestamp string", {"field": field})
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(
            f"{field} {text!r} is not an ISO 8601 timestamp (such as 2025-01-01T10:00:00Z)",
            {"field": field, "value": text},
        ) from None
    return require_aware(value, field)


def require_aware(value: datetime, field: str) -> datetime:
    """`value` in UTC; a naive datetime is refused, since its zone would be a guess.

    A timestamp near either end of the calendar can leave it once its offset is applied
    (`9999-12-31T23:59:59-23:59` is in the year 10000 in UTC), which no datetime can hold: that is
    the caller's input out of range, refused by name, not an error of the server.
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(f"{field} must carry a timezone (such as a trailing Z for UTC)", {"field": field})
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise InvalidInput(
            f"{field} {value.isoformat()} is outside the years 1 to 9999 once converted to UTC",
            {"field": field, "value": value.isoformat()},
        ) from None


@dataclass(frozen=True)
class Window:
    """A half-open window `[start, end)` in UTC; `end` None never ends.

    Construction normalises both ends to UTC and refuses naive datetimes and empty or inverted
    windows, so every Window in the system is one the ledger can store as a range.
    """

    start: datetime
    end: datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", require_aware(self.start, "start"))
        if self.end is not None:
            end = require_aware(self.end, "end")
            if end <= self.start:
                raise InvalidInput(
                    "end must be after start",
                    {"field": "end", "start": self.start.isoformat(), "end": end.isoformat()},
                )
            object.__setattr__(self, "end", end)

    @property
    def open_ended(self) -> bool:
        return self.end is None

    @property
    def duration(self) -> timedelta | None:
        """The window's length; None when open-ended."""
        return None if self.end is None else self.end - self.start

    def overlaps(self, other: Window) -> bool:
        """Whether the two windows share any instant (touching ends do not)."""
        return (other.end is None or self.start < other.end) and (self.end is None or other.start < self.end)

    def contains(self, instant: datetime) -> bool:
        at = require_aware(instant, "instant")
        return self.start <= at and (self.end is None or at < self.end)


def window_for(start: datetime | None, duration: timedelta | str | None, now: datetime) -> Window:
    """The window a reservation asks for: from `start` (default: now) for `duration` (None: open-ended).

    A start a little in the past (up to START_TOLERANCE, for clock skew and slow round trips) is
    moved to `now`, so nothing is booked in the past; further back it is refused, because a booking
    that began before it was made would claim time that has already been used by someone else.
    """
    current = require_aware(now, "now")
    begin = current if start is None else require_aware(start, "start")
    if begin < current - START_TOLERANCE:
        raise InvalidInput(
            f"start {begin.isoformat()} is in the past; omit start to begin now",
            {"field": "start", "value": begin.isoformat(), "now": current.isoformat()},
        )
    begin = max(begin, current)
    length = parse_duration(duration) if isinstance(duration, str) else duration
    if length is not None and length <= timedelta(0):
        raise InvalidInput("duration must be positive", {"field": "duration"})
    try:
        return Window(begin, None if length is None else begin + length)
    except OverflowError:
        raise InvalidInput(
            "the window would end after the year 9999; choose an earlier start or a shorter duration",
            {"field": "duration", "start": begin.isoformat()},
        ) from None


DEFAULT_ASKED_WINDOW = timedelta(hours=1)
"""The window a read (`capacity.free`, `quotas.list`) asks about when no `to` is given: an hour."""


def window_asked(start: datetime | None, end: datetime | None, now: datetime) -> Window:
    """The window a read such as `capacity.free` asks about: from `start` (default now) to `end` (default an
    hour later); an end not after the start is INVALID_INPUT naming `to`."""
    begin = now if start is None else require_aware(start, "from")
    finish = begin + DEFAULT_ASKED_WINDOW if end is None else require_aware(end, "to")
    if finish <= begin:
        raise InvalidInput(
            f"to ({finish.isoformat()}) must be after from ({begin.isoformat()})",
            {"field": "to", "from": begin.isoformat(), "to": finish.isoformat()},
        )
    return Window(begin, finish)
