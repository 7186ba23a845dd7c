"""The friendly commands beside `api` (pools, nodes, tenants, quotas, policies, credentials, whoami,
logout, completion), run through typer's CliRunner against the real app on both stores: the client's
transport hands each request to the app in-process (no sockets)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.client import Compute
from better_compute.domain.kernel.timewin import Window
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.ledger import ledger
from better_compute.storage.store import Store
from tests.builders import T0, admin_token, api_client, fleet_spec, tenant_token


class Live:
    def __init__(self, store: Store) -> None:
        load_fleet(store, fleet_spec(nodes=1, layout="all-1g.10gb"), T0)
        self.http = api_client(store)
        self.admin = admin_token(store)
        self.acme = tenant_token(store, "acme")

    def handle(self, request: httpx.Request) -> httpx.Response:
        answer = self.http.request(
            request.method, str(request.url), headers=dict(request.headers), content=request.content
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


@pytest.fixture
def live(store: Store, monkeypatch: pytest.MonkeyPatch) -> Live:
    world = Live(store)

    def connect(settings: config.Settings) -> Compute:
        transport = httpx.MockTransport(world.handle)
        return Compute(settings.server, settings.token, transport=transport, retries=1, sleep=lambda _: None)

    monkeypatch.setattr(config, "connect", connect)
    return world


def run(runner: CliRunner, token: str, *args: str) -> Any:
    return runner.invoke(app, [*args, "--token", token])


def test_pools_nodes_and_tenants_read_as_tables_and_json(runner: CliRunner, live: Live) -> None:
    pools = run(runner, live.admin, "pools", "list")
    assert pools.exit_code == 0, pools.output
    assert "p1" in pools.stdout and "mig" in pools.stdout
    shown = run(runner, live.admin, "pools", "show", "p1", "--json")
    assert json.loads(shown.stdout)["id"] == "p1"
    nodes = run(runner, live.admin, "nodes", "list", "--json")
    assert nodes.exit_code == 0, nodes.output
    node_ids = [n["id"] for n in json.loads(nodes.stdout)["items"]]
    assert node_ids and all(i in run(runner, live.admin, "nodes", "list").stdout for i in node_ids)
    made = run(runner, live.admin, "tenants", "create", "--id", "globex", "--name", "Globex")
    assert made.exit_code == 0, made.output
    assert "Globex" in run(runner, live.admin, "tenants", "show", "globex").stdout
    missing = run(runner, live.admin, "tenants", "show", "nobody")
    assert missing.exit_code == 1 and "NOT_FOUND: tenant nobody not found" in missing.stderr


def test_pools_update_sets_max_duration_keeping_the_layout(runner: CliRunner, live: Live) -> None:
    result = run(runner, live.admin, "pools", "update", "p1", "--max-duration", "8h", "--json")
    assert result.exit_code == 0, result.output
    policy = json.loads(result.stdout)["policy"]
    assert (policy["maxDuration"], policy["migLayout"]) == ("8h", "all-1g.10gb")


def test_pools_update_sets_the_scrub_between_tenants_and_refuses_one_the_mode_has_not(
    runner: CliRunner, live: Live
) -> None:
    result = run(runner, live.admin, "pools", "update", "p1", "--scrub", "zero", "--json")
    assert result.exit_code == 0, result.output
    policy = json.loads(result.stdout)["policy"]
    assert (policy["scrub"], policy["migLayout"]) == ("zero", "all-1g.10gb")
    refused = run(runner, live.admin, "pools", "update", "p1", "--scrub", "reset")
    assert refused.exit_code == 1 and "does not apply to mig pools" in refused.stderr
    assert run(runner, live.admin, "pools", "update", "p1", "--scrub", "none").exit_code == 0


def test_max_duration_can_be_removed_again(runner: CliRunner, live: Live) -> None:
    """Regression: a null maxDuration in pools.update was dropped, so a limit once set stayed for good."""
    assert run(runner, live.admin, "pools", "update", "p1", "--max-duration", "8h").exit_code == 0
    result = run(runner, live.admin, "pools", "update", "p1", "--no-max-duration", "--json")
    assert result.exit_code == 0, result.output
    policy = json.loads(result.stdout)["policy"]
    assert (policy["maxDuration"], policy["migLayout"]) == (None, "all-1g.10gb")
    both = run(runner, live.admin, "pools", "update", "p1", "--max-duration", "8h", "--no-max-duration")
    assert both.exit_code == 2 and "not both" in both.output
    kept = run(runner, live.admin, "pools", "update", "p1", "--mig-layout", "all-1g.10gb", "--json")
    assert json.loads(kept.stdout)["policy"]["maxDuration"] is None


def test_quotas_policies_and_credentials(runner: CliRunner, live: Live) -> None:
    quota = run(
        runner,
        live.admin,
        "quotas",
        "set",
        "--tenant",
        "acme",
        "--pool",
        "p1",
        "--class",
        "gpu.mig",
        "--limit",
        "3",
    )
    assert quota.exit_code == 0, quota.output
    listed = run(runner, live.admin, "quotas", "list", "--tenant", "acme", "--json")
    assert {"tenantId": "acme", "poolId": "p1", "class": "gpu.mig", "limit": 3}.items() <= json.loads(
        listed.stdout
    )["items"][0].items()
    policy = run(
        runner,
        live.admin,
        "policies",
        "create",
        "--name",
        "small",
        "--tenant",
        "acme",
        "--gpu-count",
        "2",
        "--json",
    )
    assert policy.exit_code == 0, policy.output
    policy_id = json.loads(policy.stdout)["id"]
    assert "small" in run(runner, live.admin, "policies", "show", policy_id).stdout
    assert policy_id in run(runner, live.admin, "policies", "list").stdout
    deleted = run(runner, live.admin, "policies", "delete", policy_id)
    assert deleted.exit_code == 0, deleted.output
    assert run(runner, live.admin, "policies", "list").stdout.strip() == "no policies"
    cred = run(runner, live.admin, "credentials", "create", "--tenant", "acme", "--name", "ci", "--json")
    assert cred.exit_code == 0, cred.output
    made = json.loads(cred.stdout)
    assert made["token"].startswith("bc_")
    assert "ci" in run(runner, live.admin, "credentials", "show", made["id"]).stdout
    revoked = run(runner, live.admin, "credentials", "revoke", made["id"], "--json")
    assert json.loads(revoked.stdout)["revokedAt"] is not None
    denied = run(runner, made["token"], "whoami")
    assert denied.exit_code == 1 and "UNAUTHENTICATED" in denied.stderr


def test_policies_with_placement_constraints(runner: CliRunner, live: Live) -> None:
    made = run(
        runner,
        live.admin,
        "policies",
        "create",
        "--name",
        "us-only",
        "--tenant",
        "acme",
        "--subject-type",
        "endpoint",
        "--subject",
        "ep-1",
        "--allowed-region",
        "us-east",
        "--allowed-region",
        "us-west",
        "--denied-cluster",
        "c9",
        "--json",
    )
    assert made.exit_code == 0, made.output
    policy = json.loads(made.stdout)
    assert (policy["subjectType"], policy["allowedRegions"]) == ("endpoint", ["us-east", "us-west"])
    found = run(
        runner, live.admin, "policies", "list", "--subject-type", "endpoint", "--subject", "ep-1", "--json"
    )
    assert [p["id"] for p in json.loads(found.stdout)["items"]] == [policy["id"]]
    changed = run(
        runner,
        live.admin,
        "policies",
        "update",
        policy["id"],
        "--allowed-cluster",
        "c1",
        "--clear",
        "denied-clusters",
        "--generation",
        "1",
        "--json",
    )
    assert changed.exit_code == 0, changed.output
    after = json.loads(changed.stdout)
    assert (after["allowedClusters"], after["deniedClusters"], after["generation"]) == (["c1"], [], 2)
    assert after["allowedRegions"] == ["us-east", "us-west"]
    stale = run(
        runner, live.admin, "policies", "update", policy["id"], "--allowed-cluster", "c2", "--generation", "1"
    )
    assert stale.exit_code == 1 and "CONFLICT" in stale.stderr
    shown = run(runner, live.admin, "policies", "show", policy["id"], "--json")
    assert json.loads(shown.stdout)["generation"] == 2
    bad = run(runner, live.admin, "policies", "list", "--subject-type", "pod")
    assert bad.exit_code == 2


def test_an_empty_list_says_so(runner: CliRunner, live: Live) -> None:
    result = run(runner, live.acme, "policies", "list")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "no policies"


def test_whoami_names_the_tenant_or_the_fleet_admin(runner: CliRunner, live: Live) -> None:
    tenant = run(runner, live.acme, "whoami")
    assert tenant.exit_code == 0, tenant.output
    assert tenant.stdout.startswith("tenant acme (credential ")
    admin = run(runner, live.admin, "whoami", "--json")
    assert json.loads(admin.stdout)["isAdmin"] is True and json.loads(admin.stdout)["tenantId"] is None


def test_logout_forgets_the_stored_token_and_keeps_the_server(
    runner: CliRunner, isolated_config: Path
) -> None:
    config.write_config(isolated_config, "http://bc.test:8000", "sekret")
    result = runner.invoke(app, ["logout"])
    assert result.exit_code == 0, result.output
    assert json.loads(isolated_config.read_text()) == {"server": "http://bc.test:8000"}
    again = runner.invoke(app, ["logout"])
    assert again.exit_code == 0 and "no stored token" in again.stdout


def test_shell_completion_is_offered(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--help"])
    assert "--install-completion" in result.stdout and "--show-completion" in result.stdout


def test_pools_delete_refuses_a_pool_with_nodes(runner: CliRunner, live: Live) -> None:
    result = run(runner, live.admin, "pools", "delete", "p1")
    assert result.exit_code == 1
    assert "INVALID_STATE: pool p1 still has" in result.stderr


def test_pools_create_then_list_every_noun(runner: CliRunner, live: Live) -> None:
    made = run(
        runner,
        live.admin,
        "pools",
        "create",
        "--name",
        "spare",
        "--cluster",
        "c1",
        "--mode",
        "exclusive",
        "--owner",
        "acme",
        "--max-duration",
        "2h",
    )
    assert made.exit_code == 0, made.output
    assert "spare" in made.stdout and "maxDuration=2h" in made.stdout
    assert "spare" in run(runner, live.admin, "pools", "list", "--limit", "1", "--cursor", "p1").stdout
    assert "more: --cursor" in run(runner, live.admin, "pools", "list", "--limit", "1").stdout
    assert "acme" in run(runner, live.admin, "tenants", "list").stdout
    assert "c1" in run(runner, live.admin, "nodes", "list", "--cluster", "c1").stdout
    assert run(runner, live.admin, "credentials", "list", "--json").exit_code == 0
    assert run(runner, live.admin, "quotas", "list").exit_code == 0


def test_logout_with_a_malformed_config_says_so(runner: CliRunner, isolated_config: Path) -> None:
    isolated_config.parent.mkdir(parents=True)
    isolated_config.write_text("{not json")
    result = runner.invoke(app, ["logout"])
    assert result.exit_code == 1 and "is not valid JSON" in result.stderr


def test_pools_preview_layout_shows_each_node_and_the_capacity_before_and_after(
    runner: CliRunner, live: Live, store: Store
) -> None:
    shown = run(runner, live.admin, "pools", "preview-layout", "p1", "mixed:3g.40gb+2x2g.20gb")
    assert shown.exit_code == 0, shown.output
    lines = [line.split() for line in shown.stdout.splitlines()]
    assert ["pool", "p1:", "all-1g.10gb", "->", "mixed:3g.40gb+2x2g.20gb"] in lines
    assert ["n", "now", "-", "-14/+6"] in lines
    assert (
        ["3g.40gb", "0", "2"] in lines and ["2g.20gb", "0", "4"] in lines and ["1g.10gb", "14", "0"] in lines
    )
    answer = json.loads(
        run(runner, live.admin, "pools", "preview-layout", "p1", "all-3g.40gb", "--json").stdout
    )
    assert answer["to"] == "all-3g.40gb"
    assert answer["capacity"]["after"] == {"3g.40gb": 4, "1g.10gb": 0}
    refused = run(runner, live.admin, "pools", "preview-layout", "p1", "mixed:3x3g.40gb")
    assert refused.exit_code != 0 and "3g.40gb" in refused.output


def test_pools_preview_layout_names_the_bookings_that_hold_a_node_back(
    runner: CliRunner, live: Live, store: Store
) -> None:
    with store.read() as tx:
        mig = sorted(a.id for a in tx.atoms.of_pool("p1") if a.cls == "gpu.mig")
    ledger.book(store, [mig[0]], Window(T0, T0 + timedelta(hours=3)), "rsv-a", "acme", T0)
    shown = run(runner, live.acme, "pools", "preview-layout", "p1", "all-disabled")
    assert shown.exit_code != 0 and "not found" in shown.output  # acme does not own p1
    platform = tenant_token(store, "platform")
    shown = run(runner, platform, "pools", "preview-layout", "p1", "all-disabled")
    assert shown.exit_code == 0, shown.output
    assert "2026-12-01 12:00:00Z" in shown.stdout and "rsv-a (acme, 2026-12-01 12:00:00Z)" in shown.stdout
    ledger.book(store, [mig[1]], Window(T0), "rsv-b", "acme", T0)
    shown = run(runner, platform, "pools", "preview-layout", "p1", "all-disabled")
    assert "never (open-ended booking)" in shown.stdout and "rsv-b (acme, never ends)" in shown.stdout


def test_clusters_list_show_and_update_the_phase(runner: CliRunner, live: Live) -> None:
    listed = run(runner, live.acme, "clusters", "list")
    assert listed.exit_code == 0, listed.output
    assert "c1" in listed.stdout and "active" in listed.stdout
    changed = run(runner, live.admin, "clusters", "update", "c1", "--phase", "draining", "--json")
    assert changed.exit_code == 0, changed.output
    assert json.loads(changed.stdout)["phase"] == "draining"
    shown = run(runner, live.acme, "clusters", "show", "c1")
    assert shown.exit_code == 0 and "draining" in shown.stdout
    bad = run(runner, live.admin, "clusters", "update", "c1", "--phase", "paused")
    assert bad.exit_code == 1
    assert "INVALID_INPUT: phase must be one of active, cordoned, draining, not 'paused'" in bad.stderr
    refused = run(runner, live.acme, "clusters", "update", "c1", "--phase", "active")
    assert refused.exit_code == 1 and "FORBIDDEN" in refused.stderr
    missing = run(runner, live.acme, "clusters", "show", "c9")
    assert missing.exit_code == 1 and "NOT_FOUND: cluster c9 not found" in missing.stderr


def test_clusters_create_makes_a_slurm_cluster_with_its_settings(runner: CliRunner, live: Live) -> None:
    made = run(
        runner,
        live.admin,
        "clusters",
        "create",
        "s1",
        "--region",
        "r1",
        "--kind",
        "slurm",
        "--slurm-controller",
        "slurmctld.example:6817",
        "--slurm-partition",
        "gpu",
        "--slurm-partition",
        "gpu-long",
        "--slurm-account",
        "bc-holds",
        "--slurm-map",
        "ml=acme",
        "--json",
    )
    assert made.exit_code == 0, made.output
    body = json.loads(made.stdout)
    assert (body["kind"], body["slurm"]) == (
        "slurm",
        {
            "controller": "slurmctld.example:6817",
            "partitions": ["gpu", "gpu-long"],
            "account": "bc-holds",
            "access": "commands",
            "accounts": {"ml": "acme"},
        },
    )
    rest = run(
        runner,
        live.admin,
        *("clusters", "create", "s2", "--region", "r1", "--kind", "slurm", "--slurm-controller", "c"),
        *("--slurm-partition", "gpu", "--slurm-account", "bc", "--slurm-access", "rest"),
    )
    assert rest.exit_code == 1 and "slurm.access rest (slurmrestd) is not supported yet" in rest.stderr
    local = run(runner, live.admin, "clusters", "create", "l2", "--region", "r2")
    assert local.exit_code == 0 and "local" in local.stdout


def test_nodes_release_gpu(runner: CliRunner, live: Live) -> None:
    def gpus() -> dict[str, bool]:
        listed = live.http.get("/v1/gpus", headers={"Authorization": f"Bearer {live.admin}"}).json()
        return {g["id"]: g["present"] for g in listed["items"]}

    gpu = min(gpus())
    refused = run(runner, live.acme, "nodes", "release-gpu", gpu)
    assert (
        refused.exit_code == 1 and "FORBIDDEN: nodes.releaseGpu needs a fleet-admin token" in refused.stderr
    )
    released = run(runner, live.admin, "nodes", "release-gpu", gpu, "--json")
    assert released.exit_code == 0, released.output
    assert (json.loads(released.stdout)["uuid"], json.loads(released.stdout)["present"]) == (gpu, False)
    assert gpus()[gpu] is False
    missing = run(runner, live.admin, "nodes", "release-gpu", "GPU-nowhere")
    assert missing.exit_code == 1 and "NOT_FOUND: no node has reported a GPU GPU-nowhere" in missing.stderr


def test_nodes_cordon_and_uncordon(runner: CliRunner, live: Live) -> None:
    node = json.loads(run(runner, live.admin, "nodes", "list", "--json").stdout)["items"][0]["id"]
    cordoned = run(runner, live.admin, "nodes", "cordon", node, "--json")
    assert cordoned.exit_code == 0, cordoned.output
    assert json.loads(cordoned.stdout)["cordoned"] is True
    listed = json.loads(run(runner, live.admin, "nodes", "list", "--json").stdout)["items"]
    assert {n["id"]: n["cordoned"] for n in listed}[node] is True
    lifted = run(runner, live.admin, "nodes", "uncordon", node)
    assert lifted.exit_code == 0, lifted.output
    assert any(line.split() == ["Cordoned", "no"] for line in lifted.stdout.splitlines())
    refused = run(runner, live.acme, "nodes", "cordon", node)
    assert refused.exit_code == 1 and "FORBIDDEN: nodes.update needs a fleet-admin token" in refused.stderr
    missing = run(runner, live.admin, "nodes", "cordon", "nowhere")
    assert missing.exit_code == 1 and "NOT_FOUND: node nowhere not found" in missing.stderr
