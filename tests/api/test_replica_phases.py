"""Phases, counts, endpoint status and doctor from what nodes say of the containers they run, through
the real app and signed `ReplicaState` reports, on SQLite and PostgreSQL.

Seed 001, "Admission phases": `placed` is "pods are being created" (every replica booked and its
container created on its node), `running` is "at least one replica is ready". An endpoint is
`InService` when every component has `minCopies` ready copies (docs/endpoints.md#what-runs).

The workload `w-runs` and the component `llama` ask for a container the way a user does (the
workload's `shape.container`, the component's `container`); `w-plain` and `plain` ask for none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from better_compute.client import ForbiddenError as Forbidden
from better_compute.service.gate.mig_gate import Reconciler
from better_compute.storage.store import Store
from tests.node_world import NodeWorld

pytestmark = pytest.mark.both_stores  # what nodes said is stored, and forgotten, on both databases

SERVER = {
    "image": "localhost/bc-test-busybox:1",
    "command": ["busybox", "httpd", "-f"],
    "ports": [{"containerPort": 8080}],
}
INVOKE = "/cgi-bin/invoke"
"""Where `llama`'s copies answer invocations (busybox httpd answers POSTs only under /cgi-bin/)."""
RUNS = {"w-runs", "llama"}
"""The workload and the component that run a container (`SERVER`)."""

CLASS = {
    "name": "mig-1g",
    "class": "gpu.mig",
    "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["1g.10gb"]}]},
}


class Fleet(NodeWorld):
    def __init__(self, store: Store, tmp_path: Path) -> None:
        super().__init__(store, tmp_path)
        made = self.http.post("/v1/device-classes", json=CLASS, headers=self.admin)
        assert made.status_code == 201, made.text
        self.ids = {n: self.join(n) for n in ("n-1", "n-2")}

    def workload(self, name: str, replicas: int) -> dict[str, Any]:
        shape: dict[str, Any] = {"device_class": "mig-1g", "device_count": 1}
        if name in RUNS:
            shape["container"] = SERVER
        body = {"name": name, "shape": shape, "replicas": replicas}
        got = self.http.post("/v1/workloads", json=body, headers=self.platform)
        assert got.status_code == 201, got.text
        out: dict[str, Any] = got.json()
        return out

    def shown(self, workload: dict[str, Any]) -> dict[str, Any]:
        got = self.http.get(f"/v1/workloads/{workload['id']}", headers=self.platform)
        assert got.status_code == 200, got.text
        out: dict[str, Any] = got.json()
        return out

    def replicas(self, workload: dict[str, Any]) -> list[tuple[str, str]]:
        """The workload's replicas as (allocation id, the node holding its atom), in order."""
        with self.store.begin() as tx:
            node_of = {a.id: a.node for a in tx.atoms.of_pool("p1")}
            deps = tx.workloads.deployments_of([workload["id"]])[workload["id"]]
            out = []
            for rs in tx.workloads.replicas_of([d.id for d in deps]).values():
                for _, allocation in rs:
                    (booking,) = [b for b in tx.ledger.allocation_bookings(allocation) if b.state == "live"]
                    out.append((allocation, node_of[booking.atom_id]))
        return sorted(out)

    def report(self, node: str, allocation: str, state: str, **extra: Any) -> None:
        body = {"kind": "ReplicaState", "allocationId": allocation, "state": state, **extra}
        self.node(self.ids[node]).nodes.report(node, body)

    def doctor(self, prefix: str = "replica.") -> list[dict[str, Any]]:
        got = self.http.get("/v1/doctor", headers=self.admin)
        assert got.status_code == 200, got.text
        return [f for f in got.json()["findings"] if f["code"].startswith(prefix)]


@pytest.fixture
def fleet(store: Store, tmp_path: Path) -> Fleet:
    return Fleet(store, tmp_path)


def test_a_workload_with_a_container_is_placed_once_its_containers_exist_and_running_once_one_is_ready(
    fleet: Fleet,
) -> None:
    made = fleet.workload("w-runs", 2)
    assert made["shape"]["container"] == {**SERVER, "args": [], "env": {}}
    # the create answer already knows: booked is not placed while no container exists
    (dep,) = made["deployments"]
    assert (dep["placedReplicas"], dep["phase"], dep["readyReplicas"]) == (2, "admitted", 0)
    (dep,) = fleet.shown(made)["deployments"]
    assert (dep["placedReplicas"], dep["phase"], dep["readyReplicas"]) == (2, "admitted", 0)
    (first, node_a), (second, node_b) = fleet.replicas(made)
    # bound on its node is not running for a replica whose node starts a container
    fleet.node(fleet.ids[node_a]).nodes.report(
        node_a, {"kind": "AllocationBound", "allocationId": first, "binding": "bound"}
    )
    assert fleet.shown(made)["deployments"][0]["phase"] == "admitted"
    fleet.report(node_a, first, "created")
    assert fleet.shown(made)["deployments"][0]["phase"] == "admitted"  # one of two exists
    fleet.report(node_b, second, "not-ready")
    dep = fleet.shown(made)["deployments"][0]
    assert (dep["phase"], dep["runningReplicas"], dep["readyReplicas"]) == ("placed", 0, 0)
    fleet.report(node_a, first, "ready", address="10.0.0.1:8080")
    shown = fleet.shown(made)
    dep = shown["deployments"][0]
    assert (dep["phase"], dep["runningReplicas"], dep["readyReplicas"]) == ("running", 1, 1)
    assert shown["readyReplicas"] == 1
    listed = fleet.http.get("/v1/workloads", headers=fleet.platform).json()["items"]
    assert [w["readyReplicas"] for w in listed] == [1]
    fleet.report(node_a, first, "exited", exitCode=1)
    assert fleet.shown(made)["deployments"][0]["phase"] == "placed"  # it exists, none is ready


def test_a_workload_without_a_container_keeps_bound_as_running(fleet: Fleet) -> None:
    made = fleet.workload("w-plain", 1)
    ((allocation, node),) = fleet.replicas(made)
    assert made["deployments"][0]["phase"] == "placed"
    fleet.node(fleet.ids[node]).nodes.report(
        node, {"kind": "AllocationBound", "allocationId": allocation, "binding": "bound"}
    )
    dep = fleet.shown(made)["deployments"][0]
    assert (dep["phase"], dep["runningReplicas"], dep["readyReplicas"]) == ("running", 1, 0)


def test_a_node_may_not_report_on_another_nodes_replica(fleet: Fleet) -> None:
    made = fleet.workload("w-runs", 1)
    ((allocation, node),) = fleet.replicas(made)
    other = "n-2" if node == "n-1" else "n-1"
    with pytest.raises(Forbidden):
        fleet.report(other, allocation, "ready")
    with pytest.raises(Forbidden):
        fleet.report(node, "dep-nope.r0", "ready")
    assert fleet.shown(made)["deployments"][0]["readyReplicas"] == 0


def test_a_crash_looping_replica_is_listed_in_its_deployment_and_by_doctor_until_it_ends(
    fleet: Fleet,
) -> None:
    made = fleet.workload("w-runs", 2)
    (first, node_a), (second, node_b) = fleet.replicas(made)
    fleet.report(node_a, first, "ready")
    fleet.report(node_b, second, "exited", exitCode=3, problem="crash-looping", restarts=5, detail="boom")
    (dep,) = fleet.shown(made)["deployments"]
    assert dep["phase"] == "running"
    assert dep["problems"] == [
        {
            "allocationId": second,
            "node": node_b,
            "problem": "crash-looping",
            "detail": "boom",
            "restarts": 5,
            "exitCode": 3,
        }
    ]
    (finding,) = fleet.doctor()
    assert (finding["code"], finding["subject"]) == ("replica.crash-looping", second)
    assert made["id"] in finding["detail"] and node_b in finding["detail"] and "boom" in finding["detail"]
    assert "exit code 3" in finding["detail"] and "5 restarts" in finding["detail"]
    fleet.report(node_a, first, "created", problem="image-not-found", detail="no such image")
    assert sorted(f["code"] for f in fleet.doctor()) == ["replica.crash-looping", "replica.image-not-found"]
    # scaled down: the second replica ends (never handed over), and what its node said goes with it
    fleet.http.post(f"/v1/workloads/{made['id']}/scale", json={"replicas": 1}, headers=fleet.platform)
    with fleet.store.begin() as tx:
        assert tx.replica_states.of_allocations([second]) == {second: []}
    assert [f["subject"] for f in fleet.doctor()] == [first]
    gone = fleet.http.delete(f"/v1/workloads/{made['id']}", headers=fleet.platform)
    assert gone.status_code == 200, gone.text
    assert fleet.doctor() == []
    with fleet.store.begin() as tx:
        assert tx.replica_states.of_allocations([first]) == {first: []}


def _endpoint(world: NodeWorld) -> None:
    body = {
        "name": "chat",
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
    made = world.http.post("/v1/endpoints", json=body, headers=world.platform)
    assert made.status_code == 201, made.text


def _component(world: NodeWorld, name: str, copies: int, min_copies: int) -> dict[str, Any]:
    body = {
        "name": name,
        "endpointName": "chat",
        "variantName": "AllTraffic",
        "model": "llama-3-8b",
        "partitionType": "mig-3g.40gb",
        "devicesRequired": 1,
        "copies": copies,
        "minCopies": min_copies,
        **({"container": SERVER, "invokePath": INVOKE} if name in RUNS else {}),
    }
    got = world.http.post("/v1/components", json=body, headers=world.platform)
    assert got.status_code == 201, got.text
    out: dict[str, Any] = got.json()
    return out


def test_an_endpoint_is_in_service_once_each_component_with_a_container_has_min_copies_ready(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    daemon, _ = world.daemon("n-1")
    other = world.join("n-2")
    assert daemon.step(False)
    _endpoint(world)
    assert daemon.step(True)
    Reconciler(store, world.clock, "r1").tick()

    def status() -> str:
        return str(world.http.get("/v1/endpoints/chat", headers=world.platform).json()["status"])

    assert status() == "InService"  # no component yet
    plain = _component(world, "plain", 1, 1)  # no container: placed is serving, as before
    assert (plain["readyCopies"], status()) == (1, "InService")
    assert "container" not in plain and plain["invokePath"] == "/invocations"
    made = _component(world, "llama", 2, 2)
    assert (made["container"]["image"], made["invokePath"]) == (SERVER["image"], INVOKE)
    assert (made["placedCopies"], made["readyCopies"]) == (2, 0)
    assert [c["runtimeState"] for c in made["copies"]] == [None, None]
    assert status() == "Creating"
    node = world.node(daemon.identity)

    def report(allocation: str, state: str, client: Any = node, at: str = "n-1") -> None:
        client.nodes.report(at, {"kind": "ReplicaState", "allocationId": allocation, "state": state})

    report("copy:llama:0", "ready")
    with pytest.raises(Forbidden):  # the copy is not on n-2
        report("copy:llama:1", "ready", world.node(other), "n-2")
    with pytest.raises(Forbidden):  # no such copy
        report("copy:llama:9", "ready")
    shown = world.http.get("/v1/components/llama", headers=world.platform).json()
    assert shown["readyCopies"] == 1
    assert [c["runtimeState"] for c in shown["copies"]] == ["ready", None]
    assert status() == "Creating"  # 1 ready of minCopies 2
    report("copy:llama:1", "created")
    assert status() == "Creating"
    report("copy:llama:1", "ready")
    assert status() == "InService"
    report("copy:llama:0", "not-ready")
    assert status() == "Creating"
    # deleted and created again: the new copies do not inherit the old containers' word
    assert world.http.delete("/v1/components/llama", headers=world.platform).status_code == 200
    again = _component(world, "llama", 2, 1)
    assert (again["readyCopies"], [c["runtimeState"] for c in again["copies"]]) == (0, [None, None])
    assert status() == "Creating"
    # a node's removed word on a copy it no longer runs is dropped, not refused
    assert (
        world.http.post("/v1/components/llama/scale", json={"copies": 1}, headers=world.platform).status_code
        == 200
    )
    report("copy:llama:1", "removed")
    with store.begin() as tx:
        assert tx.replica_states.of_allocations(["copy:llama:1"]) == {"copy:llama:1": []}
