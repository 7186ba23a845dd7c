"""`better-compute pools offer POOL TENANT... --quota CLASS=N` and `reserve --node NAME` against the
real app over the demo fleet (examples/demo-fleet.yaml), on both stores, at 80 columns and piped
(CliRunner's output is not a terminal)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from better_compute.cli.app import app
from better_compute.storage.store import Store
from tests.builders import tenant_token
from tests.cli import test_reserve_shapes
from tests.cli.test_reserve_shapes import WINDOW, Demo, fits_80_columns

demo = test_reserve_shapes.demo
"""The demo fleet behind the app, as the reserve tests set it up (the same fixture)."""

COLUMNS_80 = {"COLUMNS": "80"}


def cli(runner: CliRunner, token: str, *args: str) -> Any:
    return runner.invoke(app, [*args, "--token", token], env=COLUMNS_80)


def rows(text: str, first: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.split()[:1] == [first]]


# -- pools offer ---------------------------------------------------------------------------------


def test_the_owner_offers_a_pool_and_the_tenant_books_in_it_until_taken_back(
    runner: CliRunner, demo: Demo, store: Store
) -> None:
    acme = tenant_token(store, "acme")
    before = cli(runner, acme, "reserve", "--pool", "h100-mig", "--profile", "1g.10gb", *WINDOW)
    assert before.exit_code == 1  # a pool acme has no quota in is one it cannot see
    assert "NOT_FOUND" in before.stderr

    offered = cli(runner, demo.platform, "pools", "offer", "h100-mig", "acme", "--quota", "gpu.mig=2")

    assert offered.exit_code == 0, offered.output
    fits_80_columns(offered.stdout, "acme", "h100-mig")
    assert rows(offered.stdout, "acme") == [["acme", "h100-mig", "gpu.mig", "2"]]
    booked = cli(
        runner, acme, "reserve", "--pool", "h100-mig", "--profile", "1g.10gb", "--count", "2", *WINDOW
    )
    assert booked.exit_code == 0, booked.output
    # Offering again replaces the class given: at 0, acme may book no more there.
    taken_back = cli(runner, demo.platform, "pools", "offer", "h100-mig", "acme", "--quota", "gpu.mig=0")
    assert taken_back.exit_code == 0, taken_back.output
    assert rows(taken_back.stdout, "acme") == [["acme", "h100-mig", "gpu.mig", "0"]]
    later = ("--start", "2030-02-01T10:00:00Z", "--duration", "1h")
    refused = cli(runner, acme, "reserve", "--pool", "h100-mig", "--profile", "1g.10gb", *later)
    assert refused.exit_code == 1
    assert refused.stderr.startswith("error: QUOTA_EXCEEDED:"), refused.stderr


def test_offer_to_several_tenants_one_answer_each_as_json(runner: CliRunner, demo: Demo) -> None:
    made = cli(runner, demo.admin, "tenants", "create", "--id", "globex")
    assert made.exit_code == 0, made.output

    result = cli(
        runner,
        demo.admin,
        "pools",
        "offer",
        "a100-exclusive",
        "acme",
        "globex",
        "--quota",
        "gpu=2",
        "--json",
    )

    assert result.exit_code == 0, result.output
    items = json.loads(result.stdout)["items"]
    assert [(i["poolId"], i["tenantId"]) for i in items] == [
        ("a100-exclusive", "acme"),
        ("a100-exclusive", "globex"),
    ]
    assert [[(q["class"], q["limit"]) for q in i["quotas"]] for i in items] == [[("gpu", 2)], [("gpu", 2)]]
    table = cli(runner, demo.admin, "pools", "offer", "a100-exclusive", "acme", "globex", "--quota", "gpu=1")
    assert table.exit_code == 0, table.output
    assert [r[:4] for r in rows(table.stdout, "acme") + rows(table.stdout, "globex")] == [
        ["acme", "a100-exclusive", "gpu", "1"],
        ["globex", "a100-exclusive", "gpu", "1"],
    ]
    fits_80_columns(table.stdout)


def test_a_refused_offer_names_its_tenant_and_those_offered_before_it(runner: CliRunner, demo: Demo) -> None:
    result = cli(runner, demo.admin, "pools", "offer", "a100-exclusive", "acme", "nosuch", "--quota", "gpu=1")

    assert result.exit_code == 1
    assert rows(result.stdout, "acme") == [["acme", "a100-exclusive", "gpu", "1"]]
    assert result.stderr.startswith(
        "error: NOT_FOUND: tenant nosuch: tenant nosuch not found (offered to acme before it)"
    ), result.stderr
    assert "Traceback" not in result.output


def test_a_timeslice_pool_is_offered_to_its_owner_only(runner: CliRunner, demo: Demo) -> None:
    result = cli(runner, demo.platform, "pools", "offer", "h100-timeslice", "acme", "--quota", "gpu.slot=2")

    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error: INVALID_STATE: tenant acme: "), result.stderr
    as_json = cli(
        runner, demo.platform, "pools", "offer", "h100-timeslice", "acme", "--quota", "gpu.slot=2", "--json"
    )
    assert as_json.exit_code == 1
    assert json.loads(as_json.stderr)["error"]["details"]["reason"] == "single_tenant_pool"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "Missing option '--quota'"),
        (["--quota", "gpu"], "'gpu': write CLASS=N with CLASS one of gpu, gpu.mig, gpu.slot"),
        (["--quota", "vram=3"], "'vram=3': write CLASS=N with CLASS one of gpu, gpu.mig, gpu.slot"),
        (["--quota", "gpu=-1"], "'gpu=-1': N is a whole number, 0 or more"),
        (["--quota", "gpu=two"], "'gpu=two': N is a whole number, 0 or more"),
        (["--quota", "gpu=1", "--quota", "gpu=2"], "gpu is given twice"),
    ],
)
def test_offer_refuses_a_bad_quota_with_exit_2_before_calling(
    runner: CliRunner, demo: Demo, args: list[str], says: str
) -> None:
    result = runner.invoke(
        app, ["pools", "offer", "a100-exclusive", "acme", *args, "--token", demo.admin], terminal_width=200
    )

    assert result.exit_code == 2, result.output
    assert says in " ".join(result.stderr.replace("│", " ").split()), result.stderr
    assert demo.sent == []


# -- reserve --node ------------------------------------------------------------------------------


def test_reserve_node_books_on_that_node(runner: CliRunner, demo: Demo) -> None:
    result = cli(
        runner,
        demo.platform,
        "reserve",
        "--pool",
        "a100-exclusive",
        "--gpus",
        "2",
        "--node",
        "use-a100-2",
        *WINDOW,
    )

    assert result.exit_code == 0, result.output
    assert demo.sent[0]["devices"] == [
        {
            "class": "gpu",
            "count": 2,
            "selector": {"matchExpressions": [{"key": "node", "op": "In", "values": ["use-a100-2"]}]},
        }
    ]
    atoms = rows_starting(result.stdout, "atm-")
    assert len(atoms) == 2 and all(r[-1] == "use-a100-2" for r in atoms), result.stdout
    fits_80_columns(result.stdout, *(r[0] for r in atoms))


def rows_starting(text: str, prefix: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.startswith(prefix)]


def test_reserve_profile_on_nodes_narrows_both(runner: CliRunner, demo: Demo) -> None:
    result = cli(
        runner,
        demo.platform,
        "reserve",
        "--pool",
        "h100-mig",
        "--profile",
        "1g.10gb",
        "--node",
        "euw-h100-a-2",
        "--node",
        "euw-h100-a-2",
        *WINDOW,
        "--json",
    )

    assert result.exit_code == 0, result.output
    assert demo.sent[0]["devices"][0]["selector"]["matchExpressions"] == [
        {"key": "migProfile", "op": "In", "values": ["1g.10gb"]},
        {"key": "node", "op": "In", "values": ["euw-h100-a-2"]},
    ]
    (atom,) = json.loads(result.stdout)["atoms"]
    assert (atom["node"], atom["attributes"]["migProfile"]) == ("euw-h100-a-2", "1g.10gb")


def test_reserve_on_a_node_with_no_free_gpu_is_refused(runner: CliRunner, demo: Demo) -> None:
    whole = cli(
        runner,
        demo.platform,
        "reserve",
        "--pool",
        "a100-exclusive",
        "--gpus",
        "8",
        "--node",
        "use-a100-1",
        *WINDOW,
    )
    assert whole.exit_code == 0, whole.output

    more = cli(
        runner,
        demo.platform,
        "reserve",
        "--pool",
        "a100-exclusive",
        "--gpus",
        "1",
        "--node",
        "use-a100-1",
        *WINDOW,
    )

    assert more.exit_code == 1
    assert more.stdout == ""
    assert more.stderr.startswith("error: INSUFFICIENT_CAPACITY: devices[0]:"), more.stderr
    elsewhere = cli(
        runner,
        demo.platform,
        "reserve",
        "--pool",
        "a100-exclusive",
        "--gpus",
        "1",
        "--node",
        "use-a100-2",
        *WINDOW,
    )
    assert elsewhere.exit_code == 0, elsewhere.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--capability", "memory>=20GiB", "--node", "euw-h100-b"],
            "--node: goes with --gpus, --profile or --slots: a device asked by capability takes no selector",
        ),
        (["--gpus", "1", "--node", " "], "--node: give a node name, e.g. gpu-a-1"),
    ],
)
def test_reserve_node_refuses_with_exit_2_before_calling(
    runner: CliRunner, demo: Demo, args: list[str], says: str
) -> None:
    result = runner.invoke(
        app,
        ["reserve", "--pool", "h100-mig", "--duration", "1h", *args, "--token", demo.platform],
        terminal_width=200,
    )

    assert result.exit_code == 2, result.output
    assert says in " ".join(result.stderr.replace("│", " ").split()), result.stderr
    assert demo.sent == []


def test_reserve_help_shows_node_with_an_example(runner: CliRunner) -> None:
    result = runner.invoke(app, ["reserve", "--help"], env=COLUMNS_80)

    assert result.exit_code == 0, result.output
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
    lines = [line.strip() for line in result.stdout.splitlines()]
    at = lines.index("--node NAME                 only on this node (repeat for any of several)")
    assert lines[at + 1] == "reserve --pool a100-exclusive --gpus 1 --node use-a100-2 --duration 4h"
