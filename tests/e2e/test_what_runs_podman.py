"""What runs, end to end with real containers: a real server, three `bcd run --nvml fake --runtime
podman` processes over node trees holding real device nodes (`mknod`), and Debian's podman with runc
starting the demo model server image (`make demo-image`: busybox httpd).

A workload of 3 replicas goes pending -> admitted -> placed -> running with 3 ready containers, each
holding its CDI device; scaling it to 1 stops two containers; draining its cluster moves the last
one to the other cluster. An endpoint with two components reaches InService and `invoke` returns
each component's own answer; `workloads exec` runs a command in a replica's container through its
node's agent. `bcd` is SIGKILLed twice along the way and restarted: no container is
lost and none doubled.

It needs root, podman, runc and busybox-static; without them it skips saying which is missing,
except under CI (`CI=true`), where it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from better_compute.bcd import cdi, node_tree
from better_compute.bcd.containers import ALLOCATION_LABEL, NODE_LABEL
from better_compute.bcd.joining import join
from better_compute.client import Compute
from better_compute.entrypoints import demo_image
from tests.conftest import SERIAL
from tests.e2e.conftest import Server, clean_env, start_server
from tests.e2e.test_bcd_loop import eventually

pytestmark = [pytest.mark.e2e, SERIAL]

CDI_ROOT = Path("/var/run/cdi")
LAYOUT = "mixed:3g.40gb+2x2g.20gb"
NODES = ("w-1", "w-2", "e")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the podman end-to-end test cannot run: {reason}")
    pytest.skip(reason)


def fleet() -> dict[str, Any]:
    """Two clusters: c1 holds w-1 (two whole H100s) and e (one H100 cut by MIG, for the endpoint);
    c2 holds w-2 (two whole H100s)."""
    h100 = {"key": "gpuModel", "op": "In", "values": ["H100-80GB"]}
    return {
        "tenants": [{"id": "platform"}],
        "clusters": [
            {
                "name": "c1",
                "region": "r1",
                "nodes": [
                    {"name": "w-1", "gpus": {"model": "H100-80GB", "count": 2}},
                    {"name": "e", "gpus": {"model": "H100-80GB", "count": 1, "migLayout": LAYOUT}},
                ],
            },
            {"name": "c2", "region": "r2", "nodes": [{"name": "w-2", "gpus": {"model": "H100-80GB", "count": 2}}]},
        ],
        "pools": [
            {"name": "w1", "cluster": "c1", "mode": "exclusive", "owner": "platform", "nodes": ["w-1"],
             "ownerQuota": {"gpu": 2}},
            {"name": "w2", "cluster": "c2", "mode": "exclusive", "owner": "platform", "nodes": ["w-2"],
             "ownerQuota": {"gpu": 2}},
            {"name": "ep", "cluster": "c1", "mode": "mig", "owner": "platform", "policy": {"migLayout": LAYOUT},
             "nodes": ["e"], "ownerQuota": {"gpu.mig": 8}},
        ],
        "deviceClasses": [{"name": "h100", "class": "gpu", "selector": {"matchExpressions": [h100]}}],
    }  # fmt: skip


def _mknod(path: Path, major: int, minor: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        os.mknod(path, 0o20666, os.makedev(major, minor))


def node_root(root: Path, gpus: int) -> Path:
    """A simulated driver tree with the device nodes a GPU node's /dev has: each GPU's, the
    control and UVM nodes, and every MIG capability the driver's table names for these GPUs."""
    tree = node_tree.simulated(root)
    for gpu in range(gpus):
        _mknod(tree.host_path(f"/dev/nvidia{gpu}"), node_tree.NVIDIA_MAJOR, gpu)
    _mknod(tree.host_path("/dev/nvidiactl"), node_tree.NVIDIA_MAJOR, node_tree.CONTROL_MINOR)
    uvm, caps = node_tree.FAKE_MAJORS["nvidia-uvm"], node_tree.FAKE_MAJORS["nvidia-caps"]
    _mknod(tree.host_path("/dev/nvidia-uvm"), uvm, node_tree.UVM_MINOR)
    _mknod(tree.host_path("/dev/nvidia-uvm-tools"), uvm, node_tree.UVM_TOOLS_MINOR)
    table = tree.read()
    for line in node_tree.driver_mig_minors().splitlines():
        cap = line.split()[0]
        if cap.startswith(tuple(f"gpu{g}/" for g in range(gpus))):
            minor = table.cap_minor(cap)
            _mknod(tree.host_path(f"/dev/nvidia-caps/nvidia-cap{minor}"), caps, minor)
    return root


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Server, Path, dict[str, str]]]:
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            _unavailable(f"{tool} is not installed (apt-get install podman runc)")
    if os.geteuid() != 0:
        _unavailable("device nodes (mknod) and /var/run/cdi need root")
    env = clean_env(tmp_path)  # names a containers.conf for this host's podman (runc, ulimits)
    try:
        demo_image.build(podman=["podman"])
    except RuntimeError as exc:
        _unavailable(str(exc))
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet()), encoding="utf-8")
    with start_server(tmp_path / "server", fleet=path, options=["--no-simulate"]) as server:
        try:
            yield server, path, env
        finally:
            _remove_containers()


def podman_ps(env: dict[str, str]) -> list[dict[str, Any]]:
    """This test's nodes' containers, as podman lists them."""
    done = subprocess.run(
        ["podman", "ps", "-a", "--format", "json", "--filter", f"label={NODE_LABEL}"],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    return [c for c in json.loads(done.stdout or "[]") if c["Labels"].get(NODE_LABEL) in NODES]


def _remove_containers() -> None:
    done = subprocess.run(
        ["podman", "ps", "-aq", "--filter", f"label={NODE_LABEL}"],
        capture_output=True,
        text=True,
        check=False,
    )
    ids = done.stdout.split()
    if ids:
        subprocess.run(["podman", "rm", "-f", "-t", "0", *ids], capture_output=True, check=False)


def bcd(state: Path, fleet_file: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    code = "from better_compute.entrypoints.bcd import main; main()"
    args = ["run", "--state-dir", str(state), "--nvml", "fake", "--fleet", str(fleet_file)]
    args += ["--cdi-root", str(CDI_ROOT), "--node-root", str(state / "node-root"), "--wait", "5"]
    args += ["--runtime", "podman", "--stop-timeout", "1", "--listen", "127.0.0.1:0"]
    with (state / "bcd.log").open("ab") as log:
        return subprocess.Popen([sys.executable, "-c", code, *args], stdout=log, stderr=log, env=env)


def running(env: dict[str, str], node: str | None = None) -> dict[str, str]:
    """{allocation: container id} of the running containers (of `node`)."""
    return {
        c["Labels"][ALLOCATION_LABEL]: c["Id"]
        for c in podman_ps(env)
        if c["State"] == "running" and (node is None or c["Labels"][NODE_LABEL] == node)
    }


def test_replicas_and_copies_run_in_podman_and_survive_bcd_being_killed(
    world: tuple[Server, Path, dict[str, str]], tmp_path: Path
) -> None:
    server, fleet_file, env = world
    admin = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.admin_token}"})
    with admin, Compute(server.url, server.admin_token) as typed:
        for node in NODES:
            state = tmp_path / node
            join(server.url, typed.nodes.join_token(node).token, node, state)
            node_root(state / "node-root", 1 if node == "e" else 2)
        # Created before any node has reported: there are no atoms yet, so it waits, pending.
        wid = create_workload(admin)
        procs = {n: bcd(tmp_path / n, fleet_file, env) for n in NODES}
        try:
            the_story(admin, env, procs, tmp_path, fleet_file, wid)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs.values():
                proc.wait(timeout=60)


def create_workload(admin: httpx.Client) -> str:
    """A workload of 3 replicas of one whole H100, each running the demo model server."""
    container = {
        "image": demo_image.TAG,
        "env": {"MODEL": "trainer"},
        "ports": [{"containerPort": demo_image.PORT}],
        "readinessProbe": {"httpGet": {"path": "/ping", "port": demo_image.PORT}, "periodSeconds": 1},
    }
    body = {
        "name": "serve",
        "tenantId": "platform",
        "shape": {"deviceClass": "h100", "deviceCount": 1, "container": container},
        "replicas": 3,
        "strategy": "spread",
    }
    made = admin.post("/v1/workloads", json=body)
    assert made.status_code == 201, made.text
    wid = made.json()["id"]
    assert (made.json()["placedReplicas"], made.json()["unplacedReplicas"]) == (0, 3)
    assert {d["phase"] for d in made.json()["deployments"]} <= {"pending"}
    return str(wid)


def the_story(
    admin: httpx.Client,
    env: dict[str, str],
    procs: dict[str, subprocess.Popen[bytes]],
    tmp_path: Path,
    fleet_file: Path,
    wid: str,
) -> None:
    def reported() -> bool:
        nodes = admin.get("/v1/nodes").json()["items"]
        return len(nodes) == len(NODES) and all(n["lastReportAt"] is not None for n in nodes)

    eventually(reported, "every node's first report")

    seen: list[str] = ["pending"]

    def workload() -> dict[str, Any]:
        w: dict[str, Any] = admin.get(f"/v1/workloads/{wid}").json()
        phases = {d["phase"] for d in w["deployments"]}
        if len(phases) == 1 and seen[-1] not in phases:
            seen.append(phases.pop())
        return w

    def ready(n: int) -> bool:
        w = workload()
        return sum(d["readyReplicas"] for d in w["deployments"]) == n and len(running(env)) == n

    eventually(lambda: ready(3), "3 replicas ready in 3 running containers")
    assert {d["phase"] for d in workload()["deployments"]} == {"running"}
    # The phases it was seen in, polled: never out of order (a short one may pass unseen).
    order = ["pending", "admitted", "placed", "running"]
    assert seen == sorted(set(seen), key=order.index) and seen[-1] == "running", seen
    # Each container holds its replica's CDI device: its GPU's node, no other GPU's.
    for allocation, cid in running(env).items():
        devices = podman_exec(env, cid, "ls /dev")
        assert "nvidiactl" in devices
        assert sum(1 for d in devices.split() if d.startswith("nvidia") and d[6:].isdigit()) == 1
        assert cdi.spec_path(CDI_ROOT, allocation).exists()
    # A command run in a replica's container through its node's agent (`workloads exec`): podman's
    # own exit codes pass through, and each exec is logged.
    said = admin.post(f"/v1/workloads/{wid}/exec", json={"command": ["busybox", "echo", "hi"]})
    assert said.status_code == 200, said.text
    assert (said.json()["exitCode"], said.json()["stdout"]) == (0, "hi\n")
    assert said.json()["allocationId"] in running(env)
    failed = admin.post(f"/v1/workloads/{wid}/exec", json={"command": ["sh", "-c", "echo no >&2; exit 3"]})
    assert (failed.json()["exitCode"], failed.json()["stderr"]) == (3, "no\n")
    missing = admin.post(f"/v1/workloads/{wid}/exec", json={"command": ["no-such-command"]})
    assert missing.json()["exitCode"] == 127
    logged = admin.get("/v1/events", params={"type": "replica.exec"}).json()["items"]
    assert [e["payload"]["command"] for e in logged] == ["busybox", "sh", "no-such-command"]
    ended = admin.get("/v1/events", params={"type": "replica.exec_finished"}).json()["items"]
    assert [e["payload"]["exitCode"] for e in ended] == [0, 3, 127]

    # -- SIGKILL a node's bcd: its containers keep running and are adopted, not doubled -----------------
    before = running(env)
    victim = next(iter(podman_ps(env)))["Labels"][NODE_LABEL]
    procs[victim].send_signal(signal.SIGKILL)
    procs[victim].wait(timeout=30)
    assert running(env) == before
    procs[victim] = bcd(tmp_path / victim, fleet_file, env)
    eventually(lambda: started(tmp_path / victim) == 2, "bcd restarted")
    eventually(lambda: ready(3), "still 3 ready after the restart")
    assert running(env) == before
    assert len(podman_ps(env)) == 3

    # -- scale to 1: two containers stop -------------------------------------------------------------------
    scaled = admin.post(f"/v1/workloads/{wid}/scale", json={"replicas": 1})
    assert scaled.status_code == 200, scaled.text
    eventually(lambda: len(podman_ps(env)) == 1 and ready(1), "two containers removed, one left ready")

    # -- drain its cluster: the replica moves to the other cluster -----------------------------------------
    (last,) = podman_ps(env)
    moved_from = last["Labels"][NODE_LABEL]
    cluster = "c2" if moved_from == "w-2" else "c1"
    op = admin.post(
        "/v1/operations",
        json={"type": "workload.drain", "workloadId": wid, "payload": {"cluster": cluster}},
    )
    assert op.status_code == 201, op.text

    def moved() -> bool:
        now = podman_ps(env)
        return len(now) == 1 and now[0]["Labels"][NODE_LABEL] != moved_from and ready(1)

    eventually(moved, "the replica's container moved to the other cluster's node")

    # -- an endpoint with two components answers each with its own model ---------------------------------
    endpoint = {
        "name": "chat",
        "tenantId": "platform",
        "variants": [
            {
                "name": "AllTraffic",
                "poolId": "ep",
                "instanceCount": 1,
                "acceleratorPartitionLayouts": [
                    {"acceleratorPartitionTypes": ["mig-3g.40gb", "mig-2g.20gb", "mig-2g.20gb"]}
                ],
            }
        ],
    }
    created = admin.post("/v1/endpoints", json=endpoint)
    assert created.status_code == 201, created.text
    for name, partition in (("alpha", "mig-3g.40gb"), ("beta", "mig-2g.20gb")):
        component = {
            "name": name,
            "endpointName": "chat",
            "variantName": "AllTraffic",
            "model": name,
            "partitionType": partition,
            "copies": 1,
            "invokePath": demo_image.INVOKE_PATH,
            "container": {
                "image": demo_image.TAG,
                "env": {"MODEL": name},
                "readinessProbe": {"httpGet": {"path": "/ping", "port": demo_image.PORT}, "periodSeconds": 1},
            },
        }
        made_c = admin.post("/v1/components", json=component)
        assert made_c.status_code == 201, made_c.text

    eventually(
        lambda: (
            admin.get("/v1/endpoints/chat").json()["status"] == "InService" and len(running(env, "e")) == 2
        ),
        "the endpoint in service with two ready copies",
    )
    for name in ("alpha", "beta"):
        answer = admin.post(
            "/v1/endpoints/chat/invoke",
            content=b"hello",
            headers={"X-Amzn-SageMaker-Inference-Component": name, "Content-Type": "text/plain"},
        )
        assert answer.status_code == 200, answer.text
        said = answer.json()
        assert said["model"] == name and said["bytes"] == 5
        assert said["devices"].startswith("MIG-")

    # -- SIGKILL the endpoint's bcd: the copies keep answering, and come back adopted ---------------------
    copies = running(env, "e")
    procs["e"].send_signal(signal.SIGKILL)
    procs["e"].wait(timeout=30)
    answer = admin.post(
        "/v1/endpoints/chat/invoke", content=b"x", headers={"X-Amzn-SageMaker-Inference-Component": "beta"}
    )
    assert answer.status_code == 200 and answer.json()["model"] == "beta"
    procs["e"] = bcd(tmp_path / "e", fleet_file, env)
    eventually(lambda: started(tmp_path / "e") == 2, "bcd restarted")
    eventually(lambda: admin.get("/v1/endpoints/chat").json()["status"] == "InService", "still in service")
    assert running(env, "e") == copies
    assert len(podman_ps(env)) == 3


def started(state: Path) -> int:
    """How many times the node's bcd logged its start."""
    return (state / "bcd.log").read_text().count('"bcd.start"')


def podman_exec(env: dict[str, str], cid: str, script: str) -> str:
    done = subprocess.run(
        ["podman", "exec", cid, "sh", "-c", script], capture_output=True, text=True, check=False, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
