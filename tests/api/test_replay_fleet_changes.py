"""`POST /v1/replay` with `fleetChanges` through the real app (docs/replay.md#fleet-changes):
today's fleet with a node removed replays to fewer GPU-hours, and a change the fleet cannot take is
a 400 naming its entry."""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.storage.store import Store
from tests.api.test_replay import window
from tests.api.test_scheduling import CLASS, World
from tests.builders import T0


def demand() -> dict[str, Any]:
    """acme's 2 replicas of 4 H100s each (a whole node each) from 9:00."""
    ask = {
        "at": T0.isoformat(),
        "tenant": "acme",
        "name": "pair",
        "shape": {"deviceClass": CLASS, "deviceCount": 4},
        "replicas": 2,
    }
    return {"requests": [ask]}


def test_a_node_removed_from_todays_fleet_leaves_one_replica_unplaced(world: World) -> None:
    """Today's fleet (n0, n1): both replicas hold a node for the window's 6 h (48 GPU-h). With n1
    removed, one does (24 GPU-h) and the other is short for 6 h (24 GPU-h refused)."""
    got = world.http.post(
        "/v1/replay", json=window(demand=demand(), fleetChanges={"removeNodes": ["n1"]}), headers=world.admin
    )
    assert got.status_code == 200, got.text
    (run,) = got.json()["runs"]
    acme = run["tenants"]["acme"]
    assert (acme["gpuHoursGranted"], acme["gpuHoursRefused"]) == (24.0, {"insufficient_capacity": 24.0})

    same = world.http.post("/v1/replay", json=window(demand=demand()), headers=world.admin)
    assert same.json()["runs"][0]["tenants"]["acme"]["gpuHoursGranted"] == 48.0


def test_a_fleet_change_the_fleet_cannot_take_is_a_400_naming_its_entry(world: World) -> None:
    changes = {"addNodes": [{"name": "n0", "cluster": "iad-1", "gpus": {"model": "H100-80GB", "count": 4}}]}
    got = world.http.post(
        "/v1/replay", json=window(demand=demand(), fleetChanges=changes), headers=world.admin
    )
    assert got.status_code == 400, got.text
    error = got.json()["error"]
    assert error["code"] == "INVALID_INPUT"
    assert (
        error["message"]
        == "fleetChanges.addNodes[0]: node n0 is already in the replayed fleet (node names are unique)"
    )
    assert error["details"]["field"] == "fleetChanges.addNodes[0]"

    wrong = world.http.post(
        "/v1/replay", json=window(demand=demand(), fleetChanges={"removeNodes": "n1"}), headers=world.admin
    )
    assert (
        wrong.status_code == 400
        and wrong.json()["error"]["message"] == "fleetChanges.removeNodes must be a list"
    )


@pytest.fixture
def world(store: Store) -> World:
    return World(store)
