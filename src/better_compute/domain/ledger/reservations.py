"""Reservations: idempotent creation, their status over time, cancel and release.

The rules as users read them: docs/concepts.md#reservations.

The stored status records only what a user did (`scheduled`, `cancelled`, `released`); whether a
scheduled reservation is `active` or `ended` follows from its window and the clock, so it is
computed (`status_at`) rather than written by a timer that could run late.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta
from enum import StrEnum
from typing import Any

from better_compute.domain.kernel.errors import IdempotencyKeyReused, InvalidInput, InvalidState
from better_compute.domain.kernel.timewin import Window, require_aware

IDEMPOTENCY_FIELD = "idempotencyKey"
ID_PREFIX = "rsv-"
_ID_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyz")


class ReservationStatus(StrEnum):
    """`scheduled` before its start, `active` inside its window, `ended` after it; `cancelled` when
    cancelled before its start, `released` when released early inside its window."""

    SCHEDULED = "scheduled"
    ACTIVE = "active"
    ENDED = "ended"
    CANCELLED = "cancelled"
    RELEASED = "released"


TRANSITIONS: Mapping[ReservationStatus, frozenset[ReservationStatus]] = {
    ReservationStatus.SCHEDULED: frozenset({ReservationStatus.ACTIVE, ReservationStatus.CANCELLED}),
    ReservationStatus.ACTIVE: frozenset({ReservationStatus.ENDED, ReservationStatus.RELEASED}),
    ReservationStatus.ENDED: frozenset(),
    ReservationStatus.CANCELLED: frozenset(),
    ReservationStatus.RELEASED: frozenset(),
}
"""The legal moves. `active` and `ended` are reached by time, `cancelled` and `released` by a user."""

STORED_STATUSES: frozenset[ReservationStatus] = frozenset(
    {ReservationStatus.SCHEDULED, ReservationStatus.CANCELLED, ReservationStatus.RELEASED}
)
"""What is kept in storage; the others are derived from the window by `status_at`."""


def can_transition(current: ReservationStatus, target: ReservationStatus) -> bool:
    """Whether a reservation `current` may move to `target` (what cancel and release ask)."""
    return target in TRANSITIONS[current]


def status_at(window: Window, stored: ReservationStatus | str, now: datetime) -> ReservationStatus:
    """The reservation's status at `now`: a user's cancel or release stands; otherwise the window
    decides between scheduled, active and ended."""
    status = ReservationStatus(stored)
    if status in (ReservationStatus.CANCELLED, ReservationStatus.RELEASED):
        return status
    at = require_aware(now, "now")
    if at < window.start:
        return ReservationStatus.SCHEDULED
    if window.end is None or at < window.end:
        return ReservationStatus.ACTIVE
    return ReservationStatus.ENDED


def check_cancel(window: Window, stored: ReservationStatus | str, now: datetime) -> None:
    """A reservation may be cancelled only before it starts: its whole window frees.

    Once it has started, someone may be using the atoms, and cancelling would erase the record of
    the time already used (and billed); release ends it now instead.
    """
    status = status_at(window, stored, now)
    if can_transition(status, ReservationStatus.CANCELLED):
        return
    if status is ReservationStatus.ACTIVE:
        raise InvalidState(
            "the reservation has already started and cannot be cancelled; release it to end it now",
            {"status": status.value, "start": window.start.isoformat()},
        )
    raise InvalidState(
        f"the reservation is already {status.value} and cannot be cancelled", {"status": status.value}
    )


def release_end(window: Window, stored: ReservationStatus | str, now: datetime) -> datetime:
    """When a released reservation ends: `now`. Only an active reservation can be released.

    The bookings are cut to end at the returned instant, so the rest of the window frees for others.
    A scheduled one is cancelled instead (nothing was used); an ended one has nothing left to free.
    """
    status = status_at(window, stored, now)
    if can_transition(status, ReservationStatus.RELEASED):
        return require_aware(now, "now")
    if status is ReservationStatus.SCHEDULED:
        raise InvalidState(
            "the reservation has not started yet and cannot be released; cancel it instead",
            {"status": status.value, "start": window.start.isoformat()},
        )
    raise InvalidState(
        f"the reservation is already {status.value} and cannot be released", {"status": status.value}
    )


def extended_end(window: Window, stored: ReservationStatus | str, by: timedelta, now: datetime) -> datetime:
    """When a reservation extended by `by` ends: its end moved later by `by`. Only a reservation
    that is scheduled or active may be extended; one that has ended, or was cancelled or released,
    has given its atoms back, and booking them again is a new reservation.

    Whether the atoms are free for the added time is the ledger's to say (the exclusion constraint on
    PostgreSQL), not this rule's: another booking may commit between any read and the write.
    """
    status = status_at(window, stored, now)
    if status not in (ReservationStatus.SCHEDULED, ReservationStatus.ACTIVE) or window.end is None:
        raise InvalidState(
            f"the reservation is already {status.value} and cannot be extended; make a new reservation",
            {"status": status.value},
        )
    if by <= timedelta(0):
        raise InvalidInput("duration must be positive", {"field": "duration"})
    try:
        return window.end + by
    except OverflowError:
        raise InvalidInput(
            "the reservation would end after the year 9999; choose a shorter duration",
            {"field": "duration"},
        ) from None


def request_fingerprint(body: Mapping[str, Any]) -> str:
    """The sha256 of the request in canonical JSON, without its idempotency key.

    Keys are sorted and null fields dropped (at every depth), so the same request sent by different
    clients, with or without explicit nulls, has the same fingerprint; anything else that differs,
    even list order, makes a different request. Datetimes become UTC ISO 8601; strings are kept as
    sent, so pass the body as the client sent it (or as its model dumps in JSON mode).
    """
    payload = {k: v for k, v in body.items() if k != IDEMPOTENCY_FIELD}
    text = json.dumps(
        _canonical(payload), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _canonical(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items() if v is not None}
    if isinstance(value, str | bytes):
        return value.decode() if isinstance(value, bytes) else value
    if isinstance(value, Sequence):
        return [_canonical(v) for v in value]
    if isinstance(value, datetime):
        return require_aware(value, "start").isoformat()
    if isinstance(value, date):
        return value.isoformat()
    return value


def check_replay(idempotency_key: str, stored_fingerprint: str, fingerprint: str) -> None:
    """A retry with the same key must be the same request; then the first reservation is returned.

    Two different requests under one key are a client bug: answering either with the other's
    reservation would hand someone atoms they did not ask for.
    """
    if stored_fingerprint != fingerprint:
        raise IdempotencyKeyReused(
            f"idempotencyKey {idempotency_key!r} was used with a different request; "
            "use a new key for a new request",
            {"idempotencyKey": idempotency_key},
        )


def check_cursor(cursor: str) -> None:
    """A list cursor is the id of the last reservation of the previous page (`rsv-` and lowercase
    letters or digits). Anything else was not given by a list, so it is refused rather than
    answered with an empty page that reads as "no reservations"."""
    rest = cursor.removeprefix(ID_PREFIX)
    if rest == cursor or not rest or not set(rest) <= _ID_CHARS:
        raise InvalidInput(
            f"cursor {cursor!r} is not a reservation id; pass the nextCursor of a previous page",
            {"field": "cursor"},
        )
