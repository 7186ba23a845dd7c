"""Reservations: idempotency fingerprints, status over time, cancel and release."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from better_compute.domain.kernel.errors import IdempotencyKeyReused, InvalidState
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.reservations import (
    STORED_STATUSES,
    TRANSITIONS,
    ReservationStatus,
    can_transition,
    check_cancel,
    check_replay,
    release_end,
    request_fingerprint,
    status_at,
)

T0 = datetime(2025, 3, 1, 12, tzinfo=UTC)
WINDOW = Window(T0, T0 + timedelta(hours=4))
S = ReservationStatus

BODY: dict[str, Any] = {
    "tenantId": "acme",
    "poolId": "pool-1",
    "devices": [
        {
            "class": "gpu.mig",
            "count": 1,
            "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]},
        }
    ],
    "duration": "4h",
    "idempotencyKey": "notebook-ana-0924",
}


def test_the_fingerprint_ignores_the_key_key_order_and_nulls() -> None:
    fp = request_fingerprint(BODY)
    assert len(fp) == 64 and int(fp, 16) >= 0
    assert request_fingerprint({**BODY, "idempotencyKey": "other"}) == fp
    assert request_fingerprint({k: BODY[k] for k in reversed(list(BODY))}) == fp
    assert request_fingerprint({**BODY, "start": None}) == fp
    devices = [{**BODY["devices"][0], "sharing": None}]
    assert request_fingerprint({**BODY, "devices": devices}) == fp


def test_the_fingerprint_changes_with_the_request() -> None:
    fp = request_fingerprint(BODY)
    assert request_fingerprint({**BODY, "duration": "5h"}) != fp
    assert request_fingerprint({**BODY, "devices": [{**BODY["devices"][0], "count": 2}]}) != fp
    assert request_fingerprint({**BODY, "start": "2025-03-01T12:00:00Z"}) != fp


def test_the_fingerprint_reads_datetimes_in_utc() -> None:
    a = request_fingerprint({**BODY, "start": T0})
    b = request_fingerprint({**BODY, "start": T0.astimezone(timezone(timedelta(hours=2)))})
    assert a == b


@given(st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=5)), max_size=6))
def test_the_fingerprint_does_not_depend_on_insertion_order(body: dict[str, Any]) -> None:
    assert request_fingerprint(body) == request_fingerprint(dict(reversed(list(body.items()))))


def test_a_replay_with_a_different_request_is_refused() -> None:
    check_replay("k1", "abc", "abc")
    with pytest.raises(IdempotencyKeyReused) as err:
        check_replay("k1", "abc", "abd")
    assert err.value.code == "INVALID_STATE"
    assert err.value.message.startswith("idempotencyKey 'k1' was used with a different request")
    assert err.value.details == {"idempotencyKey": "k1", "reason": "idempotency_key_reused"}


def test_status_follows_the_window() -> None:
    assert status_at(WINDOW, "scheduled", T0 - timedelta(seconds=1)) is S.SCHEDULED
    assert status_at(WINDOW, S.SCHEDULED, T0) is S.ACTIVE
    assert status_at(WINDOW, S.SCHEDULED, T0 + timedelta(hours=4) - timedelta(microseconds=1)) is S.ACTIVE
    assert status_at(WINDOW, S.SCHEDULED, T0 + timedelta(hours=4)) is S.ENDED
    assert status_at(Window(T0, None), S.SCHEDULED, T0 + timedelta(days=999)) is S.ACTIVE


def test_a_users_cancel_or_release_stands() -> None:
    assert status_at(WINDOW, S.CANCELLED, T0 + timedelta(hours=1)) is S.CANCELLED
    assert status_at(WINDOW, "released", T0 - timedelta(hours=1)) is S.RELEASED


def test_transitions() -> None:
    assert can_transition(S.SCHEDULED, S.ACTIVE) and can_transition(S.SCHEDULED, S.CANCELLED)
    assert can_transition(S.ACTIVE, S.ENDED) and can_transition(S.ACTIVE, S.RELEASED)
    assert not can_transition(S.SCHEDULED, S.RELEASED)
    assert not can_transition(S.ACTIVE, S.CANCELLED)
    assert all(not TRANSITIONS[s] for s in (S.ENDED, S.CANCELLED, S.RELEASED))
    assert {S.ACTIVE, S.ENDED}.isdisjoint(STORED_STATUSES)


def test_cancel_only_before_the_start() -> None:
    check_cancel(WINDOW, S.SCHEDULED, T0 - timedelta(minutes=1))
    with pytest.raises(InvalidState, match="release it to end it now"):
        check_cancel(WINDOW, S.SCHEDULED, T0)
    with pytest.raises(InvalidState, match="already ended"):
        check_cancel(WINDOW, S.SCHEDULED, T0 + timedelta(hours=5))
    with pytest.raises(InvalidState, match="already cancelled"):
        check_cancel(WINDOW, S.CANCELLED, T0 - timedelta(hours=1))


def test_release_only_while_active_and_it_ends_now() -> None:
    now = T0 + timedelta(hours=1)
    assert release_end(WINDOW, S.SCHEDULED, now) == now
    with pytest.raises(InvalidState, match="cancel it instead"):
        release_end(WINDOW, S.SCHEDULED, T0 - timedelta(seconds=1))
    with pytest.raises(InvalidState, match="already ended"):
        release_end(WINDOW, S.SCHEDULED, T0 + timedelta(hours=4))
    with pytest.raises(InvalidState, match="already released"):
        release_end(WINDOW, S.RELEASED, now)
