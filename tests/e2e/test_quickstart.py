"""The README's quickstart, step by step, against a real server loaded with examples/demo-fleet.yaml."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Server, run_cli

pytestmark = pytest.mark.e2e

DEMO_POOLS = {"h100-mig", "h100-timeslice", "l40s-timeslice", "a100-exclusive"}

# The notebook reservation of the README's quickstart: one 3g.40gb for four hours.
NOTEBOOK = (
    "reserve",
    "--pool",
    "h100-mig",
    "--profile",
    "3g.40gb",
    "--duration",
    "4h",
    "--idempotency-key",
    "notebook-ana-0924",
)


def test_health_and_pools_over_http(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as http:
        health = http.get("/healthz")
        assert health.status_code == 200
        assert health.json()["status"] == "ok"
        assert health.json()["database"] == "sqlite"

        assert http.get("/v1/pools").status_code == 401
        pools = http.get("/v1/pools", headers={"Authorization": f"Bearer {server.admin_token}"})
    assert pools.status_code == 200, pools.text
    assert {p["id"] for p in pools.json()["items"]} == DEMO_POOLS


def test_cli_lists_pools_with_server_and_token_options(server: Server) -> None:
    result = server.cli("api", "pools.list")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert {p["id"] for p in answer["items"]} == DEMO_POOLS
    assert answer["nextCursor"] is None


def test_tenant_token_offer_and_notebook_reservation_through_the_cli(server: Server) -> None:
    # As in the README: BC_SERVER/BC_TOKEN in the environment, the admin's token first.
    created = server.cli_env("api", "tenants.create", "--json", '{"id":"globex","name":"Globex"}')
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["id"] == "globex"

    credential = server.cli_env(
        "api", "credentials.create", "--json", '{"tenantId":"globex","name":"notebooks"}'
    )
    assert credential.returncode == 0, credential.stderr
    tenant_token = json.loads(credential.stdout)["token"]

    # Before the offer the tenant cannot see the pool: the answer is a missing pool's.
    refused = server.cli_env(*NOTEBOOK, token=tenant_token)
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr.startswith("error: NOT_FOUND: ")

    offer = server.cli_env(
        "api",
        "pools.offer",
        "--json",
        '{"poolId":"h100-mig","tenantId":"globex","quota":{"gpu.mig":2}}',
    )
    assert offer.returncode == 0, offer.stderr

    def three_g() -> tuple[int, int]:
        free = server.cli_env("capacity", "free", "--pool", "h100-mig", "--json", token=tenant_token)
        assert free.returncode == 0, free.stderr
        kinds = {k["migProfile"]: (k["atoms"], k["free"]) for k in json.loads(free.stdout)["kinds"]}
        return kinds["3g.40gb"]

    before = three_g()
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert 'reserve --token "$TENANT_TOKEN" --pool h100-mig --profile 3g.40gb --duration 4h' in readme
    booked = server.cli_env(*NOTEBOOK, "--json", token=tenant_token)
    assert booked.returncode == 0, booked.stderr
    reservation = json.loads(booked.stdout)
    assert reservation["tenantId"] == "globex"
    assert reservation["status"] == "active"
    assert [a["attributes"]["migProfile"] for a in reservation["atoms"]] == ["3g.40gb"]

    # What is left to book, as the README's everyday commands show it: one 3g.40gb fewer.
    assert three_g() == (before[0], before[1] - 1)
    atoms = server.cli_env(
        "atoms", "list", "--pool", "h100-mig", "--attr", "migProfile=3g.40gb", token=tenant_token
    )
    assert atoms.returncode == 0, atoms.stderr
    held = reservation["atoms"][0]["id"]
    assert "yes" in next(line for line in atoms.stdout.splitlines() if held in line).split()


def test_catalog_commands_need_no_server(server: Server) -> None:
    valid = run_cli(["layouts", "validate", "--gpu", "H100-80GB", "mixed:3g.40gb+2x2g.20gb"], server.home)
    assert valid.returncode == 0, valid.stderr
    assert "is valid on H100-80GB" in valid.stdout

    advice = run_cli(
        ["advise", "--model", "Llama-3.1-8B", "--dtype", "fp16", "--context", "8000", "--concurrency", "1"],
        server.home,
    )
    assert advice.returncode == 0, advice.stderr
    assert "Llama-3.1-8B" in advice.stdout
    # The best (smallest) fits first; the rest, the H100's 3g.40gb among them, with --all.
    assert "3g.20gb" in advice.stdout and "more: --all" in advice.stdout
    every = run_cli(
        ["advise", "--model", "Llama-3.1-8B", "--dtype", "fp16", "--context", "8000", "--all"], server.home
    )
    assert every.returncode == 0, every.stderr
    assert "3g.40gb" in every.stdout
