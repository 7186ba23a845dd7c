"""`better-compute reserve --gpus | --profile | --slots | --capability` against the real app over
the demo fleet (examples/demo-fleet.yaml), on both stores, at 80 columns and piped (CliRunner's
output is not a terminal): each form books what the API's own body books, and a refusal is the
server's, in the command line's one error format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.client import Compute
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from tests.builders import T0, admin_token, api_client, tenant_token

DEMO = Path(__file__).parents[2] / "examples" / "demo-fleet.yaml"
WINDOW = ("--start", "2030-01-15T10:00:00Z", "--duration", "1h")


class Demo:
    """The demo fleet behind the app, with the platform team's token (it owns every pool)."""

    def __init__(self, store: Store) -> None:
        load_fleet(store, parse_fleet(yaml.safe_load(DEMO.read_text())), T0)
        self.http = api_client(store)
        self.admin = admin_token(store)
        self.platform = tenant_token(store, "platform")
        self.sent: list[dict[str, Any]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.content:
            self.sent.append(json.loads(request.content))
        answer = self.http.request(
            request.method, str(request.url), headers=dict(request.headers), content=request.content
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    def api(self, body: dict[str, Any]) -> Any:
        """`reservations.create` through the HTTP API with the body `better-compute api` would send."""
        return self.http.post(
            "/v1/reservations", json=body, headers={"Authorization": f"Bearer {self.platform}"}
        )


@pytest.fixture
def demo(store: Store, monkeypatch: pytest.MonkeyPatch) -> Demo:
    world = Demo(store)

    def connect(settings: config.Settings) -> Compute:
        transport = httpx.MockTransport(world.handle)
        return Compute(settings.server, settings.token, transport=transport, retries=1, sleep=lambda _: None)

    monkeypatch.setattr(config, "connect", connect)
    return world


def reserve(runner: CliRunner, demo: Demo, *args: str) -> Any:
    return runner.invoke(app, ["reserve", *args, "--token", demo.platform], env={"COLUMNS": "80"})


def fits_80_columns(text: str, *ids: str) -> None:
    """Every line within 80 columns, and each id whole (never cut with an ellipsis)."""
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "…" not in text
    for whole in ids:
        assert whole in text


README_NOTEBOOK = {
    "poolId": "h100-mig",
    "start": "2030-01-15T10:00:00Z",
    "duration": "1h",
    "idempotencyKey": "notebook-ana-0924",
    "devices": [
        {
            "class": "gpu.mig",
            "count": 1,
            "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]},
        }
    ],
}


def test_reserve_profile_books_the_mig_instance_the_api_body_books(runner: CliRunner, demo: Demo) -> None:
    result = reserve(
        runner,
        demo,
        "--pool",
        "h100-mig",
        "--profile",
        "3g.40gb",
        *WINDOW,
        "--idempotency-key",
        "notebook-ana-0924",
    )

    assert result.exit_code == 0, result.output
    (sent,) = demo.sent
    assert sent["devices"] == README_NOTEBOOK["devices"]
    # The API's body under the same key replays the reservation the command made (200, not a new
    # 201): the server saw the same request (a different one under that key is refused).
    again = demo.api(README_NOTEBOOK)
    assert again.status_code == 200, again.text
    booked = again.json()
    assert result.stdout.splitlines()[0].split() == ["ID", booked["id"]]
    (atom,) = booked["atoms"]
    assert atom["attributes"]["migProfile"] == "3g.40gb"
    fits_80_columns(result.stdout, booked["id"], atom["id"], atom["gpuId"], atom["attributes"]["migUuid"])
    row = next(line for line in result.stdout.splitlines() if line.startswith(atom["id"]))
    assert row.split()[1:] == ["gpu.mig", "3g.40gb", "euw-h100-b"]


def test_reserve_profile_with_count_books_that_many(runner: CliRunner, demo: Demo) -> None:
    result = reserve(
        runner, demo, "--pool", "h100-mig", "--profile", "1g.10gb", "--count", "3", *WINDOW, "--json"
    )

    assert result.exit_code == 0, result.output
    assert demo.sent[0]["devices"] == [
        {
            "class": "gpu.mig",
            "count": 3,
            "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["1g.10gb"]}]},
        }
    ]
    atoms = json.loads(result.stdout)["atoms"]
    assert [a["attributes"]["migProfile"] for a in atoms] == ["1g.10gb"] * 3


def test_reserve_slots_books_shared_slots(runner: CliRunner, demo: Demo) -> None:
    result = reserve(runner, demo, "--pool", "h100-timeslice", "--slots", "2", *WINDOW)

    assert result.exit_code == 0, result.output
    assert demo.sent[0]["devices"] == [{"class": "gpu.slot", "count": 2}]
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("atm-")]
    assert [row[1:] for row in rows] == [
        ["gpu.slot", "slot", "0", "euw-h100-ts"],
        ["gpu.slot", "slot", "1", "euw-h100-ts"],
    ]
    fits_80_columns(result.stdout, *(row[0] for row in rows))


def test_reserve_slots_same_gpu_books_them_all_on_one_gpu(runner: CliRunner, demo: Demo) -> None:
    first = reserve(runner, demo, "--pool", "h100-timeslice", "--slots", "3", *WINDOW, "--json")
    assert first.exit_code == 0, first.output
    gpu = {a["gpuId"] for a in json.loads(first.stdout)["atoms"]}
    # one slot left on that GPU: two on one GPU must go to the other, whole
    together = reserve(
        runner, demo, "--pool", "h100-timeslice", "--slots", "2", "--same-gpu", *WINDOW, "--json"
    )

    assert together.exit_code == 0, together.output
    assert demo.sent[1]["devices"] == [{"class": "gpu.slot", "count": 2, "sameGpu": True}]
    booked = json.loads(together.stdout)
    assert len({a["gpuId"] for a in booked["atoms"]}) == 1 and not gpu & {a["gpuId"] for a in booked["atoms"]}
    assert booked["devices"][0]["sameGpu"] is True
    too_many = reserve(runner, demo, "--pool", "h100-timeslice", "--slots", "5", "--same-gpu", *WINDOW)
    assert too_many.exit_code == 1
    assert too_many.stderr.startswith(
        "error: INSUFFICIENT_CAPACITY: devices[0]: 5 gpu.slot atoms wanted on one GPU, and no GPU of pool"
        " h100-timeslice has more than 4"
    )


def test_reserve_capability_books_the_cheapest_kind_that_gives_it(runner: CliRunner, demo: Demo) -> None:
    # A 2g.20gb gives 19.62 GiB, under the 20 asked: the cheapest that gives it is a 3g.40gb.
    result = reserve(
        runner, demo, "--pool", "h100-mig", "--capability", "memory>=20GiB", "--count", "2", *WINDOW
    )

    assert result.exit_code == 0, result.output
    assert demo.sent[0]["devices"] == [{"capability": {"memoryGiB": {"min": 20}}, "count": 2}]
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("atm-")]
    assert [row[1:] for row in rows] == [["gpu.mig", "3g.40gb", "euw-h100-b"]] * 2
    fits_80_columns(result.stdout)


def test_reserve_capability_takes_slices_and_nvlink_terms(runner: CliRunner, demo: Demo) -> None:
    result = reserve(
        runner, demo, "--pool", "h100-mig", "--capability", "memory>=5, slices>=2", *WINDOW, "--json"
    )

    assert result.exit_code == 0, result.output
    assert demo.sent[0]["devices"] == [
        {"capability": {"memoryGiB": {"min": 5}, "computeSlices": {"min": 2}}, "count": 1}
    ]
    assert [a["attributes"]["migProfile"] for a in json.loads(result.stdout)["atoms"]] == ["2g.20gb"]
    nvlink = reserve(runner, demo, "--pool", "h100-mig", "--capability", "nvlink", *WINDOW)
    assert demo.sent[1]["devices"] == [{"capability": {"nvlinkPeer": True}, "count": 1}]
    assert nvlink.exit_code == 1  # the demo's H100 pool has MIG instances, never an NVLink peer
    assert nvlink.stderr.startswith("error: NOT_FOUND: no kind of device the project may use gives")


def test_a_profile_the_pool_lacks_is_the_servers_refusal(runner: CliRunner, demo: Demo) -> None:
    result = reserve(runner, demo, "--pool", "h100-mig", "--profile", "7g.80gb", *WINDOW)

    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith(
        "error: INSUFFICIENT_CAPACITY: devices[0]: pool h100-mig has no gpu.mig atom matching the selector"
        " (profiles in this pool: 1g.10gb, 2g.20gb, 3g.40gb)\n"
    )
    as_json = reserve(runner, demo, "--pool", "h100-mig", "--profile", "7g.80gb", *WINDOW, "--json")
    assert as_json.exit_code == 1
    error = json.loads(as_json.stderr)["error"]
    assert (error["code"], error["details"]["reason"]) == ("INSUFFICIENT_CAPACITY", "not_in_pool")


def test_slots_in_a_mig_pool_and_a_capability_past_the_limit_are_the_servers_refusals(
    runner: CliRunner, demo: Demo
) -> None:
    slots = reserve(runner, demo, "--pool", "h100-mig", "--slots", "2", *WINDOW)
    assert slots.exit_code == 1
    assert (
        "error: INVALID_INPUT: devices[0]: gpu.slot atoms exist only in timeslice or mps pools"
        in slots.stderr
    )
    zero = reserve(runner, demo, "--pool", "h100-mig", "--capability", "memory>=0GiB", *WINDOW)
    assert zero.exit_code == 1
    assert "error: INVALID_INPUT: devices[0].capability.memoryGiB.min must be a number above 0" in zero.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "--gpus / --profile / --slots / --capability: one of them is required"),
        (["--gpus", "1", "--profile", "3g.40gb"], "--gpus / --profile: give only one"),
        (["--slots", "2", "--capability", "memory>=20GiB"], "--slots / --capability: give only one"),
        (
            ["--slots", "2", "--count", "3"],
            "--count: goes with --profile or --capability; --slots N is itself the count",
        ),
        (
            ["--gpus", "2", "--count", "3"],
            "--count: goes with --profile or --capability; --gpus N is itself the count",
        ),
        (["--profile", " "], "--profile: give a MIG profile, e.g. 3g.40gb"),
        (
            ["--gpus", "2", "--same-gpu"],
            "--same-gpu: goes with --slots: only slots are pieces of one GPU to keep together, not --gpus",
        ),
        (["--profile", "3g.40gb", "--count", "0"], "--count"),
        (["--capability", "memory>20GiB"], "a capability is a minimum, written with >="),
        (["--capability", "memory>=20GB"], "memory is in GiB (memory>=20GiB), not GB"),
        (["--capability", "memory>=lots"], "memory is a number of GiB"),
        (["--capability", "memory>=nan"], "memory is a number of GiB"),
        (["--capability", "slices>=1.5"], "compute slices are a whole number"),
        (["--capability", "nvlink=yes"], "nvlink takes no value"),
        (["--capability", "vram>=20GiB"], "unknown term 'vram>=20GiB'"),
        (["--capability", "memory>=20GiB,memory>=30GiB"], "memory is given twice"),
        (["--capability", "memory>=20GiB,"], "an empty term"),
        (["--capability", ""], "give what each device must give"),
    ],
)
def test_reserve_refuses_a_bad_shape_with_exit_2_before_calling(
    runner: CliRunner, demo: Demo, args: list[str], says: str
) -> None:
    result = runner.invoke(
        app,
        ["reserve", "--pool", "h100-mig", "--duration", "1h", *args, "--token", demo.platform],
        terminal_width=200,
    )

    assert result.exit_code == 2, result.output
    assert says in " ".join(result.stderr.replace("│", " ").split()), result.stderr
    assert "Traceback" not in result.output
    assert demo.sent == []


def test_reserve_help_lists_each_form_with_an_example(runner: CliRunner) -> None:
    result = runner.invoke(app, ["reserve", "--help"], env={"COLUMNS": "80"})

    assert result.exit_code == 0, result.output
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
    lines = [line.strip() for line in result.stdout.splitlines()]
    for form, example in (
        ("--gpus N", "reserve --pool a100-exclusive --gpus 2 --duration 4h"),
        ("--profile P [--count N]", "reserve --pool h100-mig --profile 3g.40gb --duration 4h"),
        ("--slots N", "reserve --pool h100-timeslice --slots 2 --duration 1h"),
        ("--capability C [--count N]", "reserve --pool h100-mig --capability 'memory>=20GiB' --duration 1h"),
        ("--same-gpu", "reserve --pool h100-timeslice --slots 4 --same-gpu --duration 1h"),
    ):
        at = next(i for i, line in enumerate(lines) if line.startswith(form))
        assert lines[at + 1] == example
