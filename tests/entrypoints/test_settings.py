"""Settings: each is an option of `serve`, else a `BC_*` variable, else its default; read once."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from better_compute.entrypoints.cli import app
from better_compute.entrypoints.server_commands import read_settings
from better_compute.settings import Settings

VARIABLES = ("BC_DATABASE_URL", "BC_MAX_BODY_BYTES", "BC_TIMEOUT_REQUEST", "BC_TIMEOUT_KEEP_ALIVE")


@pytest.fixture(autouse=True)
def no_settings_from_the_user(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_without_options_or_variables_the_defaults_hold() -> None:
    settings = read_settings()
    assert settings.database_url == "sqlite:///better-compute.db"
    assert (settings.max_body_bytes, settings.timeout_request, settings.timeout_keep_alive) == (
        1_048_576,
        30.0,
        5,
    )


def test_a_variable_sets_a_setting_and_an_option_wins_over_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BC_MAX_BODY_BYTES", "2048")
    monkeypatch.setenv("BC_TIMEOUT_REQUEST", "7.5")
    assert (read_settings().max_body_bytes, read_settings().timeout_request) == (2048, 7.5)
    assert read_settings(max_body_bytes=100, timeout_request=None).max_body_bytes == 100
    assert read_settings(max_body_bytes=100, timeout_request=None).timeout_request == 7.5


def test_a_worker_reads_back_the_settings_its_parent_serves_with(monkeypatch: pytest.MonkeyPatch) -> None:
    parent = read_settings(
        database_url="postgresql://compute@db/compute", max_body_bytes=4096, timeout_request=3
    )
    for name, value in parent.environment().items():
        monkeypatch.setenv(name, value)
    assert Settings() == parent


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        pytest.param(
            "BC_MAX_BODY_BYTES",
            "lots",
            "max_body_bytes (BC_MAX_BODY_BYTES): Input should be a valid integer",
            id="a-body-limit-that-is-no-number",
        ),
        pytest.param(
            "BC_TIMEOUT_REQUEST",
            "0",
            "timeout_request (BC_TIMEOUT_REQUEST): Input should be greater than 0",
            id="a-request-timeout-of-zero",
        ),
    ],
)
def test_serve_refuses_a_setting_that_is_not_valid_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    monkeypatch.setenv("BC_DATABASE_URL", f"sqlite:///{tmp_path}/bc.db")
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 2
    assert f"error: invalid setting: {message}" in result.stderr
