"""One table style on every list command, through the CLI at 80 columns and piped: `-o
table|wide|json` (`--json` its alias), ids and times never cut, times to the second, detail views in
English labels, sizes in the words a user booked by, and the CDI names a node writes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from better_compute.bcd import cdi as node_cdi
from better_compute.cli.app import app
from tests.cli.test_reservations_cmd import RSV_ID, mig_reservation_json
from tests.cli.test_resources_cmd import Live, live
from tests.client.fakes import FakeServer, reservation_json

__all__ = ["live"]

AT_80 = {"COLUMNS": "80"}
PIPED = {"COLUMNS": None}  # no terminal and no COLUMNS: what `| cat` gets
WIDTHS = pytest.mark.parametrize("env", [AT_80, PIPED], ids=["80-columns", "piped"])

LIST_COMMANDS = [
    ("pools", "list"),
    ("clusters", "list"),
    ("nodes", "list"),
    ("atoms", "list"),
    ("tenants", "list"),
    ("quotas", "list"),
    ("device-classes", "list"),
    ("priority-classes", "list"),
    ("policies", "list"),
    ("credentials", "list"),
    ("reservations", "list"),
    ("workloads", "list"),
    ("endpoints", "list"),
    ("prices", "list"),
]
TIME = re.compile(r"\b\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}Z\b")
README = Path(__file__).resolve().parents[2] / "README.md"


def _run(runner: CliRunner, live: Live, env: dict[str, str | None], *args: str) -> object:
    return runner.invoke(app, [*args, "--token", live.admin], env=env)


@WIDTHS
@pytest.mark.parametrize("command", LIST_COMMANDS, ids=" ".join)
def test_every_list_command_takes_output_json_as_its_json_alias(
    runner: CliRunner, live: Live, command: tuple[str, str], env: dict[str, str | None]
) -> None:
    as_json = runner.invoke(app, [*command, "--json", "--token", live.admin], env=env)
    assert as_json.exit_code == 0, as_json.output
    output_json = runner.invoke(app, [*command, "-o", "json", "--token", live.admin], env=env)
    assert output_json.exit_code == 0, output_json.output
    assert json.loads(output_json.stdout) == json.loads(as_json.stdout)
    table = runner.invoke(app, [*command, "-o", "table", "--token", live.admin], env=env)
    assert table.exit_code == 0, table.output
    assert "…" not in table.stdout
    ids = [item["id"] for item in json.loads(as_json.stdout).get("items", []) if "id" in item]
    for whole in ids:  # every id on the page, whole, on one line
        assert any(whole in line.split() for line in table.stdout.splitlines()), whole


@WIDTHS
def test_list_tables_show_times_to_the_second_and_say_what_wide_adds(
    runner: CliRunner, live: Live, env: dict[str, str | None]
) -> None:
    tenants = runner.invoke(app, ["tenants", "list", "--token", live.admin], env=env)
    assert tenants.exit_code == 0, tenants.output
    assert TIME.search(tenants.stdout), tenants.stdout  # created: 2026-12-01 09:00:00Z
    assert all(len(line.rstrip()) <= 80 for line in tenants.stdout.splitlines())
    quota = {"tenantId": "platform", "poolId": "p1", "class": "gpu.mig", "limit": 4}
    set_quota = ["api", "quotas.set", "--json", json.dumps(quota), "--token", live.admin]
    assert runner.invoke(app, set_quota).exit_code == 0
    wide = runner.invoke(app, ["quotas", "list", "-o", "wide", "--token", live.admin], env=env)
    assert wide.exit_code == 0 and "wide adds" not in wide.stdout
    header = wide.stdout.splitlines()[0].split()
    assert header == ["tenant", "scope", "pool", "class", "device", "cluster", "used", "limit"]


@WIDTHS
def test_detail_views_label_fields_in_english_not_wire_keys(
    runner: CliRunner, live: Live, env: dict[str, str | None]
) -> None:
    """Regression: `pools show` and the other detail views printed the wire's keys (`ownerTenantId`,
    `createdAt`) and times to the microsecond."""
    shown = runner.invoke(app, ["pools", "show", "p1", "--token", live.admin], env=env)
    assert shown.exit_code == 0, shown.output
    labels = [line.split("  ")[0] for line in shown.stdout.splitlines() if line and not line[0].isspace()]
    assert "Owner tenant ID" in labels and "Cluster ID" in labels
    assert not any(re.search(r"[a-z][A-Z]", label) for label in labels), labels
    node = json.loads(runner.invoke(app, ["nodes", "list", "--json", "--token", live.admin], env=env).stdout)[
        "items"
    ][0]["id"]
    cordoned = runner.invoke(app, ["nodes", "cordon", node, "--token", live.admin], env=env)
    assert any(line.split() == ["Cordoned", "yes"] for line in cordoned.stdout.splitlines())
    tenant = runner.invoke(app, ["tenants", "show", "acme", "--token", live.admin], env=env)
    created = next(line for line in tenant.stdout.splitlines() if line.startswith("Created at"))
    assert TIME.search(created) and "." not in created


@WIDTHS
def test_reservation_size_says_one_slice_a_profile_or_gpus_in_english(
    runner: CliRunner, server: FakeServer, env: dict[str, str | None]
) -> None:
    """Regression: a MIG booking's size read `1 slices`, and a whole GPU's `1 gpu`."""
    slot = {
        "id": "atm-slot",
        "class": "gpu.slot",
        "gpuId": "GPU-1",
        "node": "n1",
        "attributes": {"slot": 0, "slots": 4},
    }
    items = [
        mig_reservation_json(),
        reservation_json(id="rsv-two"),
        reservation_json(id="rsv-one", gpuCount=1, atoms=[reservation_json()["atoms"][0]]),
        reservation_json(id="rsv-slot", gpuCount=0, gpuSlices=1, atoms=[slot]),
        reservation_json(id="rsv-bare", gpuCount=0, gpuSlices=1, atoms=[]),
    ]
    server.routes[("GET", "/v1/reservations")] = {"items": items, "nextCursor": None}
    listed = runner.invoke(app, ["reservations", "list", "-o", "wide"], env=env)
    assert listed.exit_code == 0, listed.output
    size = {line.split()[0]: line.split("4h", 1)[1].strip() for line in listed.stdout.splitlines()[1:]}
    assert size == {
        RSV_ID: "3g.40gb",
        "rsv-two": "2 GPUs",
        "rsv-one": "1 GPU",
        "rsv-slot": "1 slot",
        "rsv-bare": "1 slice",
    }
    assert "slices" not in listed.stdout


@WIDTHS
def test_reservations_show_prints_the_cdi_device_and_file_the_node_writes(
    runner: CliRunner, server: FakeServer, env: dict[str, str | None]
) -> None:
    """Regression: the README named a CDI directory but not the file, and nothing printed it."""
    server.routes[("GET", f"/v1/reservations/{RSV_ID}")] = mig_reservation_json()
    shown = runner.invoke(app, ["reservations", "show", RSV_ID], env=env)
    assert shown.exit_code == 0, shown.output
    rows = {line[:16].strip(): line[16:].strip() for line in shown.stdout.splitlines() if line[:1].isupper()}
    written = node_cdi.spec_path(Path("/var/run/cdi"), RSV_ID)  # what bcd writes on the node
    assert rows["CDI spec file"] == written.name
    assert rows["CDI device"] == f"{node_cdi.KIND}={RSV_ID}"
    assert rows["Size"] == "3g.40gb" and rows["ID"] == RSV_ID


def test_the_readme_names_the_cdi_file_the_node_writes() -> None:
    """The README's path is exact: the simulated node's CDI directory (`<root>/<node>/cdi`) and the
    file name the daemon gives a reservation's spec."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    name = node_cdi.spec_path(Path("/"), "rsv-0").name.replace("rsv-0", "rsv-...")
    assert name == "better-compute.io-gpu_rsv-....json"
    assert f"/tmp/better-compute-nodes-<random>/euw-h100-b/cdi/{name}" in text
    assert f"CDI spec file {name}" in text and f"CDI device {node_cdi.KIND}=rsv-..." in text


@pytest.mark.parametrize("width", ["40", "60"])
def test_a_wrapping_column_never_folds_an_id(runner: CliRunner, server: FakeServer, width: str) -> None:
    """A free-text column (tenant, pool) may wrap between words, never inside one: a tenant id
    narrower than the terminal stays whole on one line."""
    tenant = "research-platform-europe-west"
    server.routes[("GET", "/v1/reservations")] = {
        "items": [reservation_json(id=RSV_ID, tenantId=tenant)],
        "nextCursor": None,
    }
    listed = runner.invoke(app, ["reservations", "list", "-o", "wide"], env={"COLUMNS": width})
    assert listed.exit_code == 0, listed.output
    assert tenant in listed.stdout.split() and RSV_ID in listed.stdout.split()


@WIDTHS
@pytest.mark.parametrize("command", [["gpus"], ["layouts", "list", "--gpu", "H100-80GB"]], ids=" ".join)
def test_catalog_lists_take_output_json_and_fit_80_columns(
    runner: CliRunner, command: list[str], env: dict[str, str | None]
) -> None:
    as_json = runner.invoke(app, [*command, "--json"], env=env)
    output_json = runner.invoke(app, [*command, "-o", "json"], env=env)
    assert as_json.exit_code == output_json.exit_code == 0, output_json.output
    assert json.loads(output_json.stdout) == json.loads(as_json.stdout)
    table = runner.invoke(app, command, env=env)
    assert table.exit_code == 0 and "…" not in table.stdout
    assert all(len(line.rstrip()) <= 80 for line in table.stdout.splitlines())


@WIDTHS
def test_events_print_their_time_to_the_second_as_one_token(
    runner: CliRunner, server: FakeServer, env: dict[str, str | None]
) -> None:
    """Regression: an event logged with microseconds printed them (`09:00:00.123456Z`)."""
    event = {"id": 7, "type": "pool.created", "subject": "p1", "time": "2026-12-01T09:00:00.123456Z"}
    server.routes[("GET", "/v1/events")] = {"items": [event], "nextCursor": None}
    shown = runner.invoke(app, ["events"], env=env)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.split()[:4] == ["7", "2026-12-01T09:00:00Z", "pool.created", "p1"]
