"""A reservation's device line names nodes (`node In [...]`, `node NotIn [...]`) through the real app."""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.storage.store import Store
from tests.api.test_reservations import World, error


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


def on(*nodes: str, count: int = 1, op: str = "In") -> list[dict[str, Any]]:
    expression = {"key": "node", "op": op, "values": list(nodes)}
    return [{"class": "gpu", "count": count, "selector": {"matchExpressions": [expression]}}]


def test_a_reservation_books_on_the_named_node(world: World) -> None:
    world.offer("a100", "acme", gpu=4)
    r = world.reserve(world.acme, "a100", on("ex-2", count=2))
    assert r.status_code == 201, r.text
    assert [a["node"] for a in r.json()["atoms"]] == ["ex-2", "ex-2"]
    # The reservation echoes the selector it was booked with.
    assert r.json()["devices"][0]["selector"]["matchExpressions"] == [
        {"key": "node", "op": "In", "values": ["ex-2"]}
    ]


def test_a_named_node_with_no_free_atom_is_refused_though_others_are_free(world: World) -> None:
    world.offer("a100", "acme", gpu=4)
    assert world.reserve(world.acme, "a100", on("ex-2", count=2)).status_code == 201
    full = world.reserve(world.acme, "a100", on("ex-2"))
    assert full.status_code == 409, full.text
    err = error(full)
    assert err["code"] == "INSUFFICIENT_CAPACITY"
    assert err["message"].startswith("devices[0]:")
    # Free again when the first booking ends (four hours after now).
    assert err["details"]["earliestStart"] is not None
    # ex-1's GPUs are still free to a line that does not name ex-2.
    elsewhere = world.reserve(world.acme, "a100", on("ex-2", op="NotIn"))
    assert elsewhere.status_code == 201, elsewhere.text
    assert [a["node"] for a in elsewhere.json()["atoms"]] == ["ex-1"]


def test_a_node_outside_the_pool_is_never_there(world: World) -> None:
    world.offer("a100", "acme", gpu=4)
    r = world.reserve(world.acme, "a100", on("mig-1"))
    assert r.status_code == 409, r.text
    err = error(r)
    assert err["code"] == "INSUFFICIENT_CAPACITY"
    assert err["details"]["earliestStart"] is None
    assert "matching the selector" in err["message"]
