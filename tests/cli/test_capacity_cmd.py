"""`capacity free`, `atoms list` and `tenants delete` through the CLI against the real app on both
stores (the client's transport hands each request to the app in-process)."""

from __future__ import annotations

import itertools
import json

from typer.testing import CliRunner

from better_compute.cli.app import app
from better_compute.domain.kernel.timewin import Window
from better_compute.service.ledger import ledger
from better_compute.storage.store import Store
from tests.builders import T0
from tests.cli.test_resources_cmd import Live, live, run

__all__ = ["live"]

BOOK = {
    "tenantId": "platform",
    "poolId": "p1",
    "devices": [{"class": "gpu.mig", "count": 1}],
    "duration": "2h",
}


def _book(runner: CliRunner, live: Live) -> str:
    quota = {"tenantId": "platform", "poolId": "p1", "class": "gpu.mig", "limit": 4}
    assert run(runner, live.admin, "api", "quotas.set", "--json", json.dumps(quota)).exit_code == 0
    made = run(runner, live.admin, "api", "reservations.create", "--json", json.dumps(BOOK))
    assert made.exit_code == 0, made.output
    return str(json.loads(made.stdout)["atoms"][0]["id"])


def test_capacity_free_shows_each_kind_free_now_and_when_busy(runner: CliRunner, live: Live) -> None:
    shown = run(runner, live.admin, "capacity", "free", "--pool", "p1")
    assert shown.exit_code == 0, shown.output
    assert "pool p1, 2026-12-01 09:00:00Z → 2026-12-01 10:00:00Z" in shown.stdout
    row = next(line for line in shown.stdout.splitlines() if "1g.10gb" in line)
    assert row.split()[-3:] == ["14", "14", "now"]
    answer = json.loads(
        run(runner, live.admin, "capacity", "free", "--pool", "p1", "--count", "14", "--json").stdout
    )
    assert [(k["migProfile"], k["free"]) for k in answer["kinds"]] == [("1g.10gb", 14)]
    _book(runner, live)
    busy = run(runner, live.admin, "capacity", "free", "--pool", "p1", "--count", "14")
    row = next(line for line in busy.stdout.splitlines() if "1g.10gb" in line)
    assert row.split()[-4:] == ["14", "13", "2026-12-01", "11:00:00Z"]


def test_capacity_free_refuses_a_bad_time_with_the_option_named(runner: CliRunner, live: Live) -> None:
    bad = run(runner, live.admin, "capacity", "free", "--pool", "p1", "--from", "noon")
    assert bad.exit_code == 2
    assert "'noon' is not an ISO 8601 time" in bad.output and "--from" in bad.output
    inverted = run(
        runner,
        live.admin,
        "capacity",
        "free",
        "--pool",
        "p1",
        "--from",
        "2026-12-01T12:00Z",
        "--to",
        "2026-12-01T11:00Z",
    )
    assert inverted.exit_code == 1 and "must be after from" in inverted.output


def test_atoms_list_says_which_atom_is_booked_now_and_when_it_frees(runner: CliRunner, live: Live) -> None:
    held = _book(runner, live)
    shown = run(runner, live.admin, "atoms", "list", "--pool", "p1", "--class", "gpu.mig", "-o", "wide")
    assert shown.exit_code == 0, shown.output
    row = next(line for line in shown.stdout.splitlines() if held in line)
    assert row.split()[-3:] == ["yes", "2026-12-01", "11:00:00Z"]
    others = [line for line in shown.stdout.splitlines() if line.startswith("atm-") and held not in line]
    assert others and all(line.split()[-2:] == ["no", "now"] for line in others)
    as_json = json.loads(
        run(runner, live.admin, "atoms", "list", "--attr", "migProfile=1g.10gb", "--json").stdout
    )
    booked = [a["id"] for a in as_json["items"] if a["bookedNow"]]
    assert booked == [held]
    parents = run(runner, live.admin, "atoms", "list", "--pool", "p1", "--class", "gpu")
    rows = [line.split() for line in parents.stdout.splitlines() if line.startswith("atm-")]
    assert len(rows) == 2 and all(row[-2:] == ["no", "unbookable:"] for row in rows)
    assert "split or" in parents.stdout  # the reason, wrapped between words at 80 columns
    none = run(runner, live.admin, "atoms", "list", "--pool", "p1", "--class", "gpu.slot")
    assert none.exit_code == 0 and none.stdout.strip() == "no atoms"


def test_tenants_delete_then_the_tenant_is_gone(runner: CliRunner, live: Live) -> None:
    gone = run(runner, live.admin, "tenants", "delete", "acme", "--json")
    assert gone.exit_code == 0, gone.output
    assert json.loads(gone.stdout)["deletedAt"].startswith("2026-12-01T09:00:00")
    again = run(runner, live.admin, "tenants", "delete", "acme")
    assert again.exit_code == 1 and "tenant acme not found" in again.output
    owner = run(runner, live.admin, "tenants", "delete", "platform")
    assert owner.exit_code == 1 and "owns 1 pool(s) (p1); delete them first" in owner.output


def test_quotas_list_over_a_window(runner: CliRunner, live: Live) -> None:
    _book(runner, live)  # 09:00 to 11:00
    later = run(runner, live.admin, "quotas", "list", "--pool", "p1", "--from", "2026-12-01T12:00Z", "--json")
    assert later.exit_code == 0, later.output
    used = {r["class"]: r["used"] for r in json.loads(later.stdout)["items"]}
    assert used["gpu.mig"] == 0
    during = run(
        runner, live.admin, "quotas", "list", "--pool", "p1", "--from", "2026-12-01T10:00Z", "--json"
    )
    assert {r["class"]: r["used"] for r in json.loads(during.stdout)["items"]}["gpu.mig"] == 1


RANGE = ("--from", "2026-12-01T09:00Z", "--to", "2026-12-01T11:00Z")


def test_capacity_accounting_shows_every_gpu_hour_by_state_per_bucket(runner: CliRunner, live: Live) -> None:
    _book(runner, live)  # one 1g.10gb of two H100s, for two hours: 1/7 of a GPU
    shown = run(runner, live.admin, "capacity", "accounting", "--pool", "p1", *RANGE, "-o", "wide")
    assert shown.exit_code == 0, shown.output
    assert "pool p1, 2026-12-01 09:00:00Z → 2026-12-01 11:00:00Z, GPU-hours per 1h" in shown.stdout
    lines = shown.stdout.splitlines()
    assert lines[1].split() == ["from", "capacity", "booked", "free", "changing", "unhealthy", "cordoned"]
    assert lines[2].split() == ["09:00:00Z", "2.000000", "0.142857", "1.857143", *["0.000000"] * 3]
    assert lines[-1].split() == ["total", "4.000000", "0.285714", "3.714286", *["0.000000"] * 3]
    answer = json.loads(
        run(runner, live.admin, "capacity", "accounting", *RANGE, "--bucket", "2h", "--json").stdout
    )
    assert answer["poolId"] is None and len(answer["buckets"]) == 1
    assert answer["total"]["booked"] == "0.285714"


def test_capacity_accounting_refuses_too_many_buckets_naming_the_option(
    runner: CliRunner, live: Live
) -> None:
    refused = run(runner, live.admin, "capacity", "accounting", *RANGE, "--bucket", "1s")
    assert refused.exit_code == 1
    assert "at most 1000" in refused.output and "--bucket" in refused.output
    assert run(runner, live.admin, "capacity", "accounting", "--from", "noon", "--to", "x").exit_code == 2


def test_capacity_summary_by_pool_and_timeline(runner: CliRunner, live: Live) -> None:
    _book(runner, live)
    summary = run(runner, live.admin, "capacity", "summary")
    assert summary.exit_code == 0, summary.output
    assert summary.stdout.splitlines()[1].split() == ["H100-80GB", "2", "0", "0", "0"]
    assert (
        json.loads(run(runner, live.admin, "capacity", "summary", "--json").stdout)["models"][0]["total"] == 2
    )
    by_pool = run(runner, live.admin, "capacity", "by-pool", "--pool", "p1")
    assert by_pool.exit_code == 0, by_pool.output
    rows = [line.split() for line in by_pool.stdout.splitlines()[1:]]
    assert rows == [
        ["p1", "gpu", "2", "0", "0"],
        ["p1", "gpu.mig", "14", "14", "1"],
    ]  # a mig pool: no gpu.slot row
    timeline = run(runner, live.admin, "capacity", "timeline", *RANGE)
    assert timeline.exit_code == 0, timeline.output
    assert timeline.stdout.splitlines()[2].split() == ["2026-12-01", "09:00:00Z", "0", "0.000000"]
    as_json = json.loads(run(runner, live.admin, "capacity", "timeline", *RANGE, "--json").stdout)
    assert [b["booked"] for b in as_json["buckets"]] == [0, 0]


def test_capacity_rollups_of_a_tenant_that_sees_no_pool_say_so(runner: CliRunner, live: Live) -> None:
    assert run(runner, live.acme, "capacity", "summary").stdout.strip() == "no GPUs"
    assert run(runner, live.acme, "capacity", "by-pool").stdout.strip() == "no pools"
    hidden = run(runner, live.acme, "capacity", "accounting", "--pool", "p1", *RANGE)
    assert hidden.exit_code == 1 and "pool p1 not found" in hidden.output


def test_capacity_accounting_rows_add_up_by_default_at_80_columns_and_piped(
    runner: CliRunner, live: Live
) -> None:
    """Regression: at 80 columns the table dropped `changing` (and more), so a row's parts did not
    sum to its capacity. Every state is shown by default, within 80 columns, and each row adds up."""
    _book(runner, live)
    for env in ({"COLUMNS": "80"}, {"COLUMNS": None}):
        shown = runner.invoke(
            app, ["capacity", "accounting", "--pool", "p1", *RANGE, "--token", live.admin], env=env
        )
        assert shown.exit_code == 0, shown.output
        lines = shown.stdout.splitlines()
        assert "wide adds" not in shown.stdout and all(len(line.rstrip()) <= 80 for line in lines)
        assert lines[1].split() == ["from", "capacity", "booked", "free", "changing", "unhealthy", "cordoned"]
        for line in lines[2:]:
            capacity, *parts = (float(cell) for cell in line.split()[1:])
            assert abs(capacity - sum(parts)) < 1e-5, line


def test_atoms_list_orders_by_node_and_gpu_with_each_parent_apart_at_80_columns_and_piped(
    runner: CliRunner, live: Live, store: Store
) -> None:
    """Regression: `atoms list` showed a split GPU's parent as one more `gpu` row among the others
    saying `unbookable`, and an atom a booking without an end holds as a bare `never`."""
    items = json.loads(run(runner, live.admin, "atoms", "list", "--pool", "p1", "--json").stdout)["items"]
    by_id = {a["id"]: a for a in items}
    forever = max(a["id"] for a in items if a["class"] == "gpu.mig")
    ledger.book(store, [forever], Window(T0), "rsv-forever", "platform", T0)  # no end
    for env in ({"COLUMNS": "80"}, {"COLUMNS": None}):
        shown = runner.invoke(app, ["atoms", "list", "--pool", "p1", "--token", live.admin], env=env)
        assert shown.exit_code == 0, shown.output
        lines = [line.rstrip() for line in shown.stdout.splitlines()[1:] if not line.startswith("(")]
        families = "\n".join(lines).split("\n\n")  # a blank row between two GPUs, none inside one
        assert len(families) == 2
        for family in families:
            ids = [line.split()[0] for line in family.splitlines() if not line.startswith(" ")]
            assert {by_id[i]["gpuId"] for i in ids} == {by_id[ids[0]]["gpuId"]}  # one GPU each
            assert family.splitlines()[0].split()[1:3] == ["gpu", "(parent)"]  # its parent first
            assert "split: book" in family.splitlines()[0]
            assert len(ids) == 8  # the parent and its seven 1g.10gb instances
        gpus = [by_id[family.split()[0]]["gpuId"] for family in families]
        assert gpus == sorted(gpus)  # by node (one here), then GPU
        at = next(n for n, line in enumerate(lines) if line.startswith(forever))
        block = [lines[at], *itertools.takewhile(lambda line: line.startswith(" "), lines[at + 1 :])]
        assert " ".join(" ".join(block).split()).endswith("yes never (open-ended booking)")
        assert all(len(line.rstrip()) <= 80 for line in shown.stdout.splitlines())
