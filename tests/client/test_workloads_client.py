"""The typed client's workloads, deployments, placement and operations methods: what each sends."""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.client import Compute, InvalidInputError
from tests.client.fakes import FakeServer

T = "2030-01-01T10:00:00Z"


def workload_json(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "wkl-1",
        "name": "train",
        "tenantId": "acme",
        "shape": {"deviceClass": "h100-80gb-sxm", "deviceCount": 8},
        "replicas": 2,
        "strategy": "pack",
        "clusterFloors": {},
        "maxClusters": None,
        "priorityClass": "standard",
        "cluster": None,
        "requiresSingleTopologyDomain": False,
        "topologyDomainKind": None,
        "allowedRegions": [],
        "allowedClusters": [],
        "drainedClusters": [],
        "policyId": None,
        "placedReplicas": 2,
        "unplacedReplicas": 0,
        "reason": None,
        "generation": 1,
        "createdAt": T,
        "deployments": [],
    }
    body.update(overrides)
    return body


def verdict_json(cluster: str, share: int) -> dict[str, Any]:
    return {
        "clusterId": cluster,
        "admitted": True,
        "reason": None,
        "message": "",
        "freeDevices": 16,
        "quotaLeft": None,
        "largestDomain": 8,
        "room": 2,
        "share": share,
        "shortfall": 0,
    }


OPERATION = {
    "id": "op-1",
    "type": "workload.drain",
    "status": "succeeded",
    "workloadId": "wkl-1",
    "payload": {"cluster": "iad-1"},
    "result": {"removedReplicas": 2},
    "createdAt": T,
    "finishedAt": T,
}


def compute_for(server: FakeServer) -> Compute:
    return Compute("http://bc.test", "tok", transport=server.transport(), retries=1, sleep=lambda _: None)


def test_workloads_create_sends_the_shape_and_placement_fields_in_camel_case() -> None:
    answer = workload_json(verdicts=[verdict_json("iad-1", 2)])
    server = FakeServer({("POST", "/v1/workloads"): (201, answer)})
    got = compute_for(server).workloads.create(
        name="train",
        tenant_id="acme",
        device_class="h100-80gb-sxm",
        device_count=8,
        replicas=2,
        strategy="spread",
        cluster_floors={"sjc-1": 1},
        max_clusters=2,
        allowed_regions=["us-east"],
        requires_single_topology_domain=True,
        topology_domain_kind="nvlink",
    )
    assert got.verdicts is not None and got.verdicts[0].share == 2
    assert server.bodies() == [
        {
            "name": "train",
            "tenantId": "acme",
            "allowedRegions": ["us-east"],
            "shape": {"deviceClass": "h100-80gb-sxm", "deviceCount": 8},
            "replicas": 2,
            "strategy": "spread",
            "clusterFloors": {"sjc-1": 1},
            "maxClusters": 2,
            "requiresSingleTopologyDomain": True,
            "topologyDomainKind": "nvlink",
        }
    ]


def test_reads_scale_delete_and_drain_go_to_their_paths() -> None:
    page = {"items": [workload_json()], "nextCursor": None}
    deployments = {"items": [], "nextCursor": None}
    server = FakeServer(
        {
            ("GET", "/v1/workloads"): page,
            ("GET", "/v1/workloads/wkl-1"): workload_json(),
            ("POST", "/v1/workloads/wkl-1/scale"): workload_json(replicas=5),
            ("DELETE", "/v1/workloads/wkl-1"): workload_json(),
            ("GET", "/v1/deployments"): deployments,
            ("POST", "/v1/operations"): (201, OPERATION),
            ("GET", "/v1/operations/op-1"): OPERATION,
        }
    )
    compute = compute_for(server)
    assert compute.workloads.list(tenant_id="acme", limit=5).items[0].id == "wkl-1"
    assert compute.workloads.get("wkl-1").shape.device_count == 8
    assert compute.workloads.scale("wkl-1", 5, generation=1).replicas == 5
    assert compute.workloads.delete("wkl-1").id == "wkl-1"
    assert compute.deployments.list(workload_id="wkl-1").items == []
    assert compute.workloads.drain("wkl-1", cluster="iad-1").result == {"removedReplicas": 2}
    assert compute.operations.get("op-1").status == "succeeded"
    sent = [(r.method, r.url.path, r.url.query.decode()) for r in server.requests]
    assert sent == [
        ("GET", "/v1/workloads", "tenantId=acme&limit=5"),
        ("GET", "/v1/workloads/wkl-1", ""),
        ("POST", "/v1/workloads/wkl-1/scale", ""),
        ("DELETE", "/v1/workloads/wkl-1", ""),
        ("GET", "/v1/deployments", "workloadId=wkl-1"),
        ("POST", "/v1/operations", ""),
        ("GET", "/v1/operations/op-1", ""),
    ]
    bodies = server.bodies()
    assert bodies[2] == {"id": "wkl-1", "replicas": 5, "generation": 1}
    assert bodies[5] == {"type": "workload.drain", "workloadId": "wkl-1", "payload": {"cluster": "iad-1"}}


def test_placement_preview_takes_a_workload_or_a_shape() -> None:
    answer = {
        "clusters": ["iad-1"],
        "shares": {"iad-1": 2},
        "verdicts": [verdict_json("iad-1", 2)],
        "unplacedReplicas": 0,
        "reason": None,
    }
    server = FakeServer({("POST", "/v1/placement/preview"): answer})
    compute = compute_for(server)
    assert compute.placement.preview(workload_id="wkl-1").shares == {"iad-1": 2}
    shaped = compute.placement.preview(
        tenant_id="acme", device_class="h100-80gb-sxm", device_count=8, replicas=2
    )
    assert shaped.verdicts[0].largest_domain == 8
    assert server.bodies() == [
        {"workloadId": "wkl-1"},
        {"tenantId": "acme", "shape": {"deviceClass": "h100-80gb-sxm", "deviceCount": 8}, "replicas": 2},
    ]


def test_a_preview_writes_nothing_so_it_is_retried() -> None:
    server = FakeServer(
        {
            ("POST", "/v1/placement/preview"): {
                "clusters": [],
                "shares": {},
                "verdicts": [],
                "unplacedReplicas": 0,
                "reason": None,
            }
        }
    )
    server.fail_first = 1
    assert compute_for(server).placement.preview(workload_id="wkl-1").clusters == []
    assert len(server.requests) == 2


def test_bad_arguments_are_the_clients_invalid_input() -> None:
    server = FakeServer()
    with pytest.raises(InvalidInputError, match="strategy"):
        compute_for(server).workloads.create(
            name="w",
            device_class="c",
            replicas=1,
            strategy="fill",  # type: ignore[arg-type]
        )
    assert server.requests == []
