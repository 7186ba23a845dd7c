"""What runs, from the command line: `workloads create` and `components create` with `--image` and
its flags or `--container-file`, through typer's CliRunner against the real app on both stores (the
client's transport hands each request to the app in-process): the container the server keeps and
shows back, and the usage errors (exit status 2) the command line refuses before sending anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from better_compute.cli import config
from better_compute.cli.app import app
from better_compute.cli.container_flags import MAX_CONTAINER_FILE
from better_compute.client import Compute
from better_compute.service.gate.mig_gate import Reconciler
from better_compute.storage.store import Store
from tests.builders import tenant_token
from tests.cli.test_workloads_cmd import SHAPE, Fleet
from tests.client.fakes import FakeServer
from tests.node_world import NodeWorld

IMAGE = "localhost/better-compute-demo:1"


@pytest.fixture
def fleet(store: Store, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    import httpx

    live = Fleet(store)

    def connect(settings: config.Settings) -> Compute:
        transport = httpx.MockTransport(live.handle)
        return Compute(settings.server, settings.token, transport=transport, retries=1, sleep=lambda _: None)

    monkeypatch.setattr(config, "connect", connect)
    return live


def run(runner: CliRunner, token: str, *args: str) -> Any:
    return runner.invoke(
        app, [*args, "--token", token, "--server", "http://testserver"], env={"COLUMNS": "250"}
    )


def create_workload(runner: CliRunner, token: str, *flags: str) -> Any:
    return run(runner, token, "workloads", "create", "serve", *SHAPE, "--replicas", "1", *flags)


def test_the_flags_make_the_container_the_server_keeps_and_shows(runner: CliRunner, fleet: Fleet) -> None:
    flags = (
        "--image", IMAGE,
        "--command", "busybox httpd -f -h '/srv/my www'",
        "--arg", "-p", "--arg", "8080",
        "--env", "MODE=fast", "--env", "EMPTY=", "--env", "URL=http://x/?a=b",
        "--port", "8080", "--port", "9090",
        "--ready-path", "/ping",
        "--cpu", "500m", "--memory-mib", "256",
    )  # fmt: skip
    created = create_workload(runner, fleet.acme, *flags, "--json")
    assert created.exit_code == 0, created.output
    container = json.loads(created.stdout)["shape"]["container"]
    assert container["image"] == IMAGE
    assert container["command"] == ["busybox", "httpd", "-f", "-h", "/srv/my www"]
    assert container["args"] == ["-p", "8080"]
    assert container["env"] == {"MODE": "fast", "EMPTY": "", "URL": "http://x/?a=b"}
    assert [p["containerPort"] for p in container["ports"]] == [8080, 9090]
    assert container["readinessProbe"]["httpGet"] == {"path": "/ping", "port": 8080}
    assert container["resources"] == {"cpu": 0.5, "memoryMiB": 256}

    shown = run(runner, fleet.acme, "workloads", "show", "serve")
    assert shown.exit_code == 0, shown.output
    lines = [line.split(None, 1) for line in shown.stdout.splitlines() if line.strip()]
    rows = {row[0]: row[1].strip() for row in lines if len(row) == 2}
    assert rows["Image"] == IMAGE
    assert rows["Command"] == "busybox httpd -f -h '/srv/my www'"
    assert "GET /ping on 8080" in shown.stdout
    as_json = json.loads(run(runner, fleet.acme, "workloads", "show", "serve", "--json").stdout)
    assert as_json["shape"]["container"] == container


def test_a_workload_without_image_shows_no_container(runner: CliRunner, fleet: Fleet) -> None:
    created = create_workload(runner, fleet.acme, "--json")
    assert created.exit_code == 0, created.output
    assert "container" not in json.loads(created.stdout)["shape"]
    shown = run(runner, fleet.acme, "workloads", "show", "serve")
    assert shown.exit_code == 0 and "Image" not in shown.stdout


@pytest.mark.parametrize(
    ("text", "suffix"),
    [
        (
            json.dumps(
                {
                    "image": IMAGE,
                    "args": ["httpd", "-f"],
                    "ports": [{"containerPort": 8080}],
                    "readinessProbe": {"httpGet": {"path": "/ping", "port": 8080}, "periodSeconds": 2},
                }
            ),
            "json",
        ),
        (
            f"image: {IMAGE}\n"
            "args: [httpd, -f]\n"
            "ports:\n  - containerPort: 8080\n"
            "readinessProbe:\n  httpGet: {{path: /ping, port: 8080}}\n  periodSeconds: 2\n".replace(
                "{{", "{"
            ).replace("}}", "}"),
            "yaml",
        ),
    ],
)
def test_a_container_file_in_json_or_yaml(
    runner: CliRunner, fleet: Fleet, tmp_path: Path, text: str, suffix: str
) -> None:
    path = tmp_path / f"container.{suffix}"
    path.write_text(text, encoding="utf-8")
    created = create_workload(runner, fleet.acme, "--container-file", str(path), "--json")
    assert created.exit_code == 0, created.output
    container = json.loads(created.stdout)["shape"]["container"]
    assert container["image"] == IMAGE and container["args"] == ["httpd", "-f"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/ping", "port": 8080}
    assert container["readinessProbe"]["periodSeconds"] == 2


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (("--port", "8080"), ("--port", "needs --image")),
        (("--env", "A=1", "--cpu", "2"), ("--env", "--cpu", "need --image")),
        (("--image", IMAGE, "--env", "NOEQUALS"), ("--env", "NAME=VALUE", "NOEQUALS")),
        (("--image", IMAGE, "--env", "=x"), ("--env", "NAME=VALUE")),
        (("--image", IMAGE, "--ready-path", "/ping"), ("--ready-path", "--port")),
        (("--image", IMAGE, "--command", "sh -c 'x"), ("--command", "split")),
        (("--image", IMAGE, "--command", ""), ("--command", "empty")),
        (("--image", IMAGE, "--container-file", "c.json"), ("--container-file", "not both")),
        (("--container-file", "c.json", "--port", "80"), ("--container-file", "not both", "--port")),
        (("--container-file", "/nonexistent/c.json"), ("--container-file", "/nonexistent/c.json")),
    ],
)
def test_usage_errors_exit_2_naming_the_flag(
    runner: CliRunner, server: FakeServer, flags: tuple[str, ...], names: tuple[str, ...]
) -> None:
    refused = create_workload(runner, "bc_x", *flags)
    assert refused.exit_code == 2, refused.output
    assert refused.stderr.startswith("error: ")
    for name in names:
        assert name in refused.stderr
    assert server.requests == []  # refused before anything is sent


@pytest.mark.parametrize("text", ["[1, 2]", "image: [unclosed", ""])
def test_a_container_file_that_is_not_an_object_is_a_usage_error(
    runner: CliRunner, server: FakeServer, tmp_path: Path, text: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    refused = create_workload(runner, "bc_x", "--container-file", str(path))
    assert refused.exit_code == 2, refused.output
    assert "--container-file" in refused.stderr and server.requests == []


def test_a_container_file_over_the_limit_is_a_usage_error(
    runner: CliRunner, server: FakeServer, tmp_path: Path
) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"image": IMAGE, "args": ["x" * MAX_CONTAINER_FILE]}), encoding="utf-8")
    refused = create_workload(runner, "bc_x", "--container-file", str(path))
    assert refused.exit_code == 2 and f"over {MAX_CONTAINER_FILE} characters" in refused.stderr
    assert server.requests == []


def test_the_servers_refusal_names_the_flag(runner: CliRunner, fleet: Fleet, tmp_path: Path) -> None:
    bad_image = create_workload(runner, fleet.acme, "--image", "Not An Image")
    assert bad_image.exit_code == 1, bad_image.output
    assert "--image 'Not An Image' is not an image reference" in bad_image.stderr
    bad_env = create_workload(runner, fleet.acme, "--image", IMAGE, "--env", "BAD-NAME=1")
    assert bad_env.exit_code == 1 and "--env name 'BAD-NAME' is not a variable name" in bad_env.stderr
    bad_path = create_workload(runner, fleet.acme, "--image", IMAGE, "--port", "80", "--ready-path", "ping")
    assert bad_path.exit_code == 1 and "--ready-path must start with /" in bad_path.stderr
    path = tmp_path / "c.yaml"
    path.write_text("image: localhost/x:1\nentrypoint: [sh]\n", encoding="utf-8")
    unknown = create_workload(runner, fleet.acme, "--container-file", str(path))
    assert unknown.exit_code == 2, unknown.output  # the client's own model refuses the unknown field
    assert "shape.container.entrypoint" in unknown.stderr


@pytest.fixture
def endpoint(
    runner: CliRunner, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[NodeWorld, str]:
    """An endpoint `chat` of mig-7g.80gb partitions in service on node n-1, and its tenant's token."""
    live = NodeWorld(store, tmp_path)

    def connect(settings: config.Settings) -> Compute:
        return Compute(
            settings.server, settings.token, transport=live.transport(), retries=1, sleep=lambda _: None
        )

    monkeypatch.setattr(config, "connect", connect)
    daemon, _ = live.daemon("n-1")
    assert daemon.step(False)
    platform = tenant_token(store, "platform")
    made = run(
        runner, platform, "endpoints", "create", "chat", "--pool", "p1", "--partition-type", "mig-7g.80gb"
    )
    assert made.exit_code == 0, made.output
    assert daemon.step(True)
    Reconciler(store, live.clock, "r1").tick()
    return live, platform


COMPONENT = ("--endpoint", "chat", "--model", "demo", "--partition-type", "mig-7g.80gb")


def test_a_component_runs_its_image_with_sagemakers_defaults_or_its_own(
    runner: CliRunner, endpoint: tuple[NodeWorld, str], tmp_path: Path
) -> None:
    _, token = endpoint
    plain = run(runner, token, "components", "create", "plain", *COMPONENT, "--image", IMAGE, "--json")
    assert plain.exit_code == 0, plain.output
    answer = json.loads(plain.stdout)
    assert answer["container"]["image"] == IMAGE
    assert [p["containerPort"] for p in answer["container"]["ports"]] == [8080]
    assert answer["container"]["readinessProbe"]["httpGet"] == {"path": "/ping", "port": 8080}
    assert answer["invokePath"] == "/invocations"

    own = run(
        runner, token, "components", "create", "own", *COMPONENT,
        "--image", IMAGE, "--command", "busybox httpd -f -h /www", "--port", "8081",
        "--ready-path", "/ping.txt", "--invoke-path", "/cgi-bin/answer", "--env", "WHO=own",
        "--copies", "0",
    )  # fmt: skip
    assert own.exit_code == 0, own.output
    shown = run(runner, token, "components", "show", "own")
    assert shown.exit_code == 0, shown.output
    assert IMAGE in shown.stdout and "/cgi-bin/answer" in shown.stdout
    assert "busybox httpd -f -h /www" in shown.stdout and "GET /ping.txt on 8081" in shown.stdout
    kept = json.loads(run(runner, token, "components", "show", "own", "--json").stdout)
    assert kept["invokePath"] == "/cgi-bin/answer" and kept["container"]["env"] == {"WHO": "own"}

    path = tmp_path / "server.yaml"
    path.write_text(f"image: {IMAGE}\nports: [{{containerPort: 9000}}]\n", encoding="utf-8")
    filed = run(
        runner, token, "components", "create", "filed", *COMPONENT, "--container-file", str(path),
        "--copies", "0", "--json",
    )  # fmt: skip
    assert filed.exit_code == 0, filed.output
    assert json.loads(filed.stdout)["container"]["readinessProbe"]["httpGet"]["port"] == 9000

    bad = run(
        runner, token, "components", "create", "x", *COMPONENT, "--image", IMAGE, "--invoke-path", "run"
    )
    assert bad.exit_code == 1 and "--invoke-path must start with /" in bad.stderr


def test_component_usage_errors_exit_2(runner: CliRunner, server: FakeServer) -> None:
    no_image = run(runner, "bc_x", "components", "create", "x", *COMPONENT, "--invoke-path", "/run")
    assert no_image.exit_code == 2 and "--invoke-path" in no_image.stderr and "--image" in no_image.stderr
    env = run(runner, "bc_x", "components", "create", "x", *COMPONENT, "--image", IMAGE, "--env", "A")
    assert env.exit_code == 2 and "--env" in env.stderr
    port = run(runner, "bc_x", "components", "create", "x", *COMPONENT, "--port", "8080")
    assert port.exit_code == 2 and "--port" in port.stderr and "needs --image" in port.stderr
    assert server.requests == []
