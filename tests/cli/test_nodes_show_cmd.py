"""`better-compute nodes show NODE` against the real app on both stores: a node with a MIG GPU one
of whose instances a tenant holds, a GPU held whole for maintenance, and a layout the node refused,
shown at 80 columns and piped, and as JSON; an unknown node is refused with the known ones named."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from typer.testing import CliRunner

from better_compute.cli.app import app
from better_compute.domain.fleet.records import LayoutRefusal
from better_compute.storage.store import Store
from tests.builders import at
from tests.cli.test_resources_cmd import Live, live, run

__all__ = ["live"]

REFUSAL = "GPU instance 3 (1g.10gb) is in use by process 4242"


def _admin(live: Live) -> dict[str, str]:
    return {"Authorization": f"Bearer {live.admin}"}


def held_node(live: Live, store: Store) -> dict[str, Any]:
    """Node `n`: a tenant's reservation on one MIG instance of one GPU, the other GPU held whole by
    a partition booking, and a repartition the node reported refused on the first GPU."""
    quota = live.http.put(
        "/v1/quotas",
        headers=_admin(live),
        json={"tenantId": "platform", "poolId": "p1", "class": "gpu.mig", "limit": 2},
    )
    assert quota.status_code == 200, quota.text
    made = live.http.post(
        "/v1/reservations",
        headers={**_admin(live), "Idempotency-Key": "show-1"},
        json={
            "tenantId": "platform",
            "poolId": "p1",
            "duration": "4h",
            "devices": [{"class": "gpu.mig", "count": 1}],
        },
    )
    assert made.status_code in (200, 201), made.text
    reservation = made.json()
    gpus = sorted(g["id"] for g in live.http.get("/v1/gpus", headers=_admin(live)).json()["items"])
    atoms = {a["id"]: a for a in live.http.get("/v1/atoms", headers=_admin(live)).json()["items"]}
    instance = reservation["atoms"][0]["id"]
    mig_gpu = atoms[instance]["gpuId"]
    whole_gpu = next(g for g in gpus if g != mig_gpu)
    booked = run(CliRunner(), live.admin, "partitions", "book", whole_gpu, "--duration", "2h", "--json")
    assert booked.exit_code == 0, booked.output
    with store.begin() as tx:
        tx.nodes.set_layout_refused("n", [LayoutRefusal(mig_gpu, "repartition", REFUSAL, at(-1))])
    return {
        "reservation": reservation["id"],
        "instance": instance,
        "migGpu": mig_gpu,
        "wholeGpu": whole_gpu,
        "partition": json.loads(booked.stdout)["bookingId"],
    }


@pytest.mark.parametrize("env", [{"COLUMNS": "80"}, {}], ids=["80-columns", "piped"])
def test_nodes_show_a_node_with_a_held_instance_a_held_gpu_and_a_refused_layout(
    runner: CliRunner, live: Live, store: Store, env: dict[str, str]
) -> None:
    held = held_node(live, store)
    result = runner.invoke(app, ["nodes", "show", "n", "--token", live.admin], env=env)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    text = result.stdout
    flat = " ".join(text.split())
    # labels in English, not wire keys
    assert re.search(r"^node +n$", text, re.MULTILINE) and re.search(r"^pool +p1$", text, re.MULTILINE)
    assert "lastContactAt" not in text and "rebootRequired" not in text
    assert re.search(r"^generation +observed 0 of spec \d+", text, re.MULTILINE)
    assert re.search(r"^reboot required +no$", text, re.MULTILINE)
    assert re.search(r"^layout gate +no layout change under way$", text, re.MULTILINE)
    # the refusal, on the node and on its GPU, whole words
    assert f"{held['migGpu']}: repartition refused since 2026-12-01 08:00:00Z:" in flat
    assert flat.count(REFUSAL) == 2  # on the node, and on its GPU
    # the held MIG instance: its id, profile and MIG uuid, and its holder to the second
    assert f"{held['instance']} MIG 1g.10gb MIG-" in flat
    assert ": booked now, free 2026-12-01 13:00:00Z held by platform, reservation" in flat
    assert (
        f"held by platform, reservation {held['reservation']}, from 2026-12-01 09:00:00Z until"
        " 2026-12-01 13:00:00Z" in flat
    )
    # the whole GPU held for maintenance: its partition booking, no tenant's, said once
    assert re.search(r"^  held whole +held by no tenant, partition$", text, re.MULTILINE)
    assert flat.count(held["partition"]) == 1
    assert "from 2026-12-01 09:00:00Z until 2026-12-01 11:00:00Z" in flat
    gpu_lines = [line for line in lines if line.startswith("GPU ")]
    assert [line.split()[2] for line in gpu_lines] == sorted(
        [held["migGpu"], held["wholeGpu"]], key=text.index
    )
    assert re.search(r"^  MIG mode +enabled$", text, re.MULTILINE)
    # the refused GPU's layout waits; the other one's runs
    assert [m.group(1) for m in re.finditer(r"^  layout +all-1g.10gb \((\w+)\)$", text, re.MULTILINE)] == [
        "pending" if held["migGpu"] == gpu_lines[0].split()[2] else "applied",
        "applied" if held["migGpu"] == gpu_lines[0].split()[2] else "pending",
    ]
    # ids and timestamps whole: each id on one line, never cut
    for token in (held["reservation"], held["partition"], held["instance"], held["migGpu"]):
        assert any(token in line for line in lines), token
    for stamp in re.findall(r"\d{4}-\d\d-\d\d\s+\S+", text):
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ[:,]?", stamp), stamp


def test_nodes_show_json_has_the_same_facts(runner: CliRunner, live: Live, store: Store) -> None:
    held = held_node(live, store)
    result = run(runner, live.admin, "nodes", "show", "n", "--json")
    assert result.exit_code == 0, result.output
    detail = json.loads(result.stdout)
    assert detail["node"]["id"] == "n" and detail["node"]["layoutRefused"][0]["reason"] == REFUSAL
    assert detail["gate"] is None and detail["at"] == "2026-12-01T09:00:00Z"
    by_gpu = {g["uuid"]: g for g in detail["gpus"]}
    assert by_gpu[held["migGpu"]]["layoutRefused"]["action"] == "repartition"
    assert by_gpu[held["migGpu"]]["toldLayout"] == "all-1g.10gb"
    atoms = {a["id"]: a for a in detail["atoms"]}
    assert atoms[held["instance"]]["holders"] == [
        {
            "allocationId": held["reservation"],
            "kind": "reservation",
            "tenantId": "platform",
            "startsAt": "2026-12-01T09:00:00Z",
            "endsAt": "2026-12-01T13:00:00Z",
        }
    ]
    whole = [a for a in detail["atoms"] if a["gpuId"] == held["wholeGpu"]]
    assert whole and all([h["kind"] for h in a["holders"]] == ["partition"] and a["bookedNow"] for a in whole)


def test_nodes_show_refuses_an_unknown_node_naming_known_ones(runner: CliRunner, live: Live) -> None:
    result = run(runner, live.admin, "nodes", "show", "nowhere")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: no node nowhere; known nodes: n"
    as_json = run(runner, live.admin, "nodes", "show", "nowhere", "--json")
    assert as_json.exit_code == 1
    error = json.loads(as_json.stderr)["error"]
    assert error["code"] == "NOT_FOUND" and error["details"]["knownNodes"] == ["n"]


def test_nodes_show_is_the_admins(runner: CliRunner, live: Live) -> None:
    result = run(runner, live.acme, "nodes", "show", "n")
    assert result.exit_code == 1 and "FORBIDDEN: nodes.get needs a fleet-admin token" in result.stderr
