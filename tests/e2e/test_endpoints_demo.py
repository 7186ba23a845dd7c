"""Inference endpoints on `make run`'s fleet, over loopback: an endpoint on two of `h100-mig`'s nodes
goes `InService` once their simulated `bcd` loops have cut them, three components place their
copies, and a live relayout completes while every component keeps at least its `minCopies`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from better_compute.client import Compute
from tests.e2e.conftest import start_server
from tests.e2e.test_bcd_loop import eventually

pytestmark = pytest.mark.e2e

LAYOUT = ["mig-3g.40gb", "mig-2g.20gb", "mig-2g.20gb"]
NEW = ["mig-3g.40gb", "mig-2g.20gb", "mig-1g.10gb", "mig-1g.10gb"]


def test_an_endpoint_goes_in_service_and_relayouts_live_keeping_min_copies(tmp_path: Path) -> None:
    with start_server(tmp_path) as server, Compute(server.url, server.admin_token, timeout=30) as compute:
        variant = {
            "name": "AllTraffic",
            "poolId": "h100-mig",
            "instanceCount": 2,
            "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": LAYOUT}],
            "pricePerInstanceHour": "25.25",
        }
        made = compute.endpoints.create(name="chat", tenant_id="platform", variants=[variant])
        assert made.status == "Creating"
        eventually(lambda: compute.endpoints.get("chat").status == "InService", "the endpoint InService")
        shown = compute.endpoints.get("chat")
        assert [i.partitions for i in shown.instances] == [{"mig-2g.20gb": 16, "mig-3g.40gb": 8}] * 2
        floors = {"small": 5, "big": 3, "tiny": 3}
        compute.components.create(
            name="small", endpoint_name="chat", model="m1", partition_type="mig-2g.20gb", copies=6
        )
        compute.components.create(
            name="big", endpoint_name="chat", model="m2", partition_type="mig-3g.40gb", copies=4
        )
        compute.components.create(
            name="tiny", endpoint_name="chat", model="m3", partition_type="mig-2g.20gb", copies=4
        )
        for name in floors:
            got = compute.components.get(name)
            assert got.pending_copies == 0 and all(c.mig_uuid for c in got.copies), got
        updated = compute.endpoints.update("chat", {"AllTraffic": NEW})
        assert updated.status == "Updating"
        fewest = {name: compute.components.get(name).placed_copies for name in floors}

        def done() -> bool:
            for name in floors:
                fewest[name] = min(fewest[name], compute.components.get(name).placed_copies)
            return compute.endpoints.get("chat").status == "InService"

        eventually(done, "the relayout done")
        for name, floor in floors.items():
            assert fewest[name] >= floor, (name, fewest)
            assert compute.components.get(name).pending_copies == 0
        after = compute.endpoints.get("chat")
        assert {i.layout for i in after.instances} == {"mixed:3g.40gb+2g.20gb+2x1g.10gb"}
        assert [i.partitions for i in after.instances] == [
            {"mig-1g.10gb": 16, "mig-2g.20gb": 8, "mig-3g.40gb": 8}
        ] * 2
        updates = compute.events.list(type="endpoint.updated").items
        assert [e.payload["status"] for e in updates][-1] == "InService"
        # Showback: the bill splits the endpoint's cost over the three components' copies.
        bill = compute.bills.get("platform")
        assert {line.component for line in bill.showback} == set(floors)
        assert all(line.endpoint == "chat" and float(line.gpu_hours) > 0 for line in bill.showback)


def instances(compute: Compute, node: str) -> dict[str, list[str]]:
    """The `MIG-…` uuids of each of the node's GPUs: the same uuids, the instances never re-cut."""
    gpus = compute.gpus.list(node=node).items
    return {str(g["id"]): sorted(str(i["uuid"]) for i in g["migInstances"]) for g in gpus}


def test_an_endpoint_on_the_layout_its_nodes_already_have_goes_in_service(tmp_path: Path) -> None:
    """The README's layout section, then its endpoint section, on one server: `h100-mig` goes to
    `mixed:3g.40gb+2x2g.20gb` under a booking, the booking is released, and `endpoints create` asks
    for that same layout. Created while the busy node's change still waits it is `Failed` (exit 1)
    and taken again once the node is free; either way it goes InService, its nodes never re-cut,
    and the fleet page never says "changing to" the layout they have."""
    new = "mixed:3g.40gb+2x2g.20gb"
    one_g = {
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
    with start_server(tmp_path) as server, Compute(server.url, server.admin_token, timeout=30) as compute:
        booked = server.cli_env("api", "reservations.create", "--json", json.dumps(one_g))
        assert booked.returncode == 0, booked.stderr
        reservation = json.loads(booked.stdout)
        busy = reservation["atoms"][0]["node"]
        idle = "euw-h100-a-2" if busy == "euw-h100-a-1" else "euw-h100-a-1"
        update = {"id": "h100-mig", "policy": {"migLayout": new}}
        changed = server.cli_env("api", "pools.update", "--json", json.dumps(update))
        assert changed.returncode == 0, changed.stderr

        def applied(node: str) -> bool:
            return bool(compute.events.list(type="node.mig.applied", subject=node).items)

        eventually(lambda: applied(idle), f"{idle} converged")
        released = server.cli_env("reservations", "release", reservation["id"])
        assert released.returncode == 0, released.stderr
        args = [
            "endpoints",
            "create",
            "chat",
            "--tenant",
            "platform",
            "--pool",
            "h100-mig",
            "--instances",
            "2",
        ]
        args += [a for t in LAYOUT for a in ("--partition-type", t)] + ["--price", "25.25"]
        created = server.cli_env(*args)
        # The reconciler follows the release to the busy node at its next pass (half a second), so
        # its change often goes before the endpoint comes; otherwise the endpoint comes Failed.
        if created.returncode == 0:
            assert "Creating" in created.stdout, created.stdout + created.stderr
        else:
            assert created.returncode == 1, created.stdout + created.stderr
            assert "error: endpoint chat is Failed" in created.stderr and "changing layout" in created.stderr
        # The busy node's change goes, and the retrier, woken by node.mig.applied, hands both nodes
        # to the endpoint: seconds, not a minute after the node's last lease (RECHECK).
        eventually(lambda: compute.endpoints.get("chat").status == "InService", "the endpoint InService", 60)
        cut = instances(compute, idle)
        shown = compute.endpoints.get("chat")
        assert {i.layout for i in shown.instances} == {new}
        assert [i.partitions for i in shown.instances] == [{"mig-2g.20gb": 16, "mig-3g.40gb": 8}] * 2
        assert instances(compute, idle) == cut
        with httpx.Client(base_url=server.url, timeout=10) as http:
            login = http.post("/console/login", data={"token": server.admin_token}, follow_redirects=False)
            assert login.status_code == 303
            page = http.get("/console/fleet").text
        assert "changing to" not in page


def test_replaying_make_runs_history_with_an_endpoint_meets_the_fate_it_met(tmp_path: Path) -> None:
    """On `make run`'s fleet, over loopback: an endpoint created, cut by the nodes' simulated `bcd`
    loops (seconds of real repartitioning), in service, then deleted. `replay.run` over that
    history, with today's fleet and policy, gives the endpoint the outcome it had: held from its
    cut to its deletion on its two nodes of 8 H100s, waiting for nothing."""
    with start_server(tmp_path) as server, Compute(server.url, server.admin_token, timeout=30) as compute:
        since = datetime.now(UTC) - timedelta(seconds=1)
        variant = {
            "name": "AllTraffic",
            "poolId": "h100-mig",
            "instanceCount": 2,
            "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": LAYOUT}],
        }
        assert (
            compute.endpoints.create(name="chat", tenant_id="platform", variants=[variant]).status
            == "Creating"
        )
        eventually(lambda: compute.endpoints.get("chat").status == "InService", "the endpoint InService")
        compute.endpoints.delete("chat")
        until = datetime.now(UTC) + timedelta(seconds=1)
        report = compute.replay.run(since=since, until=until)
        assert (report.source, report.requests) == ("history", 2)  # its two instances
        runs = {r.name: r for r in report.runs}
        (recorded,) = runs["recorded"].outcomes
        (replayed,) = runs["policy"].outcomes
        assert (recorded.key, recorded.tenant, recorded.wait_seconds) == ("endpoint:chat", "platform", 0.0)
        assert recorded.gpu_hours_granted > 0 and recorded.gpu_hours_refused == 0
        assert replayed == recorded
        assert runs["policy"].tenants["platform"] == runs["recorded"].tenants["platform"]
