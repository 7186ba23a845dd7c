"""`endpoints.*` over HTTP through the real app, with `bcd run`'s loop cutting the nodes: the seed's
A100 example (one instance of 8 GPUs split `4g.20gb + 2g.10gb + 1g.5gb` gives 24 partitions, eight
of each type), refusals that name the partition type and the reason (never a fallback to whole
GPUs), and who sees what."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from better_compute.service.gate.mig_gate import Reconciler
from better_compute.storage.store import Store
from tests.builders import bearer, tenant_token
from tests.node_world import NodeWorld

SEED_TYPES = ["mig-4g.20gb", "mig-2g.10gb", "mig-1g.5gb"]


def endpoint(types: list[str], name: str = "summarizer", count: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "variants": [
            {
                "name": "AllTraffic",
                "poolId": "p1",
                "instanceCount": count,
                "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": types}],
                "pricePerInstanceHour": "25.25",
            }
        ],
        **extra,
    }


def test_the_seeds_a100_example_one_instance_of_8_gpus_gives_24_partitions(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path, model="A100-40GB", gpus=8, layout="all-1g.5gb")
    daemon, fake = world.daemon("n-1")
    assert daemon.step(False)
    made = world.http.post("/v1/endpoints", json=endpoint(SEED_TYPES), headers=world.platform)
    assert made.status_code == 201, made.text
    assert made.json()["status"] == "Creating"
    assert made.json()["tenantId"] == "platform"  # the token's tenant
    assert made.json()["instances"][0]["layout"] == "mixed:4g.20gb+2g.10gb+1g.5gb"
    assert daemon.step(True)
    Reconciler(store, world.clock, "r1").tick()
    shown = world.http.get("/v1/endpoints/summarizer", headers=world.platform).json()
    assert shown["status"] == "InService"
    (instance,) = shown["instances"]
    assert instance["gpus"] == 8
    assert instance["partitions"] == {"mig-1g.5gb": 8, "mig-2g.10gb": 8, "mig-4g.20gb": 8}
    assert sum(instance["partitions"].values()) == 24
    assert shown["variants"][0]["pricePerInstanceHour"] == "25.25"
    assert all(
        sorted(gi.profile for gi in g.instances) == ["1g.5gb", "2g.10gb", "4g.20gb"] for g in fake.list_gpus()
    )


def test_a_type_the_gpu_lacks_and_a_layout_over_the_units_are_refused_naming_the_type(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)  # H100-80GB
    world.join("n-1")
    lacks = world.http.post("/v1/endpoints", json=endpoint(SEED_TYPES), headers=world.platform)
    assert lacks.status_code == 400, lacks.text
    error = lacks.json()["error"]
    assert error["code"] == "INVALID_INPUT" and error["details"]["reason"] == "unknown_profile"
    assert error["message"].startswith(
        "variant AllTraffic: partition type mig-4g.20gb is not offered by H100-80GB (it offers mig-1g.10gb,"
    )
    assert error["message"].endswith("there is no fallback to a whole GPU")
    over = world.http.post(
        "/v1/endpoints", json=endpoint(["mig-4g.40gb", "mig-4g.40gb"]), headers=world.platform
    )
    assert over.status_code == 400, over.text
    assert over.json()["error"]["details"]["partitionType"] == "mig-4g.40gb"
    assert "do not fit on one H100-80GB" in over.json()["error"]["message"]
    # The 3g profile takes 3 of 7 compute slices and 4 of 8 memory slices: two fill an H100.
    two = world.http.post(
        "/v1/endpoints", json=endpoint(["mig-3g.40gb", "mig-3g.40gb"], name="two-3g"), headers=world.platform
    )
    assert two.status_code == 201, two.text
    third = world.http.post(
        "/v1/endpoints",
        json=endpoint(["mig-3g.40gb", "mig-3g.40gb", "mig-1g.10gb"], name="three"),
        headers=world.platform,
    )
    assert third.status_code == 400 and third.json()["error"]["details"]["partitionType"] == "mig-1g.10gb"
    nothing = world.http.get("/v1/endpoints", headers=world.admin).json()["items"]
    assert [e["name"] for e in nothing] == ["two-3g"]  # a refusal records nothing


def test_a_tenant_sees_only_its_own_endpoints_and_their_events(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    world.join("n-1")
    made = world.http.post("/v1/endpoints", json=endpoint(["mig-7g.80gb"]), headers=world.platform)
    assert made.status_code == 201, made.text
    acme = bearer(tenant_token(store, "acme"))
    assert world.http.get("/v1/endpoints", headers=acme).json()["items"] == []
    hidden = world.http.get("/v1/endpoints/summarizer", headers=acme)
    assert hidden.status_code == 404 and hidden.json()["error"]["message"] == "endpoint summarizer not found"
    assert world.http.delete("/v1/endpoints/summarizer", headers=acme).status_code == 404
    for_other = world.http.post(
        "/v1/endpoints", json=endpoint(["mig-7g.80gb"], name="x", tenantId="platform"), headers=acme
    )
    assert for_other.status_code == 404  # a tenant token acts for its own tenant only
    mine = world.http.get("/v1/events", params={"type": "endpoint.created"}, headers=world.platform).json()
    assert [(e["subject"], e["payload"]["status"]) for e in mine["items"]] == [("summarizer", "Creating")]
    theirs = world.http.get("/v1/events", params={"type": "endpoint.created"}, headers=acme).json()
    assert theirs["items"] == []
    listed = world.http.get("/v1/endpoints", params={"tenantId": "platform"}, headers=world.admin).json()
    assert [e["name"] for e in listed["items"]] == ["summarizer"]
    gone = world.http.delete("/v1/endpoints/summarizer", headers=world.platform)
    assert gone.status_code == 200 and gone.json()["status"] == "Deleting"
    assert world.http.get("/v1/endpoints/summarizer", headers=world.platform).status_code == 404


def test_endpoint_requests_refuse_unknown_fields_and_sizes_past_their_limits(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    typo = world.http.post(
        "/v1/endpoints", json={**endpoint(["mig-7g.80gb"]), "varients": []}, headers=world.platform
    )
    assert typo.status_code == 400 and typo.json()["error"]["code"] == "INVALID_INPUT"
    many = endpoint(["mig-1g.10gb"] * 8)
    too_many = world.http.post("/v1/endpoints", json=many, headers=world.platform)
    assert too_many.status_code == 400 and too_many.json()["error"]["code"] == "INVALID_INPUT"
    two_entries = endpoint(["mig-7g.80gb"])
    two_entries["variants"][0]["acceleratorPartitionLayouts"] *= 2
    refused = world.http.post("/v1/endpoints", json=two_entries, headers=world.platform)
    assert refused.status_code == 400, refused.text
    long_name = world.http.post(
        "/v1/endpoints", json=endpoint(["mig-7g.80gb"], name="x" * 64), headers=world.platform
    )
    assert long_name.status_code == 400


def test_components_over_http_copies_pending_beyond_free_partitions_and_the_routing_table(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    daemon, fake = world.daemon("n-1")
    assert daemon.step(False)
    made = world.http.post(
        "/v1/endpoints", json=endpoint(["mig-3g.40gb", "mig-3g.40gb"], name="chat"), headers=world.platform
    )
    assert made.status_code == 201, made.text
    assert daemon.step(True)
    Reconciler(store, world.clock, "r1").tick()
    body = {
        "name": "llama",
        "endpointName": "chat",
        "variantName": "AllTraffic",
        "model": "llama-3-8b",
        "partitionType": "mig-3g.40gb",
        "devicesRequired": 1,
        "cpuCores": 2,
        "memoryMiB": 16384,
        "copies": 5,
    }
    created = world.http.post("/v1/components", json=body, headers=world.platform)
    assert created.status_code == 201, created.text
    c = created.json()
    assert (c["copyCount"], c["placedCopies"], c["pendingCopies"]) == (5, 4, 1)  # 2 GPUs x two 3g
    assert c["reason"] == "1 copies wait: no free mig-3g.40gb partition"
    uuids = {ci.uuid for g in fake.list_gpus() for gi in g.instances for ci in gi.compute_instances}
    placed = [x for x in c["copies"] if x["state"] == "placed"]
    assert {x["migUuid"] for x in placed} <= uuids and len({x["migUuid"] for x in placed}) == 4
    assert {x["node"] for x in placed} == {"n-1"} and len({x["gpuId"] for x in placed}) == 2
    shown = world.http.get("/v1/components/llama", headers=world.platform).json()
    assert shown["copies"] == c["copies"]
    undeclared = world.http.post(
        "/v1/components",
        json={**body, "name": "other", "partitionType": "mig-1g.10gb"},
        headers=world.platform,
    )
    assert undeclared.status_code == 400 and "does not declare" in undeclared.json()["error"]["message"]
    fixed = world.http.post(
        "/v1/components/llama/scale",
        json={"copies": 2, "partitionType": "mig-7g.80gb"},
        headers=world.platform,
    )
    assert fixed.status_code == 409 and fixed.json()["error"]["code"] == "INVALID_STATE"
    down = world.http.post("/v1/components/llama/scale", json={"copies": 3}, headers=world.platform)
    assert down.status_code == 200 and (down.json()["placedCopies"], down.json()["pendingCopies"]) == (3, 0)
    listed = world.http.get("/v1/components", params={"endpointName": "chat"}, headers=world.platform).json()
    assert [x["name"] for x in listed["items"]] == ["llama"]
    acme = bearer(tenant_token(store, "acme"))
    assert world.http.get("/v1/components/llama", headers=acme).status_code == 404
    assert world.http.get("/v1/components", headers=acme).json()["items"] == []
    gone = world.http.delete("/v1/components/llama", headers=world.platform)
    assert gone.status_code == 200
    events = world.http.get("/v1/events", params={"type": "component.changed"}, headers=world.platform).json()
    assert [e["payload"]["change"] for e in events["items"]] == ["created", "scaled", "deleted"]
