"""`events.list`'s `since` and `last` on both stores, through the service over the real store: the
newest events read from the stream's end are exactly the forward stream's last ones, across the
events logged before transactions were recorded (PostgreSQL's `tx` NULL rows) and those after."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import insert

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.tenancy.credentials import Principal
from better_compute.domain.tenancy.events import TenantCreated
from better_compute.service.ops import events
from better_compute.storage.kernel.tables import events as events_table
from better_compute.storage.store import Store
from tests.builders import T0

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="g-admin")


def _log(store: Store, names: list[str], minutes: int) -> None:
    with store.begin() as tx:
        for name in names:
            tx.events.append(TenantCreated(name, name.upper()), T0 + timedelta(minutes=minutes))


def _legacy(store: Store, names: list[str]) -> None:
    """Events as a version before the transaction column wrote them (`tx` NULL), logged at T0."""
    with store.engine.begin() as conn:
        rows = [
            {"type": "tenant.created", "subject": n, "payload": {"name": n}, "at": T0, "tx": None}
            for n in names
        ]
        conn.execute(insert(events_table), rows)


def _forward(store: Store, **query: object) -> list[str]:
    found: list[str] = []
    after: str | None = None
    while True:
        page = events.list_events(store, ADMIN, after=after, limit=2, **query)  # type: ignore[arg-type]
        found += [e.event.subject for e in page.items]
        if page.next_cursor is None:
            return found
        after = page.next_cursor


def test_last_is_the_end_of_the_forward_stream_in_its_order(store: Store) -> None:
    _legacy(store, ["old1", "old2"])
    _log(store, ["a", "b"], 0)
    _log(store, ["c"], 10)
    _log(store, ["d", "e"], 20)
    whole = _forward(store)
    assert whole == ["old1", "old2", "a", "b", "c", "d", "e"]
    for n in range(1, len(whole) + 3):
        newest = events.list_events(store, ADMIN, last=n)
        assert [e.event.subject for e in newest.items] == whole[-n:], n
        assert newest.next_cursor is None
    ids = [e.id for e in events.list_events(store, ADMIN, last=10).items]
    # After a cursor: the newest of what follows it, never the cursor's own event or one before.
    after_old1 = events.list_events(store, ADMIN, after=str(ids[0]), last=10)
    assert [e.event.subject for e in after_old1.items] == whole[1:]
    after_b = events.list_events(store, ADMIN, after=str(ids[3]), last=2)
    assert [e.event.subject for e in after_b.items] == ["d", "e"]
    assert events.list_events(store, ADMIN, after=str(ids[-1]), last=5).items == []


def test_since_keeps_the_events_logged_at_or_after_it_on_every_page(store: Store) -> None:
    _legacy(store, ["old"])
    _log(store, ["a", "b"], 0)
    _log(store, ["c"], 10)
    _log(store, ["d", "e"], 20)
    assert _forward(store, since=T0 + timedelta(minutes=10)) == ["c", "d", "e"]
    assert _forward(store, since=T0) == ["old", "a", "b", "c", "d", "e"]
    assert _forward(store, since=T0 + timedelta(minutes=10, microseconds=1)) == ["d", "e"]
    assert _forward(store, since=T0 + timedelta(days=1)) == []
    newest = events.list_events(store, ADMIN, since=T0 + timedelta(minutes=10), last=5)
    assert [e.event.subject for e in newest.items] == ["c", "d", "e"]


def test_since_time_reads_a_zoned_time_or_a_span_back_from_the_servers_clock() -> None:
    now = T0 + timedelta(hours=5)
    assert events.since_time("2026-12-01T09:30:00Z", now) == T0 + timedelta(minutes=30)
    assert events.since_time("2026-12-01T11:30:00+02:00", now) == T0 + timedelta(minutes=30)
    assert events.since_time("1h", now) == now - timedelta(hours=1)
    assert events.since_time("1h30m", now) == now - timedelta(minutes=90)
    assert events.since_time("PT30M", now) == now - timedelta(minutes=30)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("2026-12-01T09:30:00", "has no zone"),
        ("2026-12-01", "has no zone"),
        ("2026-13-01T09:00:00Z", "is not a time"),
        ("yesterday", "is neither a time nor a duration"),
        ("-1h", "is neither a time nor a duration"),
        ("0m", "is neither a time nor a duration"),
        ("1h" * 40, "characters long"),
        ("100000000w", "reaches back before the year 1"),
    ],
)
def test_since_time_refuses_what_it_cannot_read_naming_since(text: str, says: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        events.since_time(text, T0)
    assert refused.value.message.startswith("since ") and says in refused.value.message
    assert refused.value.details["field"] == "since"


def test_last_with_limit_or_out_of_range_is_refused(store: Store) -> None:
    with pytest.raises(InvalidInput, match="last and limit are not given together"):
        events.list_events(store, ADMIN, last=2, limit=2)
    for bad in (0, 1001):
        with pytest.raises(InvalidInput, match="last must be 1 to 1000"):
            events.list_events(store, ADMIN, last=bad)
