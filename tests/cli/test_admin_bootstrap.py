"""`better-compute admin bootstrap`: the first admin token, printed once; a second run refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from better_compute.entrypoints.cli import app
from better_compute.service.tenancy import credentials
from better_compute.storage.store import Store


def bootstrap(runner: CliRunner, url: str, *extra: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["admin", "bootstrap", "--database-url", url, *extra])
    return result.exit_code, result.stdout, result.stderr


def test_bootstrap_prints_one_admin_token_and_refuses_a_second_run(tmp_path: Path) -> None:
    runner = CliRunner()
    url = f"sqlite:///{tmp_path / 'bc.db'}"
    code, out, _ = bootstrap(runner, url, "--create")
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
    result = CliRunner().invoke(app, ["admin", "bootstrap", "--create"])
    assert result.exit_code == 0
    assert (tmp_path / "env.db").exists()


def test_bootstrap_names_the_database_it_used(tmp_path: Path) -> None:
    """Defect 6 of issue 11: the operator sees which database got the token."""
    url = f"sqlite:///{tmp_path / 'bc.db'}"
    code, out, _ = bootstrap(CliRunner(), url, "--create")
    assert code == 0
    assert f"in the SQLite database {tmp_path / 'bc.db'};" in out

    code, _, err = bootstrap(CliRunner(), url)
    assert code == 1
    assert f"(in the SQLite database {tmp_path / 'bc.db'})" in err


def test_bootstrap_refuses_to_create_a_sqlite_database_unless_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect 6 of issue 11: run in another directory, bootstrap used to make a new, empty
    ./better-compute.db and print a token no server accepts."""
    monkeypatch.delenv("BC_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)

    result = CliRunner().invoke(app, ["admin", "bootstrap"])

    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"error: the SQLite database {tmp_path / 'better-compute.db'} does not exist (working directory:"
        f" {tmp_path}): pass --create to create it, or give the server's database with --database-url"
        " (or BC_DATABASE_URL)\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_bootstrap_uses_an_existing_sqlite_database_without_create(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bc.db'}"
    Store.open(url).close()  # as `serve` (make run) leaves it

    code, out, _ = bootstrap(CliRunner(), url)

    assert code == 0
    assert out.strip().splitlines()[-1].startswith("bc_")
