"""A replay over today's fleet with changes (docs/replay.md#fleet-changes): a node removed makes a
request that fitted wait, a node added or a pool cut into MIG instances makes one that waited or was
refused fit, by the amounts worked out by hand; the deployment's own fleet is left as it was."""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.ops.replay import MAX_FLEET_NODES
from better_compute.entrypoints.fleet import load_fleet
from better_compute.entrypoints.replay import scratch
from better_compute.service.ops import replay
from better_compute.storage.store import Store
from tests.service.ops.test_replay import ADMIN, T0, at, fleet_file

H100 = {"model": "H100-80GB", "count": 4}


def deployment(store: Store) -> None:
    """Today's fleet: c1's n-1 and n-2 (4 H100s each) in acme's exclusive pool p1, and a device
    class of H100 3g.40gb MIG instances."""
    raw = fleet_file()
    raw["deviceClasses"].append(
        {
            "name": "h100-3g",
            "class": "gpu.mig",
            "selector": {
                "matchExpressions": [
                    {"key": "gpuModel", "op": "In", "values": ["H100-80GB"]},
                    {"key": "migProfile", "op": "In", "values": ["3g.40gb"]},
                ]
            },
        }
    )
    load_fleet(store, parse_fleet(raw), T0)


def asking(device_class: str, count: int, replicas: int) -> dict[str, Any]:
    """acme's one workload, asked at 9:00 and never deleted."""
    item = {
        "at": T0.isoformat(),
        "tenant": "acme",
        "name": "big",
        "shape": {"deviceClass": device_class, "deviceCount": count},
        "replicas": replicas,
    }
    return {"requests": [item]}


def replayed(store: Store, demand: dict[str, Any], changes: dict[str, Any] | None) -> replay.Run:
    report = replay.replay(
        store, scratch, ADMIN, since=T0, until=at(180), demand=demand, fleet_changes=changes
    )
    (run,) = report.runs
    return run


def test_removing_a_node_makes_a_request_that_fitted_wait_and_adding_one_makes_it_fit(store: Store) -> None:
    """acme's `big` asks at 9:00 for 3 replicas of 4 H100s each (a whole node each); the window
    is 9:00 to 12:00 (3 h).

    Today's fleet (2 nodes): 2 replicas hold a node each for 3 h (24 GPU-h); the third never
    finds 4 free GPUs (12 GPU-h refused for capacity), so `big` never holds all it asked and
    waits to the window's end (10,800 s).
    n-2 removed: 1 replica (12 GPU-h), 2 short (24 GPU-h refused), the same wait.
    n-3 added to p1: all 3 hold a node from 9:00 (36 GPU-h), no wait."""
    deployment(store)
    demand = asking("h100", 4, 3)

    today = replayed(store, demand, None).tenants["acme"]
    assert (today.gpu_hours_granted, today.gpu_hours_refused) == (24.0, {"insufficient_capacity": 12.0})
    assert today.wait_p50_s == 10800.0

    fewer = replayed(store, demand, {"removeNodes": ["n-2"]}).tenants["acme"]
    assert (fewer.gpu_hours_granted, fewer.gpu_hours_refused) == (12.0, {"insufficient_capacity": 24.0})
    assert fewer.wait_p50_s == 10800.0

    added = {"addNodes": [{"name": "n-3", "cluster": "c1", "pool": "p1", "gpus": H100}]}
    more = replayed(store, demand, added).tenants["acme"]
    assert (more.gpu_hours_granted, more.gpu_hours_refused, more.wait_p50_s) == (36.0, {}, 0.0)

    # the deployment's own fleet is as it was: two nodes, in p1
    assert [n.name for n in replay.today_fleet(store).nodes] == ["n-1", "n-2"]


def test_cutting_a_pool_into_mig_instances_grants_a_request_for_them_that_was_refused(store: Store) -> None:
    """acme's `big` asks at 9:00 for 4 replicas of one 3g.40gb instance each. Today p1 is
    exclusive: there is no MIG instance anywhere, so no replica is ever placed and the request is
    refused: 4 devices for 3 h short, each counted as the 3g.40gb profile's share of an H100 (3 of
    its 7 compute slices), 4 x 3/7 x 3 h = 36/7 GPU-h. With p1 changed to a mig pool cut
    `all-3g.40gb` (two 3g.40gb instances on each of its 8 H100s) and its owner's row for them
    (`ownerQuota`, as a fleet file's mig pool has), all 4 are placed at 9:00: the same 36/7 GPU-h
    granted, with no wait."""
    deployment(store)
    demand = asking("h100-3g", 1, 4)

    today = replayed(store, demand, None).tenants["acme"]
    assert (today.refused_requests, today.gpu_hours_granted) == (1, 0.0)
    assert today.gpu_hours_refused == {"insufficient_capacity": pytest.approx(36 / 7, abs=1e-6)}

    mig_pool = {
        "name": "p1",
        "mode": "mig",
        "policy": {"migLayout": "all-3g.40gb"},
        "ownerQuota": {"gpu.mig": 16},
    }
    cut = {"pools": [mig_pool]}
    mig = replayed(store, demand, cut).tenants["acme"]
    assert (mig.refused_requests, mig.gpu_hours_refused, mig.wait_p50_s) == (0, {}, 0.0)
    assert mig.gpu_hours_granted == pytest.approx(36 / 7, abs=1e-6)


def test_a_change_naming_a_node_todays_fleet_lacks_is_refused_before_anything_is_replayed(
    store: Store,
) -> None:
    deployment(store)
    with pytest.raises(InvalidInput) as refused:
        replayed(store, asking("h100", 1, 1), {"removeNodes": ["n-1", "n-9"]})
    assert refused.value.message == "fleetChanges.removeNodes[1]: node n-9 is not in the replayed fleet"


def test_the_replayed_fleets_node_limit_holds_after_the_changes(store: Store) -> None:
    """Today's 2 nodes and 1,999 added are 2,001: over the 2,000 a replayed fleet may have."""
    deployment(store)
    many = {"addNodes": [{"name": "x", "cluster": "c1", "replicas": MAX_FLEET_NODES - 1, "gpus": H100}]}
    with pytest.raises(InvalidInput) as refused:
        replayed(store, asking("h100", 1, 1), many)
    assert refused.value.message == f"a replayed fleet has at most {MAX_FLEET_NODES} nodes; this one has 2001"
