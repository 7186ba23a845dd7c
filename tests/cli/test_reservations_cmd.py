from __future__ import annotations

import json

from typer.testing import CliRunner

from better_compute.cli.app import app
from tests.client.fakes import FakeServer, error_json, reservation_json


def test_reserve_gpus_asks_for_whole_gpus(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("POST", "/v1/reservations")] = (201, reservation_json())

    result = runner.invoke(
        app,
        ["reserve", "--pool", "h100-a", "--gpus", "2", "--duration", "4h", "--idempotency-key", "k-1"],
    )

    assert result.exit_code == 0, result.output
    assert server.bodies() == [
        {
            "poolId": "h100-a",
            "devices": [{"class": "gpu", "count": 2}],
            "duration": "4h",
            "idempotencyKey": "k-1",
        }
    ]
    assert "rsv-1" in result.stdout
    assert "atom-2" in result.stdout


def test_reserve_with_tenant_start_and_json(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("POST", "/v1/reservations")] = (201, reservation_json())

    result = runner.invoke(
        app,
        [
            "reserve",
            "--pool=h100-a",
            "--gpus=1",
            "--duration=30m",
            "--tenant=acme",
            "--start=2030-01-01T10:00:00Z",
            "--json",
        ],
    )

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["id"] == "rsv-1"
    (body,) = server.bodies()
    assert body["tenantId"] == "acme"
    assert body["start"] == "2030-01-01T10:00:00Z"
    assert body["devices"] == [{"class": "gpu", "count": 1}]
    assert body["idempotencyKey"]  # generated


def test_reserve_refusal_exits_1_with_the_reason(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("POST", "/v1/reservations")] = (
        409,
        error_json("QUOTA_EXCEEDED", "tenant acme may hold 2 gpu in pool h100-a", limit=2),
    )
    result = runner.invoke(app, ["reserve", "--pool", "h100-a", "--gpus", "4", "--duration", "4h"])
    assert result.exit_code == 1
    assert "QUOTA_EXCEEDED: tenant acme may hold 2 gpu in pool h100-a" in result.stderr

    as_json = runner.invoke(app, ["reserve", "--pool", "h100-a", "--gpus", "4", "--duration", "4h", "--json"])
    assert as_json.exit_code == 1
    assert json.loads(as_json.stderr)["error"]["code"] == "QUOTA_EXCEEDED"


def test_reserve_refuses_bad_arguments_before_calling(runner: CliRunner, server: FakeServer) -> None:
    for args in (["--gpus", "0"], ["--gpus", "1", "--start", "tomorrow"]):
        result = runner.invoke(app, ["reserve", "--pool", "p", "--duration", "1h", *args])
        assert result.exit_code == 2, args
    assert server.requests == []


def test_list_shows_a_table_and_passes_filters(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("GET", "/v1/reservations")] = {
        "items": [reservation_json(), reservation_json(id="rsv-2", status="active")],
        "nextCursor": "c2",
    }
    result = runner.invoke(app, ["reservations", "list", "--pool", "h100-a", "--status", "active"])
    assert result.exit_code == 0, result.output
    assert "rsv-1" in result.stdout
    assert "rsv-2" in result.stdout
    assert "--cursor c2" in result.stdout
    assert dict(server.requests[0].url.params) == {"poolId": "h100-a", "status": "active"}


def test_list_json_and_status_check(runner: CliRunner, server: FakeServer) -> None:
    page = {"items": [reservation_json()], "nextCursor": None}
    server.routes[("GET", "/v1/reservations")] = page
    result = runner.invoke(app, ["reservations", "list", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["items"][0]["id"] == "rsv-1"

    bad = runner.invoke(app, ["reservations", "list", "--status", "booked"])
    assert bad.exit_code == 2


def test_show_cancel_release(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("GET", "/v1/reservations/rsv-1")] = reservation_json()
    server.routes[("POST", "/v1/reservations/rsv-1/cancel")] = reservation_json(status="cancelled")
    server.routes[("POST", "/v1/reservations/rsv-1/release")] = reservation_json(status="released")

    shown = runner.invoke(app, ["reservations", "show", "rsv-1"])
    assert shown.exit_code == 0, shown.output
    assert "GPU-1" in shown.stdout
    cancelled = runner.invoke(app, ["reservations", "cancel", "rsv-1", "--json"])
    assert json.loads(cancelled.stdout)["status"] == "cancelled"
    released = runner.invoke(app, ["reservations", "release", "rsv-1"])
    assert "released" in released.stdout
    assert [(r.method, r.url.path) for r in server.requests] == [
        ("GET", "/v1/reservations/rsv-1"),
        ("POST", "/v1/reservations/rsv-1/cancel"),
        ("POST", "/v1/reservations/rsv-1/release"),
    ]


def test_not_found_is_reported(runner: CliRunner, server: FakeServer) -> None:
    result = runner.invoke(app, ["reservations", "show", "rsv-9"])
    assert result.exit_code == 1
    assert "NOT_FOUND" in result.stderr


def test_an_empty_list_says_no_reservations(runner: CliRunner, server: FakeServer) -> None:
    # Defect 12 of issue 11: an empty list printed a bare header.
    server.routes[("GET", "/v1/reservations")] = {"items": [], "nextCursor": None}
    result = runner.invoke(app, ["reservations", "list"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "no reservations"


RSV_ID = "rsv-0005f1a2b3c4d5e6f7a8b9c0d1"
GPU_ID = "GPU-5f3c2a1b-9d8e-4c7b-a6f5-e4d3c2b1a098"
MIG_ID = "MIG-0a1b2c3d-4e5f-5a6b-8c7d-9e0f1a2b3c4d"
ATOM_ID = "atm-0123456789abcdef01234567"


def mig_reservation_json() -> dict[str, object]:
    atom = {
        "id": ATOM_ID,
        "class": "gpu.mig",
        "gpuId": GPU_ID,
        "node": "gpu-node-017",
        "attributes": {"migProfile": "3g.40gb", "migUuid": MIG_ID, "giId": 1, "ciId": 0},
    }
    return reservation_json(
        id=RSV_ID,
        tenantId="research-platform",
        poolId="h100-mig-east",
        atoms=[atom],
        gpuCount=0,
        gpuSlices=1,
    )


def test_tables_never_cut_ids_in_80_columns(runner: CliRunner, server: FakeServer) -> None:
    # Defect 3 of issue 11: at 80 columns Rich shrank every column and ids ended in "…".
    server.routes[("GET", "/v1/reservations")] = {"items": [mig_reservation_json()], "nextCursor": None}
    server.routes[("GET", f"/v1/reservations/{RSV_ID}")] = mig_reservation_json()
    listed = runner.invoke(app, ["reservations", "list"], env={"COLUMNS": "80"})
    assert listed.exit_code == 0, listed.output
    assert RSV_ID in listed.stdout and "…" not in listed.stdout
    assert all(len(line) <= 80 for line in listed.stdout.splitlines())
    assert "-o wide adds: tenant" in listed.stdout
    shown = runner.invoke(app, ["reservations", "show", RSV_ID], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    for whole in (RSV_ID, ATOM_ID, GPU_ID):
        assert whole in shown.stdout
    assert "…" not in shown.stdout
    assert all(len(line) <= 80 for line in shown.stdout.splitlines())


def test_wide_output_shows_every_column(runner: CliRunner, server: FakeServer) -> None:
    # Defect 3 of issue 11: kubectl-style -o wide shows what the 80-column table drops.
    server.routes[("GET", "/v1/reservations")] = {"items": [mig_reservation_json()], "nextCursor": None}
    wide = runner.invoke(app, ["reservations", "list", "-o", "wide"], env={"COLUMNS": "80"})
    assert wide.exit_code == 0, wide.output
    row = next(line for line in wide.stdout.splitlines() if line.startswith(RSV_ID))
    assert row.split()[:4] == [RSV_ID, "scheduled", "research-platform", "h100-mig-east"]
    assert row.split()[-1] == "3g.40gb" and "slices" not in row and "wide adds" not in wide.stdout


def test_show_names_the_mig_profile_gpu_and_mig_device(runner: CliRunner, server: FakeServer) -> None:
    # Defect 5 of issue 11: `reservations show` hid what a user needs to use a MIG booking.
    server.routes[("GET", f"/v1/reservations/{RSV_ID}")] = mig_reservation_json()
    shown = runner.invoke(app, ["reservations", "show", RSV_ID], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    atom_row = next(line for line in lines if line.startswith(ATOM_ID))
    assert atom_row.split()[1:3] == ["gpu.mig", "3g.40gb"]
    assert GPU_ID in shown.stdout and MIG_ID in shown.stdout
    wide = runner.invoke(app, ["reservations", "show", RSV_ID, "-o", "wide"], env={"COLUMNS": "80"})
    row = next(line for line in wide.stdout.splitlines() if line.startswith(ATOM_ID))
    assert row.split() == [ATOM_ID, "gpu.mig", "3g.40gb", GPU_ID, MIG_ID, "gpu-node-017"]


def test_tables_never_cut_ids_even_narrower_than_the_ids(runner: CliRunner, server: FakeServer) -> None:
    # Defect 3 of issue 11: with nothing left to drop, the table runs past the edge rather than cut.
    server.routes[("GET", "/v1/reservations")] = {"items": [mig_reservation_json()], "nextCursor": None}
    listed = runner.invoke(app, ["reservations", "list"], env={"COLUMNS": "20"})
    assert listed.exit_code == 0, listed.output
    assert RSV_ID in listed.stdout and "…" not in listed.stdout


def test_reservations_extend_sends_the_duration_and_shows_the_new_end(
    runner: CliRunner, server: FakeServer
) -> None:
    server.routes[("POST", "/v1/reservations/rsv-1/extend")] = (200, reservation_json())
    result = runner.invoke(app, ["reservations", "extend", "rsv-1", "--by", "2h"])
    assert result.exit_code == 0, result.output
    assert server.bodies() == [{"id": "rsv-1", "duration": "2h"}]
    assert "rsv-1" in result.stdout


def test_reservations_extend_refused_names_the_atom(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("POST", "/v1/reservations/rsv-1/extend")] = (
        409,
        error_json("CONFLICT", "atom atm-1 is booked by another reservation from 13:00", atomId="atm-1"),
    )
    result = runner.invoke(app, ["reservations", "extend", "rsv-1", "--by", "2h"])
    assert result.exit_code == 1
    assert "CONFLICT: atom atm-1 is booked by another reservation" in result.stderr
