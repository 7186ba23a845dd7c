"""Inference endpoints on `make run`'s fleet, over loopback: an endpoint on two of `h100-mig`'s nodes
goes `InService` once their simulated `bcd` loops have cut them, three components place their
copies, and a live relayout completes while every component keeps at least its `minCopies`."""

from __future__ import annotations

from pathlib import Path

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
