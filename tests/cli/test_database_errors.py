"""Defect 2 of issue 11: a database URL that cannot work is one `error: ...` line with the fix and
exit status 2, from every command that opens the database, never a traceback.

The PostgreSQL cases (a missing database, a refused port) need a server to ask: they are in
tests/e2e/test_database_errors.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from better_compute.entrypoints.cli import app

COMMANDS = [["serve"], ["admin", "bootstrap"], ["migrate"]]
EXAMPLES = "use sqlite:///PATH or postgresql://USER@HOST:PORT/DATABASE"


def run(command: list[str], url: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [*command, "--database-url", url])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_unsupported_database_scheme_is_one_line(command: list[str]) -> None:
    code, out, err = run(command, "mysql://user:secret@db.example/compute")

    assert code == 2
    assert out == ""
    assert err == (
        "error: unsupported database 'mysql' in mysql://user:***@db.example/compute: better-compute"
        f" runs on SQLite and on PostgreSQL with psycopg 3; {EXAMPLES}\n"
    )


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_text_that_is_no_url_is_one_line(command: list[str]) -> None:
    code, _, err = run(command, "better-compute.db")

    assert code == 2
    assert err == f"error: 'better-compute.db' is not a database URL: {EXAMPLES}\n"


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_sqlite_file_in_a_missing_directory_is_one_line(command: list[str], tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir"

    code, _, err = run(command, f"sqlite:///{missing / 'bc.db'}")

    assert code == 2
    assert err == (
        f"error: cannot create the SQLite database {missing / 'bc.db'}: the directory {missing} does not"
        " exist; create it, or give another --database-url (or BC_DATABASE_URL)\n"
    )


def test_migrate_names_the_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bc.db'}"

    refused = run(["migrate"], url)
    created = CliRunner().invoke(app, ["migrate", "--database-url", url, "--create"])
    again = run(["migrate"], url)

    assert refused[0] == 2 and "pass --create" in refused[2]
    assert created.exit_code == 0, created.output
    assert created.stdout == f"migrated the SQLite database {tmp_path / 'bc.db'} to the newest schema\n"
    assert again[0] == 0
