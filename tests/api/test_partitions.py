"""`partitions.book` and `partitions.release` through the real app, on SQLite and PostgreSQL: an admin
holds a GPU's whole family of atoms for a maintenance window (the atom rule); while it holds no
reservation lands on the GPU, and once released the GPU books again. A tenant may do neither."""

from __future__ import annotations

import warnings
from datetime import datetime, timedelta
from typing import Any

import pytest

from better_compute.domain.ledger.ledger import MAX_PARTITION_WINDOW, partition_allocation_id
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from better_compute.wire.partitions import MAX_PARTITION_DAYS
from tests.builders import (
    T0,
    admin_token,
    at,
    bearer,
    real_app,
    settle_gate,
    small_fleet,
    stored_events,
    tenant_token,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


def iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


class World:
    """One exclusive pool of one node with two H100s, and a clock the test moves."""

    def __init__(self, store: Store) -> None:
        load_fleet(store, parse_fleet(small_fleet(nodes=1, mode="exclusive")), T0)  # type: ignore[arg-type]
        self.store = store
        self.now = T0
        self.http = TestClient(real_app(store, clock=lambda: self.now))
        self.admin = bearer(admin_token(store))
        self.platform = bearer(tenant_token(store, "platform"))
        gpus = self.http.get("/v1/gpus", headers=self.admin).json()["items"]
        self.gpus = sorted(g["id"] for g in gpus)

    def book(self, body: dict[str, Any], who: dict[str, str] | None = None) -> Any:
        return self.http.post("/v1/partitions", json=body, headers=who or self.admin)

    def release(self, booking_id: str, who: dict[str, str] | None = None) -> Any:
        return self.http.delete(f"/v1/partitions/{booking_id}", headers=who or self.admin)

    def reserve(self, gpus: int, start: datetime, duration: str = "1h") -> Any:
        body = {
            "poolId": "p1",
            "devices": [{"class": "gpu", "count": gpus}],
            "start": iso(start),
            "duration": duration,
        }
        return self.http.post("/v1/reservations", json=body, headers=self.platform)


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


@pytest.mark.both_stores
def test_the_admin_books_a_gpu_for_maintenance_and_releases_it(world: World) -> None:
    gpu = world.gpus[0]
    booked = world.book({"gpuId": gpu, "start": iso(at(1)), "end": iso(at(3))})
    assert booked.status_code == 201, booked.text
    answer = booked.json()
    assert answer["status"] == "booked"
    assert answer["bookingId"] == partition_allocation_id(gpu, at(1))
    assert (answer["gpuId"], answer["start"], answer["end"]) == (
        gpu,
        "2026-12-01T10:00:00Z",
        "2026-12-01T12:00:00Z",
    )
    assert answer["atoms"] and answer["freeFrom"] is None
    assert [e["subject"] for e in stored_events(world.store, "gpu.partition.booked")] == [gpu]

    released = world.release(answer["bookingId"])
    assert released.status_code == 200, released.text
    assert released.json() == {
        "status": "released",
        "bookingId": answer["bookingId"],
        "gpuId": gpu,
        "ended": len(answer["atoms"]),
    }
    assert [e["subject"] for e in stored_events(world.store, "gpu.partition.released")] == [
        answer["bookingId"]
    ]
    # Releasing twice is harmless: nothing more ends.
    again = world.release(answer["bookingId"])
    assert (again.status_code, again.json()["ended"]) == (200, 0)


@pytest.mark.both_stores
def test_a_partition_booking_keeps_reservations_off_its_gpu_and_release_frees_it(world: World) -> None:
    """The regression the atom rule exists for: while a partition booking holds a GPU, no
    reservation lands on it in its window; released, the GPU books again."""
    for gpu in world.gpus:
        assert world.book({"gpuId": gpu, "start": iso(at(1)), "duration": "2h"}).status_code == 201
    refused = world.reserve(1, at(2))
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["details"]["earliestStart"] == "2026-12-01T12:00:00+00:00"
    # Outside the window the GPUs book as before.
    assert world.reserve(2, at(3)).status_code == 201
    world.now = at(1.5)  # inside the window: the booking ends now, what was left of it frees
    released = world.release(partition_allocation_id(world.gpus[0], at(1)))
    assert released.status_code == 200, released.text
    booked = world.reserve(1, at(2))
    assert booked.status_code == 201, booked.text
    assert {a["gpuId"] for a in booked.json()["atoms"]} == {world.gpus[0]}


@pytest.mark.both_stores
def test_a_gpu_booked_in_the_window_answers_conflict_with_when_it_is_free(world: World) -> None:
    assert world.reserve(2, at(1), "2h").status_code == 201
    clash = world.book({"gpuId": world.gpus[0], "start": iso(at(2)), "duration": "1h"})
    assert clash.status_code == 200, clash.text
    assert clash.json() == {
        "status": "conflict",
        "gpuId": world.gpus[0],
        "bookingId": None,
        "start": "2026-12-01T11:00:00Z",
        "end": "2026-12-01T12:00:00Z",
        "atoms": [],
        "freeFrom": "2026-12-01T12:00:00Z",
    }
    assert stored_events(world.store, "gpu.partition.booked") == []
    # Two maintenance windows of one GPU may not meet either.
    assert world.book({"gpuId": world.gpus[1], "start": iso(at(5)), "end": iso(at(7))}).status_code == 201
    second = world.book({"gpuId": world.gpus[1], "start": iso(at(6)), "end": iso(at(8))}).json()
    assert (second["status"], second["freeFrom"]) == ("conflict", "2026-12-01T16:00:00Z")


def test_a_tenant_may_neither_book_nor_release(world: World) -> None:
    booked = world.book({"gpuId": world.gpus[0], "duration": "1h"}).json()
    refused = world.book({"gpuId": world.gpus[1], "duration": "1h"}, world.platform)
    assert refused.status_code == 403
    assert refused.json()["error"] == {
        "code": "FORBIDDEN",
        "message": "partitions.book needs a fleet-admin token",
        "details": {"action": "partitions.book"},
    }
    refused = world.release(booked["bookingId"], world.platform)
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "FORBIDDEN")
    assert (
        world.http.post("/v1/partitions", json={"gpuId": world.gpus[0], "duration": "1h"}).status_code == 401
    )


def test_unknown_gpus_and_bookings_are_not_found(world: World) -> None:
    missing = world.book({"gpuId": "GPU-nowhere", "duration": "1h"})
    assert (missing.status_code, missing.json()["error"]["message"]) == (404, "GPU GPU-nowhere not found")
    gone = world.release("partition:GPU-nowhere:2026-12-01T10:00:00Z")
    assert gone.status_code == 404
    assert gone.json()["error"]["message"] == "no partition change partition:GPU-nowhere:2026-12-01T10:00:00Z"
    assert world.release("bkg-999999").status_code == 404


@pytest.mark.both_stores
def test_a_tenants_booking_is_not_a_partition_change(world: World) -> None:
    reservation = world.reserve(1, at(1)).json()
    for named in (reservation["id"],):
        refused = world.release(named)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == "INVALID_INPUT"
        assert error["message"].startswith(f"{named} is not a partition change")
        assert "reservations.release" in error["message"]
    assert (
        world.http.get(f"/v1/reservations/{reservation['id']}", headers=world.platform).json()["status"]
        == "scheduled"
    )


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"start": "2026-12-01T10:00:00Z"}, "duration", "exactly one of end and duration"),
        ({"end": "2026-12-01T10:00:00Z", "duration": "1h"}, "end", "exactly one of end and duration"),
        ({"start": "2026-12-01T10:00:00Z", "end": "2026-12-01T09:30:00Z"}, "end", "must be after start"),
        ({"start": "2026-12-01T07:00:00Z", "duration": "1h"}, "start", "is in the past"),
        ({"duration": "31d"}, "duration", "at most 30 days"),
        ({"end": "2027-01-01T09:00:00Z"}, "end", "at most 30 days"),
        ({"duration": "soon"}, "duration", "is not a duration"),
        ({"end": "2026-12-01T10:00:00"}, "end", "must carry a timezone"),
    ],
)
def test_a_bad_window_is_invalid_input_naming_the_field(
    world: World, body: dict[str, Any], field: str, message: str
) -> None:
    refused = world.book({"gpuId": world.gpus[0], **body})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "INVALID_INPUT" and message in error["message"], error
    assert error["details"]["field"] == field
    assert stored_events(world.store, "gpu.partition.booked") == []


def test_a_start_a_few_seconds_past_is_now(world: World) -> None:
    answer = world.book(
        {"gpuId": world.gpus[0], "start": iso(T0 - timedelta(seconds=30)), "duration": "1h"}
    ).json()
    assert (answer["status"], answer["start"], answer["end"]) == (
        "booked",
        "2026-12-01T09:00:00Z",
        "2026-12-01T10:00:00Z",
    )


def test_the_wire_declares_the_domains_longest_window() -> None:
    assert timedelta(days=MAX_PARTITION_DAYS) == MAX_PARTITION_WINDOW


@pytest.mark.both_stores
def test_a_layout_changes_own_hold_is_the_gates_to_release(store: Store) -> None:
    """The gate holds an idle node's GPUs, open-ended, while their layout changes: a maintenance
    booking of one conflicts, never free until the change ends; its hold is refused to
    `partitions.release` (ending it would let tenants book instances about to disappear), and one
    of its bookings' ids names it alike."""
    load_fleet(store, parse_fleet(small_fleet(nodes=1, layout="all-1g.10gb")), T0)  # type: ignore[arg-type]
    http = TestClient(real_app(store))
    admin = bearer(admin_token(store))
    changed = http.patch(
        "/v1/pools/p1", json={"id": "p1", "policy": {"migLayout": "all-3g.40gb"}}, headers=admin
    )
    assert changed.status_code == 200, changed.text
    settle_gate(store, T0)  # the reconciler's pass: the idle node is granted, its GPUs held
    gpu = min(g["id"] for g in http.get("/v1/gpus", headers=admin).json()["items"])
    clash = http.post("/v1/partitions", json={"gpuId": gpu, "duration": "1h"}, headers=admin).json()
    assert (clash["status"], clash["freeFrom"]) == ("conflict", None)
    hold = partition_allocation_id(gpu, T0)
    booking = next(b for b in _bookings(store) if b[1] == hold)[0]
    for named in (hold, booking):
        refused = http.delete(f"/v1/partitions/{named}", headers=admin)
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "INVALID_STATE"
        assert refused.json()["error"]["message"] == (
            f"{hold} is the hold of node n's MIG layout change; it ends when the change is applied or undone"
            " (docs/layouts.md)"
        )
    assert stored_events(store, "gpu.partition.released") == []


def _bookings(store: Store) -> list[tuple[str, str]]:
    from sqlalchemy import select

    from better_compute.storage.kernel.tables import bookings

    with store.engine.connect() as conn:
        rows = conn.execute(select(bookings.c.id, bookings.c.allocation_id).where(bookings.c.state == "live"))
        return [(f"bkg-{r[0]}", str(r[1])) for r in rows]
