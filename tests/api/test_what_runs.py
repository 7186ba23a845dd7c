"""What runs (docs/placement.md#what-runs, docs/endpoints.md#what-runs) through the real app, on
SQLite and PostgreSQL: an endpoint component's model server with SageMaker's container contract
filled in, bad containers refused naming the field, and the node spec telling each node the
container of every workload replica and endpoint copy on its atoms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from better_compute.client import ForbiddenError
from better_compute.service.gate.mig_gate import Reconciler
from better_compute.storage.store import Store
from tests.node_world import NodeWorld

SERVER = {
    "image": "localhost/bc-test-busybox:1",
    "command": ["busybox", "httpd"],
    "args": ["-f", "-p", "8080"],
}


def _endpoint(name: str = "chat") -> dict[str, Any]:
    return {
        "name": name,
        "variants": [
            {
                "name": "AllTraffic",
                "poolId": "p1",
                "instanceCount": 1,
                "acceleratorPartitionLayouts": [
                    {"acceleratorPartitionTypes": ["mig-3g.40gb", "mig-3g.40gb"]}
                ],
            }
        ],
    }


def _component(**extra: Any) -> dict[str, Any]:
    return {
        "name": "llama",
        "endpointName": "chat",
        "variantName": "AllTraffic",
        "model": "llama-3-8b",
        "partitionType": "mig-3g.40gb",
        "cpuCores": 2,
        "memoryMiB": 4096,
        "copies": 2,
        **extra,
    }


def _serving(store: Store, tmp_path: Path) -> NodeWorld:
    """The world with endpoint `chat` cut on n-1 (two GPUs of two 3g partitions each)."""
    world = NodeWorld(store, tmp_path)
    daemon, _ = world.daemon("n-1")
    assert daemon.step(False)
    made = world.http.post("/v1/endpoints", json=_endpoint(), headers=world.platform)
    assert made.status_code == 201, made.text
    assert daemon.step(True)
    Reconciler(store, world.clock, "r1").tick()
    return world


def test_a_components_model_server_gets_sagemakers_contract_where_the_request_left_it_out(
    store: Store, tmp_path: Path
) -> None:
    world = _serving(store, tmp_path)
    created = world.http.post("/v1/components", json=_component(container=SERVER), headers=world.platform)
    assert created.status_code == 201, created.text
    c = created.json()
    assert c["invokePath"] == "/invocations"
    container = c["container"]
    assert container["image"] == SERVER["image"]
    assert container["ports"] == [{"containerPort": 8080}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/ping", "port": 8080}
    assert container["resources"] == {"cpu": 2.0, "memoryMiB": 4096}
    shown = world.http.get("/v1/components/llama", headers=world.platform).json()
    assert shown["container"] == container and shown["invokePath"] == "/invocations"
    scaled = world.http.post("/v1/components/llama/scale", json={"copies": 1}, headers=world.platform)
    assert scaled.status_code == 200 and scaled.json()["container"] == container
    own = {
        **SERVER,
        "ports": [{"containerPort": 9000}, {"containerPort": 9001}],
        "readinessProbe": {"exec": {"command": ["true"]}},
        "resources": {"cpu": 1},
    }
    other = world.http.post(
        "/v1/components",
        json=_component(name="cgi", container=own, invokePath="/cgi-bin/invoke", copies=1),
        headers=world.platform,
    )
    assert other.status_code == 201, other.text
    o = other.json()
    assert o["invokePath"] == "/cgi-bin/invoke"
    assert o["container"]["ports"] == [{"containerPort": 9000}, {"containerPort": 9001}]
    assert o["container"]["readinessProbe"]["exec"] == {"command": ["true"]}
    assert o["container"]["resources"] == {"cpu": 1.0, "memoryMiB": 4096}
    bare = world.http.post("/v1/components", json=_component(name="bare", copies=0), headers=world.platform)
    assert bare.status_code == 201, bare.text
    assert "container" not in bare.json() and bare.json()["invokePath"] == "/invocations"


def test_a_bad_model_server_or_invoke_path_is_refused_naming_the_field(store: Store, tmp_path: Path) -> None:
    world = _serving(store, tmp_path)
    cases = [
        ({"container": {"image": "Bad Image"}}, "container.image"),
        ({"container": {**SERVER, "env": {"CUDA_VISIBLE_DEVICES": "0"}}}, "container.env"),
        ({"container": {**SERVER, "args": ["x"] * 65}}, "container.args"),
        ({"container": {**SERVER, "resources": {"cpu": "lots"}}}, "container.resources.cpu"),
        ({"container": SERVER, "invokePath": "invocations"}, "invokePath"),
        ({"container": SERVER, "invokePath": "/with space"}, "invokePath"),
        ({"container": SERVER, "invokePath": "/" + "a" * 1024}, "invokePath"),
    ]
    for extra, field in cases:
        got = world.http.post("/v1/components", json=_component(**extra), headers=world.platform)
        assert got.status_code == 400, (extra, got.text)
        assert got.json()["error"]["code"] == "INVALID_INPUT"
        assert field in got.text, (field, got.text)
    assert world.http.get("/v1/components/llama", headers=world.platform).status_code == 404


def _spec(world: NodeWorld, node: str) -> dict[str, Any]:
    got = world.http.get(f"/v1/nodes/{node}/spec", headers=world.admin)
    assert got.status_code == 200, got.text
    out: dict[str, Any] = got.json()
    return out


@pytest.mark.both_stores
def test_a_workload_replicas_assignment_carries_its_workloads_container(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    made = world.http.post(
        "/v1/device-classes",
        json={
            "name": "mig-1g",
            "class": "gpu.mig",
            "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["1g.10gb"]}]},
        },
        headers=world.admin,
    )
    assert made.status_code == 201, made.text
    shape = {"device_class": "mig-1g", "device_count": 1}
    for name, extra in (("served", {"container": SERVER}), ("plain", {})):
        got = world.http.post(
            "/v1/workloads",
            json={"name": name, "shape": {**shape, **extra}, "replicas": 2},
            headers=world.platform,
        )
        assert got.status_code == 201, got.text
    assignments = [a for n in ("n-1", "n-2") for a in _spec(world, n)["assignments"]]
    assert len(assignments) == 4
    with_container = [a for a in assignments if "container" in a]
    assert len(with_container) == 2
    assert {a["container"]["image"] for a in with_container} == {SERVER["image"]}
    assert all(a["container"]["args"] == ["-f", "-p", "8080"] for a in with_container)
    assert all(a["env"]["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-") for a in assignments)


@pytest.mark.both_stores
def test_endpoint_copies_are_assignments_of_their_node_and_the_generation_moves_with_them(
    store: Store, tmp_path: Path
) -> None:
    world = _serving(store, tmp_path)
    before = _spec(world, "n-1")
    assert before["assignments"] == []  # the endpoint's own booking assigns nothing
    created = world.http.post("/v1/components", json=_component(container=SERVER), headers=world.platform)
    assert created.status_code == 201, created.text
    copies = {f"copy:llama:{c['index']}": c for c in created.json()["copies"]}
    spec = _spec(world, "n-1")
    assert spec["generation"] > before["generation"]
    assert [a["allocationId"] for a in spec["assignments"]] == sorted(copies)
    for a in spec["assignments"]:
        c = copies[a["allocationId"]]
        assert a["atoms"] == [c["atomId"]]
        assert a["tenantId"] == "platform"
        assert a["env"] == {"NVIDIA_VISIBLE_DEVICES": c["migUuid"]}
        assert a["container"] == created.json()["container"]
    assert _spec(world, "n-2")["assignments"] == []
    down = world.http.post("/v1/components/llama/scale", json={"copies": 1}, headers=world.platform)
    assert down.status_code == 200, down.text
    after = _spec(world, "n-1")
    assert after["generation"] > spec["generation"]
    assert [a["allocationId"] for a in after["assignments"]] == ["copy:llama:0"]
    bare = world.http.post("/v1/components", json=_component(name="bare", copies=1), headers=world.platform)
    assert bare.status_code == 201, bare.text
    last = _spec(world, "n-1")
    assert last["generation"] > after["generation"]
    (plain,) = [a for a in last["assignments"] if a["allocationId"] == "copy:bare:0"]
    assert "container" not in plain
    gone = world.http.delete("/v1/components/llama", headers=world.platform)
    assert gone.status_code == 200
    assert [a["allocationId"] for a in _spec(world, "n-1")["assignments"]] == ["copy:bare:0"]


@pytest.mark.both_stores
def test_a_copy_is_reported_on_by_the_node_its_partition_is_on_and_no_other(
    store: Store, tmp_path: Path
) -> None:
    world = _serving(store, tmp_path)
    created = world.http.post("/v1/components", json=_component(container=SERVER), headers=world.platform)
    assert created.status_code == 201, created.text
    mine = world.node(world.join("n-1")).nodes
    other = world.node(world.join("n-2")).nodes
    reports = [
        {"kind": "AllocationBound", "allocationId": "copy:llama:0", "binding": "bound"},
        {
            "kind": "ReplicaState",
            "allocationId": "copy:llama:0",
            "state": "ready",
            "address": "10.0.0.1:8080",
        },
        {"kind": "AllocationReleased", "allocationId": "copy:llama:0"},
    ]
    for body in reports:
        mine.report("n-1", body)
    with store.begin() as tx:
        states = tx.replica_states.of_allocations(["copy:llama:0"])["copy:llama:0"]
    assert [(s.node_id, s.state) for s in states] == [("n-1", "ready")]
    for body in [
        *reports,
        {**reports[0], "allocationId": "copy:llama:9"},
        {**reports[0], "allocationId": "copy:x"},
    ]:
        with pytest.raises(ForbiddenError) as refused:
            other.report("n-2", body)
        assert "holds no atom of node n-2" in str(refused.value)
    with pytest.raises(ForbiddenError):
        mine.report("n-1", {**reports[0], "allocationId": "copy:llama:9"})
