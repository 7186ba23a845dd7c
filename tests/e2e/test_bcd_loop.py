"""`bcd run` end to end on loopback: a real server over a three-node mig pool and three `bcd run
--nvml fake` processes. A `gpu.mig` reservation's CDI spec appears on its node with its `MIG-…` uuid
and its device nodes, and the reservation shows `bound`; releasing it removes the spec and shows `released`. A report
queued when its `bcd` is SIGKILLed, and already taken by the server, is sent again after the restart
and takes effect once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import yaml

from better_compute.bcd import cdi
from better_compute.bcd.identity import Identity
from better_compute.bcd.joining import join, node_client
from better_compute.client import Compute
from tests.builders import small_fleet
from tests.e2e.conftest import Server, clean_env, start_server

pytestmark = pytest.mark.e2e

NODES = ("n-1", "n-2", "n-3")
BOUND = 60.0
"""How long an outcome may take to show before the test gives up (it is polled for, never timed)."""

T = TypeVar("T")


def eventually(probe: Callable[[], T | None], what: str, bound: float = BOUND) -> T:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        found = probe()
        if found:  # an empty list is "not yet", like None and False
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {bound:.0f} s: {what}")


def when(text: str) -> datetime:
    return datetime.fromisoformat(text)


def bcd(state: Path, fleet: Path, home: Path) -> subprocess.Popen[bytes]:
    code = "from better_compute.entrypoints.bcd import main; main()"
    args = ["run", "--state-dir", str(state), "--nvml", "fake", "--fleet", str(fleet)]
    args += ["--cdi-root", str(state / "cdi"), "--wait", "5"]
    with (state / "bcd.log").open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-c", code, *args], stdout=log, stderr=log, env=clean_env(home)
        )


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(small_fleet(nodes=3)), encoding="utf-8")
    # --no-simulate: the nodes are this test's `bcd` processes, not the server's own loops.
    with start_server(tmp_path / "server", fleet=path, options=["--no-simulate"]) as server:
        yield server, path


def test_bcd_hands_a_mig_instance_over_and_resends_a_queued_report_once(
    fleet: tuple[Server, Path], tmp_path: Path
) -> None:
    server, fleet_file = fleet
    admin = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.admin_token}"})
    with admin, Compute(server.url, server.admin_token) as typed:
        for node in NODES:
            join(server.url, typed.nodes.join_token(node).token, node, tmp_path / node)
        tenant = typed.credentials.create(tenant_id="platform", name="e2e").token
        quota = {"tenantId": "platform", "poolId": "p1", "class": "gpu.mig", "limit": 8}
        assert admin.put("/v1/quotas", json=quota).status_code == 200
        user = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {tenant}"})
        with user:
            run_the_loop(admin, user, tmp_path, fleet_file, server)


def run_the_loop(
    admin: httpx.Client, user: httpx.Client, tmp_path: Path, fleet_file: Path, server: Server
) -> None:
    procs = {n: bcd(tmp_path / n, fleet_file, server.home) for n in NODES}
    try:

        def reported() -> bool:
            nodes = admin.get("/v1/nodes").json()["items"]
            return all(n["lastReportAt"] is not None for n in nodes) and len(nodes) == len(NODES)

        eventually(reported, "every node's first report")  # the nodes have no atoms until then

        def polling() -> bool:
            # Idle, a bcd sends no report but reads its spec, signed: that read is its contact.
            nodes = admin.get("/v1/nodes").json()["items"]
            return all(when(n["lastContactAt"]) > when(n["lastReportAt"]) for n in nodes)

        eventually(polling, "every idle node's spec read recorded as contact")
        body = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "4h"}
        made = user.post("/v1/reservations", json=body)
        assert made.status_code == 201, made.text
        rid = made.json()["id"]
        atom = made.json()["atoms"][0]
        node = atom["node"]
        spec_file = cdi.spec_path(tmp_path / node / "cdi", rid)
        eventually(spec_file.exists, f"{spec_file} written")
        written = json.loads(spec_file.read_text())
        edits = written["devices"][0]["containerEdits"]
        env = dict(e.split("=", 1) for e in edits["env"])
        assert env["BC_DEVICE_UUIDS"] == atom["attributes"]["migUuid"]
        assert env["BC_DEVICE_UUIDS"].startswith("MIG-") and env["NVIDIA_VISIBLE_DEVICES"] == "void"
        # The simulated node's driver tree (under its state directory) names the instance's GPU node
        # and its two capability nodes, as a GPU node's /dev would.
        caps = [n for n in edits["deviceNodes"] if n["path"].startswith("/dev/nvidia-caps/")]
        assert len(caps) == 2 and written["cdiVersion"] == "0.5.0"
        assert all(
            n["hostPath"] == f"{tmp_path / node / 'node-root'}{n['path']}" for n in edits["deviceNodes"]
        )

        def binding(state: str) -> bool:
            return bool(user.get(f"/v1/reservations/{rid}").json()["binding"] == state)

        eventually(lambda: binding("bound"), "binding bound")
        released = eventually(
            lambda: user.post(f"/v1/reservations/{rid}/release").status_code == 200 or None,
            "the reservation released",
        )
        assert released
        eventually(lambda: not spec_file.exists(), f"{spec_file} removed")
        eventually(lambda: binding("released"), "binding released")

        def released_events() -> list[dict[str, Any]]:
            items = admin.get("/v1/events", params={"type": "allocation.released"}).json()["items"]
            return [e for e in items if e.get("subject") == rid]

        assert len(eventually(lambda: released_events() or None, "allocation.released recorded")) == 1
        # SIGKILL with a report queued that the server already took (its answer lost in the crash).
        procs[node].send_signal(signal.SIGKILL)
        procs[node].wait(timeout=30)
        state = tmp_path / node
        report = {"kind": "AllocationReleased", "allocationId": rid}
        report_id = str(uuid.uuid4())
        (state / "queue" / f"{999999:012d}-{report_id}.json").write_text(
            json.dumps({"reportId": report_id, "report": report})
        )
        with node_client(Identity.load(state)) as signed:
            assert not signed.nodes.report(node, report, report_id=report_id).duplicate
        assert len(released_events()) == 2
        procs[node] = bcd(state, fleet_file, server.home)
        eventually(lambda: not list((state / "queue").glob("*.json")), "the queue sent after the restart")
        log = (state / "bcd.log").read_text()
        assert any(
            json.loads(line).get("reportId") == report_id and json.loads(line).get("duplicate") is True
            for line in log.splitlines()
            if line.startswith("{")
        ), log
        assert len(released_events()) == 2
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        statuses = [proc.wait(timeout=30) for proc in procs.values()]
    assert statuses.count(0) == len(NODES), statuses
