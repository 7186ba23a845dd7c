from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from better_compute.cli.app import app
from tests.client.fakes import FakeServer, error_json, reservation_json


def test_prints_the_json_answer_on_stdout(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("POST", "/v1/reservations")] = (201, reservation_json())
    body = {"poolId": "h100-a", "devices": [{"class": "gpu", "count": 2}], "duration": "4h"}

    result = runner.invoke(app, ["api", "reservations.create", "--json", json.dumps(body)])

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == reservation_json()
    assert result.stderr == ""
    sent = server.bodies()[0]
    assert sent["devices"] == [{"class": "gpu", "count": 2}]
    assert sent["idempotencyKey"]


def test_reads_the_body_from_a_file(runner: CliRunner, server: FakeServer, tmp_path: Path) -> None:
    server.routes[("PUT", "/v1/quotas")] = {"tenantId": "a", "poolId": "p", "class": "gpu.mig", "limit": 7}
    request = tmp_path / "quota.json"
    request.write_text('{"tenantId": "a", "poolId": "p", "class": "gpu.mig", "limit": 7}')

    result = runner.invoke(app, ["api", "quotas.set", "--json", f"@{request}"])

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["limit"] == 7
    assert server.bodies() == [{"tenantId": "a", "poolId": "p", "class": "gpu.mig", "limit": 7}]


def test_reads_the_body_from_stdin(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("GET", "/v1/reservations/rsv-1")] = reservation_json()
    result = runner.invoke(app, ["api", "reservations.get", "--json", "@-"], input='{"id": "rsv-1"}')
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["id"] == "rsv-1"


def test_a_refusal_prints_the_error_object_on_stderr(runner: CliRunner, server: FakeServer) -> None:
    refusal = error_json("INVALID_INPUT", "devices[0]: gpu.mig atoms exist only in mig pools", index=0)
    server.routes[("POST", "/v1/reservations")] = (400, refusal)
    body = {"poolId": "h100-a", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "4h"}

    result = runner.invoke(app, ["api", "reservations.create", "--json", json.dumps(body)])

    assert result.exit_code == 1
    assert result.stdout == ""
    assert json.loads(result.stderr) == refusal


def test_unknown_method_lists_the_valid_ones(runner: CliRunner, server: FakeServer) -> None:
    result = runner.invoke(app, ["api", "reservations.book", "--json", "{}"])
    assert result.exit_code == 2
    error = json.loads(result.stderr)["error"]
    assert error["code"] == "INVALID_INPUT"
    assert "reservations.create" in error["message"]
    assert "reservations.create" in error["details"]["methods"]
    assert server.requests == []


def test_bad_json_is_refused_before_any_call(runner: CliRunner, server: FakeServer) -> None:
    for raw in ("{not json", "[1, 2]", "@/does/not/exist.json"):
        result = runner.invoke(app, ["api", "tenants.create", "--json", raw])
        assert result.exit_code == 2, raw
        assert json.loads(result.stderr)["error"]["code"] == "INVALID_INPUT"
    assert server.requests == []


def test_missing_path_parameter_is_an_input_error(runner: CliRunner, server: FakeServer) -> None:
    result = runner.invoke(app, ["api", "reservations.cancel"])
    assert result.exit_code == 2
    assert json.loads(result.stderr)["error"]["message"] == "reservations.cancel needs 'id'"


def test_no_answer_is_a_transport_error(runner: CliRunner, server: FakeServer) -> None:
    server.fail_first = 10
    result = runner.invoke(app, ["api", "clusters.list"])
    assert result.exit_code == 3
    assert json.loads(result.stderr)["error"]["code"] == "TRANSPORT"


def test_server_and_token_options_reach_the_client(runner: CliRunner, server: FakeServer) -> None:
    server.routes[("GET", "/v1/tenants")] = {"items": [], "nextCursor": None}
    result = runner.invoke(
        app, ["api", "tenants.list", "--json", '{"limit": 5}', "--server", "http://bc.test:9", "--token", "t"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"items": [], "nextCursor": None}
    request = server.requests[0]
    assert str(request.url) == "http://bc.test:9/v1/tenants?limit=5"
    assert request.headers["authorization"] == "Bearer t"


def test_a_mistyped_method_gets_did_you_mean(runner: CliRunner, server: FakeServer) -> None:
    # Defect 12 of issue 11: the whole list, and no hint at the method meant.
    result = runner.invoke(app, ["api", "reservations.lst"])
    assert result.exit_code == 2
    error = json.loads(result.stderr)["error"]
    assert error["code"] == "INVALID_INPUT"
    assert error["message"].startswith("unknown method 'reservations.lst'; did you mean 'reservations.list'")
    assert error["details"]["didYouMean"][0] == "reservations.list"
    assert server.requests == []


def test_bad_json_says_where(runner: CliRunner, server: FakeServer) -> None:
    # Defect 12 of issue 11: bad JSON in --json says where (line and column).
    raw = '{\n  "tenantId": "acme",\n  "name" "Acme"\n}'
    result = runner.invoke(app, ["api", "tenants.create", "--json", raw])
    assert result.exit_code == 2
    error = json.loads(result.stderr)["error"]
    assert error["code"] == "INVALID_INPUT"
    assert error["message"] == "--json is not valid JSON at line 3, column 10: Expecting ':' delimiter"
    assert error["details"] == {"line": 3, "column": 10}
    assert server.requests == []
