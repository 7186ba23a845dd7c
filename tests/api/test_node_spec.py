"""The node spec through the real app, on SQLite and PostgreSQL: what a mig and a timeslice node are
told, a generation that moves exactly when the content does, and a long-poll that answers a change."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from better_compute.client import UnauthenticatedError
from better_compute.service.gate import node_spec
from better_compute.storage.store import Store
from tests.node_world import NodeWorld


def test_a_mig_node_is_told_its_layout_and_the_mig_instances_it_hands_out(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path, mode="mig", layout="all-1g.10gb")
    rid = world.reserve([{"class": "gpu.mig", "count": 1}])["id"]
    atom = world.http.get(f"/v1/reservations/{rid}", headers=world.platform).json()["atoms"][0]
    node = world.node(world.join(atom["node"]))
    spec = node.nodes.spec(atom["node"])
    assert spec.node == atom["node"]
    assert [g.mig_layout for g in spec.gpus] == ["all-1g.10gb", "all-1g.10gb"]
    assert (spec.sharing.mode, spec.sharing.replicas) == ("mig", 1)
    assert [(a.allocation_id, a.atoms) for a in spec.assignments] == [(rid, [atom["id"]])]
    assert spec.assignments[0].env == {"NVIDIA_VISIBLE_DEVICES": atom["attributes"]["migUuid"]}
    assert spec.assignments[0].env["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-")


def test_a_timeslice_node_is_told_its_replicas_and_whole_gpu_uuids(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path, mode="timeslice")
    rid = world.reserve([{"class": "gpu.slot", "count": 1}])["id"]
    atom = world.http.get(f"/v1/reservations/{rid}", headers=world.platform).json()["atoms"][0]
    spec = world.http.get(f"/v1/nodes/{atom['node']}/spec", headers=world.admin).json()
    assert [g["migLayout"] for g in spec["gpus"]] == ["all-disabled", "all-disabled"]
    assert spec["sharing"] == {"mode": "timeslice", "replicas": 4, "scrub": "none"}
    assert spec["assignments"] == [
        {
            "allocationId": rid,
            "tenantId": "platform",
            "atoms": [atom["id"]],
            "env": {"NVIDIA_VISIBLE_DEVICES": atom["gpuId"]},
        }
    ]


def test_the_generation_moves_when_a_reservation_lands_starts_and_ends(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)

    def generation(node: str) -> int:
        r = world.http.get(f"/v1/nodes/{node}/spec", headers=world.admin)
        assert r.status_code == 200, r.text
        return int(r.json()["generation"])

    seen = {n: generation(n) for n in ("n-1", "n-2")}
    assert {n: generation(n) for n in ("n-1", "n-2")} == seen  # unchanged content, same generation
    later = world.reserve([{"class": "gpu.mig", "count": 1}], start="2026-12-01T10:00:00Z", duration="1h")
    node = later["atoms"][0]["node"]
    assert generation(node) == seen[node]  # booked for later: nothing to hand out yet
    world.clock.now += timedelta(hours=1)  # 10:00, the booking starts
    assert generation(node) == seen[node] + 1
    world.clock.now += timedelta(hours=1)  # 11:00, it ends
    assert generation(node) == seen[node] + 2
    seen = {n: generation(n) for n in ("n-1", "n-2")}
    now = world.reserve([{"class": "gpu.mig", "count": 1}])["atoms"][0]["node"]
    assert {n: generation(n) for n in ("n-1", "n-2")} == {**seen, now: seen[now] + 1}


def test_a_long_poll_answers_at_once_on_another_generation_and_waits_for_a_change(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    client = world.node(world.join("n-1"))
    seen = client.nodes.spec("n-1")
    assert client.nodes.spec("n-1", after=seen.generation + 7, wait=30).generation == seen.generation
    assert client.nodes.spec("n-1", after=seen.generation, wait=0).generation == seen.generation
    slept: list[float] = []

    async def book_while_waiting(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 2:
            world.reserve([{"class": "gpu.mig", "count": 16}])  # every instance: n-1 gets some

    served = asyncio.run(
        node_spec.read_after(
            store, "n-1", seen.generation, timedelta(seconds=30), world.clock, sleep=book_while_waiting
        )
    )
    assert served.generation == seen.generation + 1 and served.spec.assignments
    assert len(slept) == 2


def test_a_spec_is_read_by_its_node_or_the_admin_only(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    one = world.join("n-1")
    with pytest.raises(UnauthenticatedError):
        world.node(one).nodes.spec("n-2")
    with pytest.raises(UnauthenticatedError):
        world.node(one, skew=-600).nodes.spec("n-1")
    assert world.http.get("/v1/nodes/n-1/spec", headers=world.platform).status_code == 403
    assert world.http.get("/v1/nodes/n-1/spec").status_code == 401
    too_long = world.http.get("/v1/nodes/n-1/spec", params={"after": 1, "wait": 61}, headers=world.admin)
    assert too_long.status_code == 400
    missing = world.http.get("/v1/nodes/nope/spec", headers=world.admin)
    assert missing.status_code == 404


def test_a_node_that_keeps_its_own_layout_is_told_none_and_says_so(store: Store) -> None:
    """The demo fleet's `euw-h100-b` keeps `mixed:3g.40gb+2x2g.20gb` (`carriesPoolLayout: false`)
    in a pool whose layout is `all-1g.10gb`: its spec leaves its GPUs as they are, while its pool's
    other nodes are told the pool's layout, so a daemon never repartitions it under the quickstart."""
    from better_compute.entrypoints.fleet import load_fleet, read_fleet
    from tests.builders import T0, admin_token, bearer, real_app
    from tests.node_world import TestClient

    load_fleet(store, read_fleet(Path("examples/demo-fleet.yaml")), T0)
    http = TestClient(real_app(store))
    admin = bearer(admin_token(store))

    def layouts(node: str) -> set[str | None]:
        r = http.get(f"/v1/nodes/{node}/spec", headers=admin)
        assert r.status_code == 200, r.text
        return {g["migLayout"] for g in r.json()["gpus"]}

    assert layouts("euw-h100-b") == {None}
    assert layouts("euw-h100-a-1") == {"all-1g.10gb"}
    shown = {n["id"]: n for n in http.get("/v1/nodes", headers=admin).json()["items"]}
    assert shown["euw-h100-b"]["carriesPoolLayout"] is False
    assert shown["euw-h100-a-1"]["carriesPoolLayout"] is True
