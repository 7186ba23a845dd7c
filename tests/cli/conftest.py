"""CLI tests talk to a fake server through the client's transport seam; no sockets, no real config."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from better_compute.cli import config
from better_compute.client import Compute
from tests.client.fakes import FakeServer


@pytest.fixture(autouse=True)
def isolated_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config path of the test's own; no server or token from the environment."""
    for name in ("BC_SERVER", "BC_TOKEN", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "config" / "config.json"
    monkeypatch.setenv("BC_CONFIG", str(path))
    return path


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    """The fake server every command of the test reaches; `server.settings` records what each used."""
    fake = FakeServer()
    seen: list[config.Settings] = []

    def connect(settings: config.Settings) -> Compute:
        seen.append(settings)
        return Compute(
            settings.server, settings.token, transport=fake.transport(), retries=1, sleep=lambda _: None
        )

    monkeypatch.setattr(config, "connect", connect)
    fake.settings = seen  # type: ignore[attr-defined]
    return fake


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()
