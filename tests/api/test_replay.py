"""`POST /v1/replay` end to end through the real app, on SQLite and PostgreSQL (docs/replay.md): a
history made through the API replays to what happened, a second policy set comes back beside it
with the differences, and bad input is refused with its code."""

from __future__ import annotations

import json
import warnings
from datetime import datetime, timedelta
from typing import Any

import pytest

from better_compute.domain.ops.replay import MAX_BODY_BYTES, MAX_REQUESTS
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.ops.placement_retry import Retrier
from better_compute.service.placement.placement_stock import Stock
from better_compute.service.placement.workloads import Wiring
from better_compute.storage.store import Store
from tests.api.test_scheduling import CLASS, World
from tests.builders import T0, CountingIds, bearer, tenant_token

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient  # noqa: F401


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def recorded(world: World) -> None:
    """globex's preemptible batch of 8, acme's prod of 4 on one node evicting 4 of it at 10:00,
    deleted at 12:00, when batch is placed again."""
    world.retrier = Retrier(Wiring(world.store, BookingIndex(), Stock(), CountingIds()), world.clock)

    def then(minutes: int) -> None:
        world.clock.now = at(minutes)

    world.create("globex", "batch", 8, cls="batch")
    world.retrier.tick()
    then(60)
    prod = world.create("acme", "prod", 1, cls="prod", count=4)
    world.retrier.tick()
    then(180)
    got = world.http.delete(f"/v1/workloads/{prod['id']}", headers=world.admin)
    assert got.status_code == 200, got.text
    world.retrier.tick()
    then(240)


def window(**body: Any) -> dict[str, Any]:
    return {"since": T0.isoformat(), "until": at(360).isoformat(), **body}


def test_a_history_made_through_the_api_replays_to_what_happened_and_a_floor_against_it_shows_the_differences(
    world: World,
) -> None:
    recorded(world)
    floor = {
        "quotas": [
            {
                "tenantId": "acme",
                "deviceClass": CLASS,
                "scope": "cluster",
                "clusterId": "iad-1",
                "guaranteedDevices": 8,
                "floorDevices": 4,
            }
        ]
    }
    got = world.http.post("/v1/replay", json=window(against=floor), headers=world.admin)
    assert got.status_code == 200, got.text
    report = got.json()
    assert (report["source"], report["requests"]) == ("history", 2)
    runs = {r["name"]: r for r in report["runs"]}
    assert list(runs) == ["recorded", "policy", "against"]
    # Unchanged policy: the same fate as recorded, request by request.
    assert runs["policy"]["outcomes"] == runs["recorded"]["outcomes"]
    assert runs["policy"]["tenants"] == runs["recorded"]["tenants"]
    globex = runs["recorded"]["tenants"]["globex"]
    # batch: 8 for 1 h, 4 for 2 h, 8 for 3 h = 40 GPU-hours; 4 replicas evicted by prod.
    assert (globex["gpuHoursGranted"], globex["preemptions"]) == (40.0, 4)
    assert runs["recorded"]["tenants"]["acme"]["gpuHoursGranted"] == 8.0
    # The floor changes nothing here: prod evicted by priority already; the differences say so.
    assert report["differences"]["overall"]["preemptions"] == 0
    assert report["differences"]["globex"]["gpuHoursGranted"] == 0.0


def test_replay_refuses_bad_input_with_its_code(world: World) -> None:
    def refused(
        body: dict[str, Any], status: int = 400, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        got = world.http.post("/v1/replay", json=body, headers=headers or world.admin)
        assert got.status_code == status, got.text
        error: dict[str, Any] = got.json()["error"]
        return error

    unknown = refused(
        window(
            policy={
                "quotas": [
                    {"tenantId": "initech", "deviceClass": CLASS, "scope": "fleet", "guaranteedDevices": 1}
                ]
            }
        )
    )
    assert unknown["code"] == "INVALID_INPUT"
    assert (
        unknown["message"]
        == "the policy set names tenant(s) ['initech'] that the replayed fleet does not have"
    )

    backwards = refused({"since": at(60).isoformat(), "until": T0.isoformat()})
    assert backwards["code"] == "INVALID_INPUT" and "before it begins" in backwards["message"]

    naive = refused({"since": "2026-12-01T09:00:00", "until": at(60).isoformat()})
    assert naive["message"] == "since must carry its UTC offset (such as Z)"

    too_long = refused({"since": T0.isoformat(), "until": (T0 + timedelta(days=32)).isoformat()})
    assert too_long["message"] == "a replay window is at most 31 days; this one is 32"

    ask = {
        "kind": "workload",
        "at": T0.isoformat(),
        "tenant": "acme",
        "name": "w",
        "shape": {"deviceClass": CLASS, "deviceCount": 1},
    }
    many = refused(window(demand={"requests": [ask] * (MAX_REQUESTS + 1)}))
    assert (
        many["message"]
        == f"a replay takes at most {MAX_REQUESTS} requests; this demand has {MAX_REQUESTS + 1}"
    )

    huge = world.http.post(
        "/v1/replay",
        content=json.dumps(window(demand={"requests": [], "pad": "x" * MAX_BODY_BYTES})),
        headers={**world.admin, "Content-Type": "application/json"},
    )
    assert huge.status_code == 413

    tenant = refused(window(), 403, bearer(tenant_token(world.store, "acme")))
    assert tenant["code"] == "FORBIDDEN"


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


def test_the_synthetic_trace_replays_through_the_api_with_the_gpu_hours_worked_out_by_hand(
    world: World,
) -> None:
    """The small trace as `replay --trace` sends it (its demand and fleet files): the outcomes
    `tests/cli/test_replay_cmd.py::test_replay_of_the_synthetic_trace_grants_and_refuses_the_gpu_hours_worked_out_by_hand`
    works out by hand, and a share of one GPU comes back on one GPU of the model its `gpu_spec` names."""
    from pathlib import Path

    from better_compute.domain.ops.trace_replay import trace_demand, trace_fleet
    from better_compute.domain.ops.traces import parse_nodes, parse_pods

    traces = Path(__file__).parents[1] / "domain" / "ops" / "traces"
    with (traces / "openb_pod_list_small.csv").open(newline="") as f:
        tasks = parse_pods(f)
    with (traces / "openb_node_list_gpu_node.csv").open(newline="") as f:
        fleet = trace_fleet(parse_nodes(f))
    mapped = trace_demand(tasks, T0, at(60))
    assert (mapped.tasks, mapped.without_gpus, mapped.scale) == (6, 1, 1.0)
    t4 = mapped.demand["requests"][4]
    assert t4["devices"] == [
        {
            "class": "gpu.slot",
            "count": 8,
            "sameGpu": True,
            "selector": {"matchExpressions": [{"key": "gpuModel", "op": "In", "values": ["T4"]}]},
        }
    ]
    got = world.http.post(
        "/v1/replay",
        json={"since": T0.isoformat(), "until": at(60).isoformat(), "demand": mapped.demand, "fleet": fleet},
        headers=world.admin,
    )
    assert got.status_code == 200, got.text
    run = got.json()["runs"][0]
    assert run["overall"]["gpuHoursGranted"] == pytest.approx(885 / 3600, abs=1e-6)
    assert run["overall"]["gpuHoursRefused"] == {
        "insufficient_capacity": pytest.approx(14240 / 3600, abs=1e-6)
    }
    assert [o["key"] for o in run["outcomes"] if o["refusedReason"]] == ["openb-pod-0004"]
    assert run["tenants"]["trace"]["refusedRequests"] == 1


def test_a_fleet_naming_a_model_it_does_not_declare_is_refused_by_the_api(world: World) -> None:
    fleet = {
        "tenants": [{"id": "acme"}],
        "clusters": [
            {"name": "c", "region": "r", "nodes": [{"name": "n", "gpus": {"model": "T4", "count": 1}}]}
        ],
    }
    got = world.http.post(
        "/v1/replay", json=window(fleet=fleet, demand={"requests": []}), headers=world.admin
    )
    assert got.status_code == 404, got.text
    assert "unknown GPU model 'T4'" in got.json()["error"]["message"]


def test_a_replay_beyond_the_ones_a_server_runs_at_once_is_refused_not_queued(world: World) -> None:
    """Each replay holds a request thread for minutes: past MAX_RUNNING at once, one is refused
    with 409 (the others' threads stay free for the API), and accepted again when one ends."""
    from better_compute.service.ops import replay

    held = [replay._running.acquire(blocking=False) for _ in range(replay.MAX_RUNNING)]
    assert all(held)
    try:
        got = world.http.post("/v1/replay", json=window(), headers=world.admin)
        assert got.status_code == 409, got.text
        assert got.json()["error"]["code"] == "INVALID_STATE"
        assert got.json()["error"]["message"] == (
            "2 replays are running on this server already; send this one again when one ends"
        )
    finally:
        for _ in held:
            replay._running.release()
    assert world.http.post("/v1/replay", json=window(), headers=world.admin).status_code == 200
