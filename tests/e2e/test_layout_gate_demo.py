"""The README's layout change on `make run`'s fleet: `h100-mig` goes from `all-1g.10gb` to
`mixed:3g.40gb+2x2g.20gb` while a booking holds an instance on one of its nodes. The idle node is
repartitioned by its simulated `bcd` within seconds; the busy one keeps its layout, its change
scheduled for the end of that booking."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import start_server
from tests.e2e.test_bcd_loop import eventually

pytestmark = pytest.mark.e2e

ONE_G = {
    "tenantId": "platform",
    "poolId": "h100-mig",
    "duration": "1h",
    "devices": [
        {
            "class": "gpu.mig",
            "count": 1,
            "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["1g.10gb"]}]},
        }
    ],
}
NEW = "mixed:3g.40gb+2x2g.20gb"


def test_the_idle_node_converges_and_the_busy_one_waits_for_its_booking(tmp_path: Path) -> None:
    with start_server(tmp_path) as server:
        booked = server.cli_env("api", "reservations.create", "--json", json.dumps(ONE_G))
        assert booked.returncode == 0, booked.stderr
        reservation = json.loads(booked.stdout)
        busy = reservation["atoms"][0]["node"]
        idle = "euw-h100-a-2" if busy == "euw-h100-a-1" else "euw-h100-a-1"
        preview = server.cli_env("pools", "preview-layout", "h100-mig", NEW)
        assert preview.returncode == 0, preview.stderr
        assert busy in preview.stdout
        changed = server.cli_env(
            "api", "pools.update", "--json", json.dumps({"id": "h100-mig", "policy": {"migLayout": NEW}})
        )
        assert changed.returncode == 0, changed.stderr
        admin = {"Authorization": f"Bearer {server.admin_token}"}
        with httpx.Client(base_url=server.url, headers=admin, timeout=10) as http:

            def events(kind: str, node: str) -> list[dict[str, Any]]:
                found = http.get("/v1/events", params={"type": kind, "subject": node}).json()["items"]
                return list(found)

            def profiles(node: str) -> set[str]:
                gpus = http.get("/v1/gpus", params={"node": node}).json()["items"]
                return {i["profile"] for g in gpus for i in g["migInstances"]}

            eventually(lambda: events("node.mig.applied", idle) or None, f"{idle} converged")
            assert profiles(idle) == {"3g.40gb", "2g.20gb"}
            (scheduled,) = eventually(lambda: events("node.mig.scheduled", busy) or None, f"{busy} scheduled")
            assert scheduled["payload"]["at"].replace("+00:00", "Z") == reservation["end"].replace(
                "+00:00", "Z"
            )
            assert events("node.mig.granted", busy) == []
            listed = server.cli_env("events", "--type", "node.mig.scheduled")
            assert listed.returncode == 0, listed.stderr
            assert busy in listed.stdout and idle in listed.stdout
            assert profiles(busy) == {"1g.10gb"}  # its holder keeps its instance
            kept = http.get(f"/v1/reservations/{reservation['id']}").json()
            assert kept["status"] == "active" and kept["atoms"] == reservation["atoms"]


def test_a_new_slot_count_on_the_demo_reaches_the_simulated_node(tmp_path: Path) -> None:
    """The README's `replicas` change on `h100-timeslice`: the idle node's daemon reads the new
    count and the gate releases it, with two slots per GPU instead of four, bookable."""
    with start_server(tmp_path) as server:
        changed = server.cli_env(
            "api", "pools.update", "--json", json.dumps({"id": "h100-timeslice", "policy": {"replicas": 2}})
        )
        assert changed.returncode == 0, changed.stderr
        admin = {"Authorization": f"Bearer {server.admin_token}"}
        with httpx.Client(base_url=server.url, headers=admin, timeout=10) as http:
            applied = eventually(
                lambda: (
                    http.get(
                        "/v1/events", params={"type": "node.mig.applied", "subject": "euw-h100-ts"}
                    ).json()["items"]
                    or None
                ),
                "euw-h100-ts applied",
            )
            assert applied[0]["payload"]["layout"] == "replicas:2"
            atoms = http.get("/v1/atoms", params={"class": "gpu.slot", "limit": 100}).json()["items"]
            mine = [a for a in atoms if a["node"] == "euw-h100-ts" and a["present"]]
            assert {a["attributes"]["slots"] for a in mine} == {2} and all(a["bookable"] for a in mine)
            spec = http.get("/v1/nodes/euw-h100-ts/spec").json()
            assert spec["sharing"]["replicas"] == 2
