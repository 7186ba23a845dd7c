"""`better-compute admin bootstrap`: the first admin token, printed once; a second run refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from better_compute.entrypoints.cli import app
from better_compute.service import credentials
from better_compute.storage.store import Store


def bootstrap(runner: CliRunner, url: str, *extra: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["admin", "bootstrap", "--database-url", url, *extra])
    return result.exit_code, result.stdout, result.stderr


def test_bootstrap_prints_one_admin_token_and_refuses_a_second_run(tmp_path: Path) -> None:
    runner = CliRunner()
    url = f"sqlite:///{tmp_path / 'bc.db'}"
    code, out, _ = bootstrap(runner, url)
    assert code == 0
    token = out.strip().splitlines()[-1]
    assert token.startswith("bc_") and out.count(token) == 1
    store = Store.open(url)
    try:
        principal = credentials.authenticate(store, token)
        assert principal.is_admin and principal.tenant_id is None
    finally:
        store.close()

    code, out, err = bootstrap(runner, url)
    assert code == 1
    assert "bc_" not in out
    assert "already exist" in err and "--force" in err

    code, out, _ = bootstrap(runner, url, "--force")
    assert code == 0
    second = out.strip().splitlines()[-1]
    assert second.startswith("bc_") and second != token
    store = Store.open(url)
    try:
        assert credentials.live_admins(store) == 2
    finally:
        store.close()


def test_bootstrap_reads_the_database_url_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BC_DATABASE_URL", f"sqlite:///{tmp_path / 'env.db'}")
    result = CliRunner().invoke(app, ["admin", "bootstrap"])
    assert result.exit_code == 0
    assert (tmp_path / "env.db").exists()
