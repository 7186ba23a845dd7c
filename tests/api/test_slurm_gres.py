"""`nodes.slurmGres` through the real app on both stores: the GRES Slurm is told of a stored node."""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from tests.builders import T0, admin_token, api_client, fleet_spec, tenant_token


@pytest.fixture
def app(store: Store) -> Any:
    load_fleet(store, fleet_spec(nodes=1, layout="all-1g.10gb"), T0)
    return api_client(store), admin_token(store), tenant_token(store, "acme")


def _get(http: Any, token: str, node: str) -> Any:
    return http.get(f"/v1/nodes/{node}/slurm-gres", headers={"Authorization": f"Bearer {token}"})


def test_admin_reads_a_mig_nodes_gres(app: Any) -> None:
    http, admin, _ = app
    answer = _get(http, admin, "n")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == {"gresConf", "nodeLine"}
    assert body["nodeLine"] == "NodeName=n Gres=gpu:1g.10gb:14"
    lines = body["gresConf"].splitlines()
    assert lines[1] == "NodeName=n AutoDetect=off"
    instances = lines[2:]
    assert len(instances) == 14
    assert all(
        line.startswith("NodeName=n Name=gpu Type=1g.10gb MultipleFiles=/dev/nvidia") for line in instances
    )
    assert sum("MultipleFiles=/dev/nvidia1," in line for line in instances) == 7
    # each instance has its own two capability files, never another's
    caps = [f for line in instances for f in line.split("=")[-1].split(",")[1:]]
    assert len(caps) == len(set(caps)) == 28


def test_a_tenant_is_forbidden_and_an_unknown_node_not_found(app: Any) -> None:
    http, admin, acme = app
    forbidden = _get(http, acme, "n")
    assert forbidden.status_code == 403 and forbidden.json()["error"]["code"] == "FORBIDDEN"
    missing = _get(http, admin, "nobody")
    assert missing.status_code == 404, missing.text
    assert missing.json()["error"] == {
        "code": "NOT_FOUND",
        "message": "node nobody not found",
        "details": {"node": "nobody"},
    }
