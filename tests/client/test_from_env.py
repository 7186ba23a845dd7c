"""`Compute.from_env()`: the server and token the CLI would use, or a ValueError saying what is missing.

Each test passes its own environment mapping (never the process's), with `BC_CONFIG` pointing at a
file of the test's own, so nothing on the machine running the tests is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from better_compute.client import Compute
from better_compute.login_config import write_config
from tests.client.fakes import FakeServer


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return tmp_path / "config" / "config.json"


def _called(compute: Compute, server: FakeServer) -> tuple[str, str | None]:
    """Where one call went, and with which bearer token."""
    server.routes[("GET", "/v1/clusters")] = {"items": [], "nextCursor": None}
    with compute:
        compute.clusters.list(limit=1)
    sent = server.requests[-1]
    return str(sent.url.copy_with(query=None)), sent.headers.get("authorization")


def test_the_environment_names_server_and_token(config: Path) -> None:
    server = FakeServer()
    env = {"BC_CONFIG": str(config), "BC_SERVER": "https://bc.test", "BC_TOKEN": "env-token"}

    compute = Compute.from_env(env, transport=server.transport())

    assert _called(compute, server) == ("https://bc.test/v1/clusters", "Bearer env-token")


def test_the_login_config_is_used_when_the_environment_is_silent(config: Path) -> None:
    write_config(config, "https://file.test", "file-token")
    server = FakeServer()

    compute = Compute.from_env({"BC_CONFIG": str(config)}, transport=server.transport())

    assert _called(compute, server) == ("https://file.test/v1/clusters", "Bearer file-token")


def test_the_login_config_is_found_where_the_cli_keeps_it(tmp_path: Path) -> None:
    write_config(tmp_path / "better-compute" / "config.json", "https://xdg.test", "xdg-token")
    server = FakeServer()

    compute = Compute.from_env({"XDG_CONFIG_HOME": str(tmp_path)}, transport=server.transport())

    assert _called(compute, server) == ("https://xdg.test/v1/clusters", "Bearer xdg-token")


def test_the_environment_beats_the_login_config_each_on_its_own(config: Path) -> None:
    write_config(config, "https://file.test", "file-token")
    server = FakeServer()
    only_token = {"BC_CONFIG": str(config), "BC_TOKEN": "env-token"}

    assert _called(Compute.from_env(only_token, transport=server.transport()), server) == (
        "https://file.test/v1/clusters",
        "Bearer env-token",
    )
    both = only_token | {"BC_SERVER": "https://env.test"}
    assert _called(Compute.from_env(both, transport=server.transport()), server) == (
        "https://env.test/v1/clusters",
        "Bearer env-token",
    )


def test_the_login_token_is_never_sent_to_another_server(config: Path) -> None:
    write_config(config, "https://file.test", "file-token")
    env = {"BC_CONFIG": str(config), "BC_SERVER": "https://other.test"}

    with pytest.raises(ValueError) as refused:
        Compute.from_env(env)

    assert str(refused.value) == (
        "no token for https://other.test (from BC_SERVER): set BC_TOKEN or run "
        f"`better-compute login --server https://other.test`; the token in {config} is for "
        "https://file.test, and is sent to no other server"
    )


def test_no_server_anywhere_is_refused_naming_what_to_set(config: Path) -> None:
    with pytest.raises(ValueError) as refused:
        Compute.from_env({"BC_CONFIG": str(config), "BC_TOKEN": "env-token"})

    assert str(refused.value) == (
        "no server: set BC_SERVER (such as https://compute.example.org) or run "
        f"`better-compute login --server URL` (no login config at {config})"
    )


def test_no_token_anywhere_is_refused_naming_what_to_set(config: Path) -> None:
    with pytest.raises(ValueError) as refused:
        Compute.from_env({"BC_CONFIG": str(config), "BC_SERVER": "https://bc.test"})

    assert str(refused.value) == (
        "no token for https://bc.test (from BC_SERVER): set BC_TOKEN or run "
        "`better-compute login --server https://bc.test`"
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        pytest.param(
            "compute.example.org:8000",
            "BC_SERVER is 'compute.example.org:8000': a server URL starts with http:// or https:// "
            "(such as https://compute.example.org:8000)",
            id="no scheme",
        ),
        pytest.param(
            "https://compute.example.org/v1/",
            "BC_SERVER is 'https://compute.example.org/v1/': name the server's root, without /v1 "
            "(https://compute.example.org); the client adds /v1 to every path",
            id="ending in /v1",
        ),
    ],
)
def test_a_server_url_that_is_not_the_servers_root_gets_a_hint(config: Path, url: str, message: str) -> None:
    with pytest.raises(ValueError) as refused:
        Compute.from_env({"BC_CONFIG": str(config), "BC_SERVER": url, "BC_TOKEN": "t"})

    assert str(refused.value) == message


def test_a_malformed_login_config_is_refused_naming_the_file(config: Path) -> None:
    config.parent.mkdir(parents=True)
    config.write_text("{", encoding="utf-8")

    with pytest.raises(ValueError, match=f"{config} is not valid JSON"):
        Compute.from_env({"BC_CONFIG": str(config)})


def test_without_a_mapping_it_reads_the_process_environment(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BC_CONFIG", str(config))
    monkeypatch.setenv("BC_SERVER", "https://proc.test")
    monkeypatch.setenv("BC_TOKEN", "proc-token")
    server = FakeServer()

    assert _called(Compute.from_env(transport=server.transport()), server) == (
        "https://proc.test/v1/clusters",
        "Bearer proc-token",
    )
