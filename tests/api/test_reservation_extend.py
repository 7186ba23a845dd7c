"""`reservations.extend` through the real app, on SQLite and PostgreSQL: a reservation's end moves
later on the atoms it holds, unless someone else holds one of them then, or quota does not cover it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from better_compute.storage.store import Store
from tests.api.test_reservations import World, error


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


GPUS4 = [{"class": "gpu", "count": 4}]


def extend(w: World, who: dict[str, str], rid: str, duration: str) -> Any:
    return w.http.post(f"/v1/reservations/{rid}/extend", json={"id": rid, "duration": duration}, headers=who)


def test_an_extended_reservation_ends_later_and_others_see_it_busy(world: World) -> None:
    first = world.reserve(world.platform, "a100", GPUS4, duration="4h")
    assert first.status_code == 201, first.text
    rid = first.json()["id"]
    r = extend(world, world.platform, rid, "2h")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["end"].startswith("2026-12-01T15:00:00") and body["status"] == "active"
    assert sorted(a["id"] for a in body["atoms"]) == sorted(a["id"] for a in first.json()["atoms"])
    assert world.http.get(f"/v1/reservations/{rid}", headers=world.platform).json()["end"] == body["end"]
    # The booking index learnt the new end: a booking of every GPU from 13:00 waits for 15:00.
    later = world.reserve(world.platform, "a100", GPUS4, start="2026-12-01T13:00:00Z", duration="1h")
    assert later.status_code == 409 and error(later)["code"] == "INSUFFICIENT_CAPACITY"
    assert error(later)["details"]["earliestStart"].startswith("2026-12-01T15:00:00")


def test_an_extension_over_another_booking_is_a_conflict_naming_the_atom_and_when_it_is_free(
    world: World,
) -> None:
    first = world.reserve(world.platform, "a100", GPUS4, duration="4h")
    nxt = world.reserve(world.platform, "a100", GPUS4, start="2026-12-01T13:00:00Z", duration="4h")
    assert first.status_code == nxt.status_code == 201, nxt.text
    rid = first.json()["id"]
    r = extend(world, world.platform, rid, "1h")
    assert r.status_code == 409
    refused = error(r)
    assert refused["code"] == "CONFLICT"
    assert refused["details"]["atomId"] in {a["id"] for a in first.json()["atoms"]}
    assert refused["details"]["freeFrom"].startswith("2026-12-01T17:00:00")
    assert "extended to 2026-12-01T13:00:00+00:00 at most" in refused["message"]
    kept = world.http.get(f"/v1/reservations/{rid}", headers=world.platform).json()
    assert kept["end"].startswith("2026-12-01T13:00:00")


def test_an_extension_counts_against_quota_like_a_new_reservation(world: World) -> None:
    world.offer("a100", "acme", gpu=2)
    two = [{"class": "gpu", "count": 2}]
    first = world.reserve(world.acme, "a100", two, duration="4h")
    nxt = world.reserve(world.acme, "a100", two, start="2026-12-01T13:00:00Z", duration="4h")
    assert first.status_code == nxt.status_code == 201, nxt.text
    r = extend(world, world.acme, first.json()["id"], "1h")
    assert r.status_code == 409 and error(r)["code"] == "QUOTA_EXCEEDED"
    free = extend(world, world.acme, nxt.json()["id"], "1h")  # nothing of acme's after 17:00
    assert free.status_code == 200, free.text


def test_only_a_scheduled_or_active_reservation_of_ones_own_may_be_extended(world: World) -> None:
    world.offer("a100", "acme", gpu=4)
    mine = world.reserve(world.acme, "a100", [{"class": "gpu", "count": 1}], duration="1h").json()["id"]
    other = extend(world, world.globex, mine, "1h")
    assert other.status_code == 404 and error(other)["code"] == "NOT_FOUND"
    bad = extend(world, world.acme, mine, "soon")
    assert bad.status_code == 400 and error(bad)["code"] == "INVALID_INPUT"
    world.clock.now += timedelta(hours=2)
    ended = extend(world, world.acme, mine, "1h")
    assert ended.status_code == 409 and error(ended)["code"] == "INVALID_STATE"
    assert "ended and cannot be extended" in error(ended)["message"]


def test_extend_refuses_unknown_fields(store: Store) -> None:
    w = World(store)
    rid = w.reserve(w.platform, "a100", GPUS4).json()["id"]
    r = w.http.post(
        f"/v1/reservations/{rid}/extend", json={"id": rid, "duration": "1h", "until": "x"}, headers=w.platform
    )
    assert r.status_code == 400 and error(r)["code"] == "INVALID_INPUT"


def test_a_pools_max_duration_holds_at_admission_and_at_extend(world: World) -> None:
    bad = world.http.patch(
        "/v1/pools/a100", json={"id": "a100", "policy": {"maxDuration": "forever"}}, headers=world.admin
    )
    assert bad.status_code == 400 and "maxDuration" in error(bad)["message"]
    set_ = world.http.patch(
        "/v1/pools/a100", json={"id": "a100", "policy": {"maxDuration": "6h"}}, headers=world.admin
    )
    assert set_.status_code == 200, set_.text
    assert set_.json()["policy"]["maxDuration"] == "6h"
    long = world.reserve(world.platform, "a100", GPUS4, duration="8h")
    assert long.status_code == 400 and error(long)["code"] == "INVALID_INPUT"
    assert error(long)["message"] == (
        "pool a100 allows reservations of at most 6h; this one would be 8h long"
    )
    assert error(long)["details"]["maxDuration"] == "6h"
    ok = world.reserve(world.platform, "a100", GPUS4, duration="4h")
    assert ok.status_code == 201, ok.text
    rid = ok.json()["id"]
    over = extend(world, world.platform, rid, "3h")
    assert over.status_code == 400 and "this one would be 7h long" in error(over)["message"]
    assert extend(world, world.platform, rid, "2h").status_code == 200
    # Other settings are kept beside it: a mig pool's layout is untouched by a new maxDuration.
    mig = world.http.patch(
        "/v1/pools/h100", json={"id": "h100", "policy": {"maxDuration": "1d"}}, headers=world.admin
    )
    assert mig.status_code == 200, mig.text
    policy = mig.json()["policy"]
    assert (policy["migLayout"], policy["maxDuration"]) == ("mixed:3g.40gb+2x2g.20gb", "1d")
    day = world.reserve(world.platform, "h100", [{"class": "gpu.mig", "count": 1}], duration="2d")
    assert "at most 1d (24h); this one would be 48h long" in error(day)["message"]


def test_an_extension_is_in_the_events_stream_for_its_tenant(world: World) -> None:
    """Regression: an extension logged only `ledger.extended`, which tenants do not read."""
    made = world.reserve(world.platform, "a100", [{"class": "gpu", "count": 1}], duration="1h")
    rid = made.json()["id"]
    assert extend(world, world.platform, rid, "30m").status_code == 200
    events = world.http.get("/v1/events", params={"type": "reservation.extended"}, headers=world.platform)
    assert events.status_code == 200, events.text
    (event,) = events.json()["items"]
    assert event["subject"] == rid and event["payload"]["end"].startswith("2026-12-01T10:30:00")
    other = world.http.get("/v1/events", params={"type": "reservation.extended"}, headers=world.acme)
    assert other.json()["items"] == []
