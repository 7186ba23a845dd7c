"""`workloads` and `placement preview` through typer's CliRunner against the real app on both stores
(the client's transport hands each request to the app in-process), on three clusters of H100s."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.client import Compute
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from tests.api.test_workloads import fleet
from tests.builders import T0, admin_token, api_client, tenant_token


class Fleet:
    def __init__(self, store: Store) -> None:
        load_fleet(store, parse_fleet(fleet()), T0)
        self.http = api_client(store)
        self.admin = admin_token(store)
        self.acme = tenant_token(store, "acme")

    def handle(self, request: httpx.Request) -> httpx.Response:
        answer = self.http.request(
            request.method, str(request.url), headers=dict(request.headers), content=request.content
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


@pytest.fixture
def world(store: Store, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    live = Fleet(store)

    def connect(settings: config.Settings) -> Compute:
        transport = httpx.MockTransport(live.handle)
        return Compute(settings.server, settings.token, transport=transport, retries=1, sleep=lambda _: None)

    monkeypatch.setattr(config, "connect", connect)
    return live


def run(runner: CliRunner, token: str, *args: str) -> Any:
    return runner.invoke(app, [*args, "--token", token], env={"COLUMNS": "250"})


SHAPE = ("--device-class", "h100-80gb-sxm", "--device-count", "8")


def test_create_list_show_scale_drain_and_delete(runner: CliRunner, world: Fleet) -> None:
    created = run(runner, world.acme, "workloads", "create", "train", *SHAPE, "--replicas", "4")
    assert created.exit_code == 0, created.output
    assert "8 x h100-80gb-sxm" in created.stdout
    assert "deployments" in created.stdout and "verdicts" in created.stdout
    made = json.loads(run(runner, world.acme, "workloads", "list", "--json").stdout)["items"][0]
    wid = made["id"]
    assert {d["clusterId"]: d["placedReplicas"] for d in made["deployments"]} == {"iad-1": 3, "fra-1": 1}

    listed = run(runner, world.acme, "workloads", "list")
    assert listed.exit_code == 0, listed.output
    assert wid in listed.stdout and "fra-1=1, iad-1=3" in listed.stdout
    assert "fra-1=0/1, iad-1=0/3" in listed.stdout  # READY: ready/desired per cluster

    shown = run(runner, world.acme, "workloads", "show", wid)
    assert shown.exit_code == 0, shown.output
    header = next(line for line in shown.stdout.splitlines() if "phase" in line)
    assert header.split() == [
        "cluster",
        "phase",
        "desired",
        "placed",
        "running",
        "ready",
        "terminating",
        "reason",
        "shortfall",
        "message",
    ]
    iad = next(line for line in shown.stdout.splitlines() if line.startswith("iad-1"))
    assert iad.split()[:9] == ["iad-1", "placed", "3", "3", "0", "0/3", "0", "-", "0"]

    scaled = run(runner, world.acme, "workloads", "scale", wid, "7", "--json")
    assert scaled.exit_code == 0, scaled.output
    answer = json.loads(scaled.stdout)
    assert (answer["replicas"], answer["placedReplicas"]) == (7, 6)
    assert answer["unplacedReplicas"] == 1 and answer["reason"] == "insufficient_capacity"
    assert {v["clusterId"] for v in answer["verdicts"]} == {"iad-1", "fra-1", "sjc-1"}
    down = run(runner, world.acme, "workloads", "scale", wid, "2")
    assert down.exit_code == 0, down.output

    before = json.loads(run(runner, world.acme, "workloads", "show", wid, "--json").stdout)
    clusters = {d["clusterId"] for d in before["deployments"]}
    drained = run(runner, world.acme, "workloads", "drain", wid, "--cluster", "iad-1")
    assert drained.exit_code == 0, drained.output
    assert "workload.drain" in drained.stdout and "succeeded" in drained.stdout
    after = json.loads(run(runner, world.acme, "workloads", "show", wid, "--json").stdout)
    assert "iad-1" in clusters and "iad-1" not in {d["clusterId"] for d in after["deployments"]}
    assert sum(d["placedReplicas"] for d in after["deployments"]) == 2

    # sjc-1 takes one of fra-1's two: the other would have nowhere to go, so it takes --force
    drained_json = run(
        runner, world.acme, "workloads", "drain", wid, "--cluster", "fra-1", "--force", "--json"
    )
    op = json.loads(drained_json.stdout)
    assert (op["type"], op["workloadId"], op["payload"]) == ("workload.drain", wid, {"cluster": "fra-1"})

    deleted = run(runner, world.acme, "workloads", "delete", wid, "--json")
    assert deleted.exit_code == 0, deleted.output
    assert json.loads(deleted.stdout)["id"] == wid
    assert "no workloads" in run(runner, world.acme, "workloads", "list").stdout
    gone = run(runner, world.acme, "workloads", "show", wid)
    assert gone.exit_code == 1 and "NOT_FOUND" in gone.stderr


def test_create_takes_every_placement_option(runner: CliRunner, world: Fleet) -> None:
    created = run(
        runner,
        world.admin,
        "workloads",
        "create",
        "spread",
        "--project",
        "acme",
        "--device-class",
        "h100-80gb-sxm",
        "--device-count",
        "1",
        "--replicas",
        "3",
        "--strategy",
        "spread",
        "--floor",
        "sjc-1=1",
        "--max-clusters",
        "3",
        "--priority-class",
        "standard",
        "--allowed-region",
        "us-east",
        "--allowed-region",
        "us-west",
        "--single-domain",
        "--domain-kind",
        "nvlink",
        "--json",
    )
    assert created.exit_code == 0, created.output
    got = json.loads(created.stdout)
    assert (got["tenantId"], got["strategy"], got["clusterFloors"], got["maxClusters"]) == (
        "acme",
        "spread",
        {"sjc-1": 1},
        3,
    )
    assert got["allowedRegions"] == ["us-east", "us-west"]
    assert (got["requiresSingleTopologyDomain"], got["topologyDomainKind"]) == (True, "nvlink")
    assert sum(d["placedReplicas"] for d in got["deployments"]) == 3
    pinned = run(
        runner, world.acme, "workloads", "create", "pinned", *SHAPE, "--replicas", "2", "--cluster", "sjc-1"
    )
    assert pinned.exit_code == 0, pinned.output
    assert "insufficient_capacity" in pinned.stdout


def test_bad_options_are_refused_with_the_option_named(runner: CliRunner, world: Fleet) -> None:
    floor = run(runner, world.acme, "workloads", "create", "w", *SHAPE, "--replicas", "1", "--floor", "iad-1")
    assert floor.exit_code != 0 and "CLUSTER=N" in floor.output
    strategy = run(
        runner, world.acme, "workloads", "create", "w", *SHAPE, "--replicas", "1", "--strategy", "fill"
    )
    assert strategy.exit_code == 2 and "INVALID_INPUT" in strategy.stderr and "strategy" in strategy.stderr
    admin = run(runner, world.admin, "workloads", "create", "w", *SHAPE, "--replicas", "1", "--json")
    assert admin.exit_code == 1
    assert json.loads(admin.stderr)["error"]["code"] == "INVALID_INPUT"
    assert "--project" in json.loads(admin.stderr)["error"]["message"]
    neither = run(runner, world.acme, "placement", "preview")
    assert neither.exit_code != 0 and "--workload" in neither.output
    both = run(runner, world.acme, "placement", "preview", "--workload", "w", *SHAPE, "--replicas", "1")
    assert both.exit_code != 0 and "not both" in both.output


def test_placement_preview_prints_a_verdict_per_cluster_and_the_shares(
    runner: CliRunner, world: Fleet
) -> None:
    table = run(runner, world.acme, "placement", "preview", *SHAPE, "--replicas", "4")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    header = next(line for line in lines if "verdict" in line)
    assert header.split()[:4] == ["cluster", "verdict", "share", "free"]
    assert "quota left" in header and "largest domain" in header and "message" in header
    iad = next(line for line in lines if line.startswith("iad-1"))
    assert iad.split()[:7] == ["iad-1", "admitted", "3", "24", "no", "limit", "8"]
    assert "chosen: iad-1=3, fra-1=1" in table.stdout
    assert json.loads(run(runner, world.acme, "workloads", "list", "--json").stdout)["items"] == []

    too_big = run(
        runner,
        world.acme,
        "placement",
        "preview",
        "--device-class",
        "h100-80gb-sxm",
        "--device-count",
        "16",
        "--replicas",
        "1",
        "--json",
    )
    assert too_big.exit_code == 0, too_big.output
    answer = json.loads(too_big.stdout)
    assert answer["clusters"] == [] and answer["unplacedReplicas"] == 1
    assert {v["clusterId"]: v["reason"] for v in answer["verdicts"]} == dict.fromkeys(
        ("iad-1", "fra-1", "sjc-1"), "insufficient_capacity"
    )
    text = run(
        runner, world.acme, "placement", "preview", *SHAPE[:2], "--device-count", "16", "--replicas", "1"
    )
    assert "unplaced: 1 (insufficient_capacity)" in text.stdout and "chosen: none" in text.stdout

    made = run(runner, world.acme, "workloads", "create", "w", *SHAPE, "--replicas", "2", "--json")
    wid = json.loads(made.stdout)["id"]
    existing = run(runner, world.acme, "placement", "preview", "--workload", wid, "--json")
    assert existing.exit_code == 0, existing.output
    assert json.loads(existing.stdout)["shares"] == {"iad-1": 2}


def test_release_replica_ends_a_terminating_replica_for_an_admin(
    runner: CliRunner, world: Fleet, store: Store
) -> None:
    created = run(runner, world.acme, "workloads", "create", "w", *SHAPE, "--replicas", "1", "--json")
    wid = json.loads(created.stdout)["id"]
    with store.begin() as tx:
        (dep,) = tx.workloads.deployments_of([wid])[wid]
        ((_, allocation),) = tx.workloads.replicas_of([dep.id])[dep.id]
        tx.bindings.put(allocation, "iad-1-n0", "bound", None, T0)
    scaled = run(runner, world.acme, "workloads", "scale", wid, "0", "--json")
    assert json.loads(scaled.stdout)["terminatingReplicas"] == 1
    denied = run(runner, world.acme, "workloads", "release-replica", allocation)
    assert denied.exit_code != 0 and "FORBIDDEN" in denied.output
    released = run(runner, world.admin, "workloads", "release-replica", allocation)
    assert released.exit_code == 0, released.output
    assert "replica.release" in released.stdout and "succeeded" in released.stdout
    again = run(runner, world.admin, "workloads", "release-replica", allocation, "--json")
    assert again.exit_code != 0 and "NOT_FOUND" in again.output
    shown = run(runner, world.acme, "workloads", "show", wid, "--json")
    assert json.loads(shown.stdout)["terminatingReplicas"] == 0


def test_placement_preview_with_a_priority_class_prints_whom_it_would_preempt(
    runner: CliRunner, world: Fleet
) -> None:
    admin = world.admin
    for name, priority, flag in (("batch", "1", ["--preemptible"]), ("prod", "100", [])):
        made = run(runner, admin, "priority-classes", "create", "--name", name, "--priority", priority, *flag)
        assert made.exit_code == 0, made.output
    full = run(
        runner,
        world.acme,
        "workloads",
        "create",
        "filler",
        *SHAPE,
        "--replicas",
        "6",
        "--priority-class",
        "batch",
    )
    assert full.exit_code == 0, full.output
    table = run(
        runner, world.acme, "placement", "preview", *SHAPE, "--replicas", "1", "--priority-class", "prod"
    )
    assert table.exit_code == 0, table.output
    assert "preempts" in table.stdout
    line = next(line for line in table.stdout.splitlines() if line.rstrip().endswith("priority"))
    assert line.split()[3:] == ["batch", "priority"]
    unknown = run(
        runner, world.acme, "placement", "preview", *SHAPE, "--replicas", "1", "--priority-class", "nope"
    )
    assert unknown.exit_code != 0 and "priority class nope not found" in unknown.output


def test_workloads_why_prints_the_chain_of_decisions_including_preemptions(
    runner: CliRunner, world: Fleet
) -> None:
    for name, priority, flag in (("batch", "1", ["--preemptible"]), ("prod", "100", [])):
        assert run(
            runner, world.admin, "priority-classes", "create", "--name", name, "--priority", priority, *flag
        )
    filler = run(
        runner,
        world.acme,
        "workloads",
        "create",
        "filler",
        *SHAPE,
        "--replicas",
        "6",
        "--priority-class",
        "batch",
    )
    assert filler.exit_code == 0, filler.output
    prod = run(
        runner,
        world.acme,
        "workloads",
        "create",
        "prod",
        *SHAPE,
        "--replicas",
        "2",
        "--priority-class",
        "prod",
    )
    assert prod.exit_code == 0, prod.output
    scaled = run(runner, world.acme, "workloads", "scale", "prod", "3")
    assert scaled.exit_code == 0, scaled.output

    mine = run(runner, world.acme, "workloads", "why", "prod")
    assert mine.exit_code == 0, mine.output
    lines = mine.stdout.splitlines()
    assert lines[0].startswith("prod (wkl-") and "3 of 3 placed" in lines[0]
    assert "created: 2 replica(s) of 8 x h100-80gb-sxm" in lines[1]
    assert (
        "create: placed" in lines[2] and "preempted 2 replica(s) of" in lines[2] and "(priority)" in lines[2]
    )
    assert "scaled: 2 -> 3 replica(s)" in lines[3]
    assert "scale: placed" in lines[4] and "preempted 1 replica(s)" in lines[4]

    theirs = run(runner, world.acme, "workloads", "why", "filler")
    assert theirs.exit_code == 0, theirs.output
    assert "3 of 6 placed" in theirs.stdout.splitlines()[0]
    evicted = [line for line in theirs.stdout.splitlines() if "preempted:" in line]
    assert len(evicted) == 2 and all("evicted by workload wkl-" in line for line in evicted)

    as_json = json.loads(run(runner, world.acme, "workloads", "why", "prod", "--json").stdout)
    assert [e["type"] for e in as_json["decisions"]] == [
        "workload.created",
        "workload.decided",
        "workload.scaled",
        "workload.decided",
    ]
    assert as_json["decisions"][1]["payload"]["evicted"][0]["why"] == "priority"


def test_a_workload_asked_by_capability_prints_what_it_resolved_to(runner: CliRunner, world: Fleet) -> None:
    made = run(
        runner,
        world.acme,
        "workloads",
        "create",
        "cap",
        "--min-memory-gib",
        "40",
        "--device-count",
        "8",
        "--replicas",
        "1",
    )
    assert made.exit_code == 0, made.output
    assert "resolved: H100-80GB" in made.stdout and "capability/gpu/H100-80GB" in made.stdout
    preview = run(
        runner,
        world.acme,
        "placement",
        "preview",
        "--min-memory-gib",
        "400",
        "--device-count",
        "1",
        "--replicas",
        "1",
    )
    assert preview.exit_code == 0, preview.output
    assert "resolved: no kind of device the project may use gives it" in preview.stdout
    assert "under the 400 asked" in preview.stdout
    both = run(
        runner,
        world.acme,
        "workloads",
        "create",
        "x",
        "--device-class",
        "h100-80gb-sxm",
        "--min-memory-gib",
        "4",
        "--device-count",
        "1",
        "--replicas",
        "1",
    )
    assert both.exit_code != 0 and "not both" in both.output
    neither = run(runner, world.acme, "workloads", "create", "x", "--device-count", "1", "--replicas", "1")
    assert neither.exit_code != 0 and "--device-class" in neither.output


def narrow(runner: CliRunner, token: str, *args: str) -> Any:
    """At 80 columns, as a terminal of that width or a pipe (CliRunner's output is not a tty)."""
    return runner.invoke(app, [*args, "--token", token], env={"COLUMNS": "80"})


def test_scale_prints_the_verdicts_per_cluster_after_the_scale_at_80_columns(
    runner: CliRunner, world: Fleet
) -> None:
    created = run(runner, world.acme, "workloads", "create", "train", *SHAPE, "--replicas", "2", "--json")
    wid = json.loads(created.stdout)["id"]
    scaled = narrow(runner, world.acme, "workloads", "scale", wid, "7")
    assert scaled.exit_code == 0, scaled.output
    lines = scaled.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[:2] == [
        f"scaled train ({wid}) to 7 replica(s)",
        "6 placed, 1 unplaced (insufficient_capacity)",
    ]
    verdicts = lines[lines.index("verdicts") + 1 :]
    assert verdicts[0].split()[:3] == ["cluster", "verdict", "share"]
    rows = [line.split() for line in verdicts[1:]]
    assert {r[0] for r in rows if len(r) > 1 and r[1] == "admitted"} == {
        "iad-1",
        "fra-1",
        "sjc-1",
    }


def test_delete_says_what_it_deleted(runner: CliRunner, world: Fleet) -> None:
    created = run(runner, world.acme, "workloads", "create", "train", *SHAPE, "--replicas", "2", "--json")
    wid = json.loads(created.stdout)["id"]
    deleted = narrow(runner, world.acme, "workloads", "delete", wid)
    assert deleted.exit_code == 0, deleted.output
    assert deleted.stdout.splitlines()[0] == f"deleted workload train ({wid}): 2 replica(s) taken away"


def test_drain_refuses_without_force_says_why_and_dry_run_changes_nothing(
    runner: CliRunner, world: Fleet
) -> None:
    created = run(
        runner,
        world.acme,
        "workloads",
        "create",
        "train",
        *SHAPE,
        "--replicas",
        "3",
        "--allowed-cluster",
        "iad-1",
        "--json",
    )
    wid = json.loads(created.stdout)["id"]
    refused = narrow(runner, world.acme, "workloads", "drain", wid, "--cluster", "iad-1")
    assert refused.exit_code == 1, refused.output
    assert "would leave 3 replica(s)" in refused.stderr and "--force" in refused.stderr
    assert "force: true" not in refused.stderr
    planned = narrow(runner, world.acme, "workloads", "drain", wid, "--cluster", "iad-1", "--dry-run")
    assert planned.exit_code == 0, planned.output
    assert planned.stdout.splitlines()[:2] == [
        "dry run: nothing changed",
        "drain of iad-1: would take away 3 replica(s), 0 of them terminating",
    ]
    assert "3 replica(s) would have nowhere to go: it needs --force" in planned.stdout
    assert max(len(line) for line in planned.stdout.splitlines()) <= 80
    shown = json.loads(run(runner, world.acme, "workloads", "show", wid, "--json").stdout)
    assert shown["placedReplicas"] == 3 and shown["drainedClusters"] == []
    forced = narrow(runner, world.acme, "workloads", "drain", wid, "--cluster", "iad-1", "--force")
    assert forced.exit_code == 0, forced.output
    assert "drain of iad-1: took away 3 replica(s), 0 of them terminating" in forced.stdout
    assert "3 replica(s) had nowhere to go: they wait as unplaced" in forced.stdout
