"""`events.list` through the real app, on SQLite and PostgreSQL: the stream pages without skipping or
repeating, filters by type and subject, shows a tenant only the events about itself, and refuses bad
input as INVALID_INPUT."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from better_compute.domain.ops import event_types as ev
from better_compute.domain.ops.audience import ADMIN_ONLY, TENANT_AUDIENCE
from better_compute.storage.store import Store
from tests.api.test_reservations import World, error
from tests.builders import T0, stored_events

GPUS = [{"class": "gpu", "count": 1}]


@pytest.fixture
def world(store: Store) -> World:
    w = World(store)
    w.offer("a100", "acme", gpu=2)
    w.offer("a100", "globex", gpu=2)
    return w


def page(w: World, who: dict[str, str], **query: Any) -> Any:
    r = w.http.get("/v1/events", params=query, headers=who)
    assert r.status_code == 200, r.text
    return r.json()


def follow(w: World, who: dict[str, str], *, limit: int, **query: Any) -> list[dict[str, Any]]:
    """Every event the stream holds now, page by page as a client follows `nextCursor`."""
    items: list[dict[str, Any]] = []
    after: str | None = None
    while True:
        got = page(w, who, limit=limit, **query, **({"after": after} if after else {}))
        items += got["items"]
        if not got["nextCursor"]:
            return items
        assert got["nextCursor"] == str(got["items"][-1]["id"])
        after = got["nextCursor"]


def test_every_event_type_is_a_tenants_or_the_admins_by_decision() -> None:
    assert set(TENANT_AUDIENCE) | ADMIN_ONLY == set(ev.EVENT_TYPES)
    assert not set(TENANT_AUDIENCE) & ADMIN_ONLY


def test_the_admin_pages_through_every_event_once_in_log_order(world: World, store: Store) -> None:
    for _ in range(3):
        assert world.reserve(world.platform, "a100", GPUS).status_code == 201
    logged = [int(str(e["id"])) for e in stored_events(store)]
    for size in (1, 2, 7, 1000):
        items = follow(world, world.admin, limit=size)
        assert [i["id"] for i in items] == logged, size
    first = page(world, world.admin, limit=1)["items"][0]
    assert set(first) == {"id", "type", "subject", "time", "payload"}
    assert first["type"] == "credential.created" or "." in first["type"]
    # The end of the stream has no cursor; a follower asks again after the last id it received.
    last = items[-1]["id"]
    assert page(world, world.admin, after=str(last)) == {"items": [], "nextCursor": None}
    world.reserve(world.platform, "a100", GPUS)
    fresh = page(world, world.admin, after=str(last))["items"]
    assert [i["type"] for i in fresh] == ["ledger.booked", "reservation.created"]
    assert all(i["id"] > last for i in fresh)


def test_an_event_reads_as_its_definition_with_its_time(world: World) -> None:
    made = world.reserve(world.acme, "a100", GPUS, duration="2h").json()
    booked = page(world, world.admin, type="ledger.booked")["items"]
    assert booked == [
        {
            "id": booked[0]["id"],
            "type": "ledger.booked",
            "subject": made["id"],
            "time": "2026-12-01T09:00:00Z",
            "payload": {
                "atoms": [made["atoms"][0]["id"]],
                "start": "2026-12-01T09:00:00+00:00",
                "end": "2026-12-01T11:00:00+00:00",
                "tenantId": "acme",
                "poolId": "a100",
                "class": "gpu",
                "gpuId": made["atoms"][0]["gpuId"],
            },
        }
    ]


def test_filters_by_type_and_subject(world: World) -> None:
    one = world.reserve(world.acme, "a100", GPUS).json()["id"]
    two = world.reserve(world.platform, "a100", [{"class": "gpu", "count": 2}]).json()["id"]
    world.clock.now = T0 + timedelta(minutes=30)
    assert world.http.post(f"/v1/reservations/{one}/release", headers=world.acme).status_code == 200
    created = page(world, world.admin, type="reservation.created")["items"]
    assert [i["subject"] for i in created] == [one, two]
    about_one = page(world, world.admin, subject=one)["items"]
    assert [i["type"] for i in about_one] == [
        "ledger.booked",
        "reservation.created",
        "ledger.released",
        "reservation.released",
    ]
    both = page(world, world.admin, subject=two, type="ledger.booked")["items"]
    assert len(both) == 2 and {i["subject"] for i in both} == {two}


@pytest.mark.parametrize("who", ["admin", "acme"])
def test_an_unknown_type_is_refused_with_the_known_types(world: World, who: str) -> None:
    r = world.http.get("/v1/events", params={"type": "ledger.book"}, headers=getattr(world, who))
    assert r.status_code == 400, r.text
    refused = error(r)
    assert refused["code"] == "INVALID_INPUT"
    assert refused["message"].startswith("type 'ledger.book' is not an event this server logs; known: ")
    assert "ledger.booked" in refused["message"] and "reservation.created" in refused["message"]
    assert refused["details"] == {"field": "type", "value": "ledger.book", "accepted": sorted(ev.EVENT_TYPES)}


@pytest.mark.both_stores
def test_since_keeps_the_events_logged_at_or_after_it(world: World) -> None:
    world.clock.now = T0 + timedelta(minutes=30)
    made = world.reserve(world.acme, "a100", GPUS).json()["id"]
    world.clock.now = T0 + timedelta(minutes=45)
    assert world.http.post(f"/v1/reservations/{made}/release", headers=world.acme).status_code == 200
    world.clock.now = T0 + timedelta(hours=1)
    expected = ["ledger.booked", "reservation.created", "ledger.released", "reservation.released"]
    for since in ("2026-12-01T09:30:00Z", "2026-12-01T11:30:00+02:00", "30m", "PT30M"):
        items = follow(world, world.admin, limit=1, since=since)
        assert [i["type"] for i in items] == expected, since
    assert [i["type"] for i in page(world, world.acme, since="20m")["items"]] == expected[2:]
    assert page(world, world.admin, since="2026-12-01T10:00:00Z")["items"] == []
    assert len(page(world, world.admin, since="2026-12-01T09:00:00Z")["items"]) > len(expected)


@pytest.mark.both_stores
def test_last_answers_the_newest_events_oldest_first_with_no_cursor(world: World) -> None:
    for _ in range(3):
        assert world.reserve(world.platform, "a100", GPUS).status_code == 201
    whole = follow(world, world.admin, limit=1000)
    for n in (1, 2, 5, 1000):
        newest = page(world, world.admin, last=n)
        assert newest == {"items": whole[-n:], "nextCursor": None}, n
    booked = [i for i in whole if i["type"] == "ledger.booked"]
    assert page(world, world.admin, type="ledger.booked", last=2)["items"] == booked[-2:]
    assert page(world, world.admin, after=str(whole[-3]["id"]), last=10)["items"] == whole[-2:]
    assert page(world, world.acme, last=5)["items"] == follow(world, world.acme, limit=100)[-5:]
    # A follower goes on after the last of them and misses nothing written meanwhile.
    world.reserve(world.platform, "a100", GPUS)
    fresh = page(world, world.admin, after=str(whole[-1]["id"]))["items"]
    assert [i["type"] for i in fresh] == ["ledger.booked", "reservation.created"]


def test_a_tenant_reads_only_the_events_about_itself(world: World) -> None:
    mine = world.reserve(world.acme, "a100", GPUS).json()["id"]
    theirs = world.reserve(world.globex, "a100", GPUS).json()["id"]
    world.clock.now = T0 + timedelta(minutes=30)
    assert world.http.post(f"/v1/reservations/{theirs}/release", headers=world.globex).status_code == 200
    policy = {"name": "small", "tenantId": "globex", "limits": {"gpuCount": 1}}
    assert world.http.post("/v1/policies", json=policy, headers=world.admin).status_code == 201

    items = follow(world, world.acme, limit=3)
    assert {i["type"] for i in items} == {
        "credential.created",
        "pool.offered",
        "ledger.booked",
        "reservation.created",
    }
    assert {i["subject"] for i in items if i["type"].startswith(("ledger.", "reservation."))} == {mine}
    text = json.dumps(items)
    assert "globex" not in text and theirs not in text and "platform" not in text
    # Naming another tenant's things finds nothing, exactly as naming things that do not exist.
    assert page(world, world.acme, subject=theirs) == page(world, world.acme, subject="rsv-none")
    assert page(world, world.acme, subject="globex")["items"] == []
    assert page(world, world.acme, type="node.inventory.changed")["items"] == []
    assert page(world, world.acme, type="fleet.registered")["items"] == []
    # globex sees its own release and policy, the admin everything.
    globex = {i["type"] for i in follow(world, world.globex, limit=100)}
    assert {"reservation.released", "ledger.released", "policy.created"} <= globex
    assert "node.inventory.changed" in {i["type"] for i in follow(world, world.admin, limit=100)}


def test_a_tenant_reads_the_changes_of_the_pools_it_sees(world: World) -> None:
    update = {"id": "a100", "policy": {"maxDuration": "8h"}}
    assert world.http.patch("/v1/pools/a100", json=update, headers=world.admin).status_code == 200
    for who in (world.platform, world.acme):  # the owner, and a tenant with quota rows in it
        assert [i["subject"] for i in page(world, who, type="pool.updated")["items"]] == ["a100"]
    owned = page(world, world.platform, type="pool.created")["items"]
    assert {i["subject"] for i in owned} == {"h100", "a100", "l40s"}
    assert page(world, world.acme, type="pool.created")["items"] == []  # not its own pools
    assert page(world, world.acme, subject="h100")["items"] == []  # a pool acme does not see


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"after": "abc"}, "after"),
        ({"after": "0"}, "after"),
        ({"after": "-3"}, "after"),
        ({"after": "1.5"}, "after"),
        ({"after": "99999999999999999999"}, "after"),
        ({"after": "９"}, "after"),
        ({"after": "424242"}, "after"),
        ({"type": "Ledger.Booked"}, "type"),
        ({"type": "ledger"}, "type"),
        ({"type": "ledger.booked;drop"}, "type"),
        ({"type": "a." + "b" * 70}, "type"),
        ({"subject": ""}, "subject"),
        ({"subject": "x" * 300}, "subject"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"type": "some.future.type"}, "type"),
        ({"since": "yesterday"}, "since"),
        ({"since": "2026-12-01T09:00:00"}, "since"),
        ({"since": "2026-12-01T25:00:00Z"}, "since"),
        ({"since": "1h" * 40}, "since"),
        ({"since": "0s"}, "since"),
        ({"last": "0"}, "last"),
        ({"last": "1001"}, "last"),
        ({"last": "ten"}, "last"),
        ({"last": "5", "limit": "5"}, "last"),
        ({"cursor": "5"}, "cursor"),
    ],
)
def test_bad_input_is_invalid_input_naming_the_field(world: World, query: dict[str, str], field: str) -> None:
    r = world.http.get("/v1/events", params=query, headers=world.admin)
    assert r.status_code == 400, r.text
    refused = error(r)
    assert refused["code"] == "INVALID_INPUT"
    assert field in refused["message"]


def test_events_need_a_token(world: World) -> None:
    r = world.http.get("/v1/events")
    assert r.status_code == 401 and error(r)["code"] == "UNAUTHENTICATED"
