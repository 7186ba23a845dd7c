"""`serve --fleet` runs a `bcd` loop for every node of the file (fake NVML, HTTP to the server, like a
real node), so a reservation made on `make run`'s fleet is handed to its node: its CDI file appears
in that node's CDI directory and the reservation shows `bound`; released, the file goes. With
`--no-simulate` the nodes are registered and have no atoms until their own `bcd` reports."""

from __future__ import annotations

import json
import re
import sqlite3
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from better_compute.bcd import cdi
from tests.e2e.conftest import Server, start_server
from tests.e2e.test_bcd_loop import eventually

pytestmark = pytest.mark.e2e

NOTEBOOK = {
    "tenantId": "platform",
    "poolId": "h100-mig",
    "duration": "1h",
    "devices": [
        {
            "class": "gpu.mig",
            "count": 1,
            "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]},
        }
    ],
}


def nodes_dir(server: Server) -> Path:
    found = re.search(r"keys, CDI files and logs under (\S+)\)", server.output())
    assert found, server.output()
    return Path(found.group(1))


def test_a_reservation_on_the_demo_fleet_is_handed_to_its_node_by_the_simulated_bcd(server: Server) -> None:
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    with httpx.Client(base_url=server.url, headers=admin, timeout=10) as http:
        made = http.post("/v1/reservations", json=NOTEBOOK)
        assert made.status_code == 201, made.text
        rid, atom = made.json()["id"], made.json()["atoms"][0]
        assert atom["node"] == "euw-h100-b"  # the node that keeps its mixed layout
        spec_file = cdi.spec_path(nodes_dir(server) / "euw-h100-b" / "cdi", rid)
        eventually(spec_file.exists, f"{spec_file} written by the simulated bcd")
        written = json.loads(spec_file.read_text())
        env = dict(e.split("=", 1) for e in written["devices"][0]["containerEdits"]["env"])
        assert env["BC_DEVICE_UUIDS"] == atom["attributes"]["migUuid"]
        assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
        eventually(lambda: http.get(f"/v1/reservations/{rid}").json()["binding"] == "bound", "bound")
        assert http.post(f"/v1/reservations/{rid}/release").status_code == 200
        eventually(lambda: not spec_file.exists(), f"{spec_file} removed")
        eventually(lambda: http.get(f"/v1/reservations/{rid}").json()["binding"] == "released", "released")
        gpus = {g["id"]: g for g in http.get("/v1/gpus", params={"node": "euw-h100-b"}).json()["items"]}

        def all_in_contact() -> bool:
            nodes = http.get("/v1/nodes").json()["items"]
            return len(nodes) == 8 and all(n["lastContactAt"] is not None for n in nodes)

        # Each simulated node is a live bcd: idle, it long-polls its spec, and that is its contact.
        eventually(all_in_contact, "every simulated node in contact")
        assert not [f for f in http.get("/v1/doctor").json()["findings"] if f["code"] == "node.silent"]
    # The daemon left the node's own layout alone: its pool's policy is all-1g.10gb.
    profiles = {i["profile"] for g in gpus.values() for i in g["migInstances"]}
    assert profiles == {"3g.40gb", "2g.20gb"}


def test_no_simulate_registers_the_nodes_and_waits_for_their_bcd(tmp_path: Path) -> None:
    with start_server(tmp_path, options=["--no-simulate"]) as server:
        admin = {"Authorization": f"Bearer {server.admin_token}"}
        with httpx.Client(base_url=server.url, headers=admin, timeout=10) as http:
            nodes = http.get("/v1/nodes").json()["items"]
            atoms = http.get("/v1/atoms").json()["items"]
        assert len(nodes) == 8 and all(n["lastReportAt"] is n["lastContactAt"] is None for n in nodes)
        assert atoms == []
        assert "each waits for its bcd to join" in server.output()
        assert "bcd loop" not in server.output()


def test_a_workload_replica_is_a_cdi_device_its_simulated_node_binds_and_it_runs(server: Server) -> None:
    """A replica's allocation id (`<deploymentId>.r<n>`) is what the node names its CDI device: an
    id with a `/` in it stopped every node's loop at the hand-over, and no replica ever ran."""
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    body = {
        "project": "platform",
        "name": "e2e-train",
        "shape": {"device_class": "a100-80gb", "device_count": 2},
        "replicas": 2,
    }
    with httpx.Client(base_url=server.url, headers=admin, timeout=10) as http:
        made = http.post("/v1/workloads", json=body)
        assert made.status_code == 201, made.text
        wid = made.json()["id"]
        assert made.json()["placedReplicas"] == 2

        def running() -> int:
            deps = http.get(f"/v1/workloads/{wid}").json()["deployments"]
            return sum(int(d["runningReplicas"]) for d in deps)

        eventually(lambda: running() == 2, "both replicas running")
        (dep,) = http.get(f"/v1/workloads/{wid}").json()["deployments"]
        assert dep["phase"] == "running" and dep["clusterId"] == "us-east"
        written = list((nodes_dir(server)).glob("use-a100-*/cdi/*.json"))
        assert {p.name for p in written} == {
            cdi.spec_path(Path("."), f"{dep['id']}.r{i}").name for i in (0, 1)
        }, written
        assert http.delete(f"/v1/workloads/{wid}").status_code in (200, 204)
        eventually(lambda: not list(nodes_dir(server).glob("use-a100-*/cdi/*.json")), "CDI files removed")
        # handed over, the replicas terminated; each ends when its node reports it released
        replicas = [f"{dep['id']}.r{i}" for i in (0, 1)]
        terminating = http.get("/v1/events", params={"type": "workload.replicas.terminating", "subject": wid})
        assert sorted(a for e in terminating.json()["items"] for a in e["payload"]["allocations"]) == replicas

        def released(allocation: str) -> bool:
            got = http.get("/v1/events", params={"type": "ledger.released", "subject": allocation})
            return bool(got.json()["items"])

        eventually(lambda: all(released(a) for a in replicas), "the nodes released both replicas")


def replica_states(server: Server) -> dict[str, tuple[str, str, str | None]]:
    """{allocation: (node, state, address)} of what the server's nodes reported of their containers."""
    database = server.database_url.removeprefix("sqlite:///")
    with closing(sqlite3.connect(database)) as db:
        rows = db.execute("SELECT allocation_id, node_id, state, address FROM replica_states").fetchall()
    return {a: (n, s, address) for a, n, s, address in rows}


def test_the_simulated_nodes_run_a_workload_replicas_container_with_the_fake_runtime(server: Server) -> None:
    """`serve --fleet --runtime fake`: each replica's node starts its container in the server's
    process, probes it and reports it ready; the container answers at the address reported; the
    workload deleted, its containers are removed."""
    assert "containers run with fake (in-process): asked for (--runtime fake)" in server.output()
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    container = {
        "image": "localhost/better-compute-demo:1",
        "ports": [{"containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/ping", "port": 8080}},
    }
    body = {
        "project": "platform",
        "name": "e2e-served",
        "shape": {"deviceClass": "a100-80gb", "deviceCount": 1, "container": container},
        "replicas": 2,
    }
    with httpx.Client(base_url=server.url, headers=admin, timeout=10) as http:
        made = http.post("/v1/workloads", json=body)
        assert made.status_code == 201, made.text
        wid = made.json()["id"]
        (dep,) = http.get(f"/v1/workloads/{wid}").json()["deployments"]
        replicas = {f"{dep['id']}.r{i}" for i in (0, 1)}

        def ready() -> dict[str, tuple[str, str, str | None]]:
            states = {a: s for a, s in replica_states(server).items() if a in replicas}
            return states if len(states) == 2 and all(s[1] == "ready" for s in states.values()) else {}

        states = eventually(ready, "both replicas' containers ready")
        for allocation, (node, _, address) in states.items():
            assert node.startswith("use-a100-") and address
            answer = httpx.post(f"http://{address}/invocations", content=b"hello", timeout=5)
            assert answer.status_code == 200 and answer.json()["allocation"] == allocation
        assert http.delete(f"/v1/workloads/{wid}").status_code in (200, 204)

        def removed() -> bool:
            # `removed`, or forgotten: the node reports `removed` before it releases the
            # allocation, and the server forgets the states of an allocation that ended.
            states = replica_states(server)
            return all(a not in states or states[a][1] == "removed" for a in replicas)

        eventually(removed, "both replicas' containers removed")
