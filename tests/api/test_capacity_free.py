"""What is free, through the real app on SQLite and PostgreSQL: `atoms.list` says per atom whether it
is booked now and when it is next free; `capacity.free` says what a pool could book, and when."""

from __future__ import annotations

import pytest

from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.ledger import partition_allocation_id
from better_compute.storage.store import Store
from tests.api.test_reservations import World, error, mig
from tests.builders import T0


@pytest.fixture
def world(store: Store) -> World:
    world = World(store)
    world.offer("h100", "platform", gpu_mig=8)
    return world


def _kinds(answer: dict[str, object]) -> dict[object, tuple[object, ...]]:
    return {
        k["migProfile"]: (k["atoms"], k["free"], k["earliestStart"])  # type: ignore[index]
        for k in answer["kinds"]  # type: ignore[attr-defined]
    }


def test_atoms_list_says_which_atom_is_booked_now_and_when_it_is_next_free(world: World) -> None:
    first = world.reserve(world.platform, "h100", [mig("3g.40gb")], duration="2h")
    assert first.status_code == 201, first.text
    held = first.json()["atoms"][0]["id"]
    then = world.reserve(
        world.platform, "h100", [mig("3g.40gb")], start="2026-12-01T12:00:00Z", duration="1h"
    )
    assert then.status_code == 201
    later = then.json()["atoms"][0]["id"]
    page = world.http.get(
        "/v1/atoms", params={"pool": "h100", "attr": "migProfile=3g.40gb"}, headers=world.platform
    ).json()
    by_id = {a["id"]: a for a in page["items"]}
    assert by_id[held]["bookedNow"] is True
    assert by_id[held]["nextFreeAt"].startswith("2026-12-01T11:00:00")
    free_now = [a for a in page["items"] if a["id"] != held]
    assert free_now and all(a["bookedNow"] is False for a in free_now)
    assert all(a["nextFreeAt"].startswith("2026-12-01T09:00:00") for a in free_now)
    # Booked later, not now: free now.
    if later != held:
        assert by_id[later]["bookedNow"] is False


def test_an_open_ended_booking_is_never_free_again(world: World, store: Store) -> None:
    atoms = world.http.get("/v1/atoms", params={"pool": "h100"}, headers=world.platform).json()["items"]
    held = atoms[0]["id"]
    with store.begin() as tx:  # a partition change with no end yet, as the ledger keeps one
        assert (
            tx.ledger.book([held], Window(T0), partition_allocation_id(atoms[0]["gpuId"], T0), None, T0) == 1
        )
    atoms = world.http.get("/v1/atoms", params={"pool": "h100"}, headers=world.platform).json()["items"]
    shown = next(a for a in atoms if a["id"] == held)
    assert shown["bookedNow"] is True and shown["nextFreeAt"] is None


def test_capacity_free_counts_each_kind_and_says_when_a_busy_one_frees(world: World) -> None:
    empty = world.http.get("/v1/capacity/free", params={"pool": "h100"}, headers=world.platform)
    assert empty.status_code == 200, empty.text
    answer = empty.json()
    assert answer["poolId"] == "h100" and answer["count"] == 1
    assert answer["from"].startswith("2026-12-01T09:00:00") and answer["to"].startswith("2026-12-01T10:00:00")
    assert _kinds(answer) == {
        "3g.40gb": (4, 4, answer["from"]),
        "2g.20gb": (8, 8, answer["from"]),
    }
    all_four = world.reserve(world.platform, "h100", [mig("3g.40gb", count=4)], duration="3h")
    assert all_four.status_code == 201, all_four.text
    busy = world.http.get("/v1/capacity/free", params={"pool": "h100"}, headers=world.platform).json()
    three_g = _kinds(busy)["3g.40gb"]
    assert three_g[:2] == (4, 0)
    assert str(three_g[2]).startswith("2026-12-01T12:00:00")
    # The window asked about decides: from noon, every one is free again.
    noon = world.http.get(
        "/v1/capacity/free",
        params={"pool": "h100", "class": "gpu.mig", "from": "2026-12-01T12:00:00Z", "count": 4},
        headers=world.platform,
    ).json()
    assert _kinds(noon)["3g.40gb"][:2] == (4, 4)


def test_capacity_free_of_a_pool_the_tenant_cannot_see_is_not_found(world: World) -> None:
    hidden = world.http.get("/v1/capacity/free", params={"pool": "h100"}, headers=world.acme)
    missing = world.http.get("/v1/capacity/free", params={"pool": "nowhere"}, headers=world.acme)
    assert hidden.status_code == missing.status_code == 404
    assert error(hidden)["message"] == "pool h100 not found"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"pool": "h100", "class": "gpu.tpu"}, "class must be one of gpu, gpu.mig, gpu.slot"),
        (
            {"pool": "h100", "from": "2026-12-01T12:00:00Z", "to": "2026-12-01T11:00:00Z"},
            "must be after from",
        ),
        ({"pool": "h100", "from": "2026-12-01T12:00:00"}, "from must carry a timezone"),
        ({"pool": "h100", "count": "0"}, "count"),
        ({"pool": "h100", "count": "5000"}, "count"),
        ({"pool": "h100", "from": "noon"}, "from"),
        ({}, "pool"),
    ],
)
def test_capacity_free_refuses_bad_input_by_name(world: World, params: dict[str, str], message: str) -> None:
    r = world.http.get("/v1/capacity/free", params=params, headers=world.platform)
    assert r.status_code == 400, r.text
    assert error(r)["code"] == "INVALID_INPUT"
    assert message in error(r)["message"]
