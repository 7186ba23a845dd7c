"""The database URL from a file: `BC_DATABASE_URL_FILE`, or the systemd credential `database-url`
(`LoadCredential=`, deploy/better-compute.service), so that a URL holding a password is on no
command line. `--database-url` wins; two of the other sources are refused; a file that cannot give a
URL is one line naming it, never a traceback, and never quotes what the file holds."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from better_compute.entrypoints import database
from better_compute.entrypoints.cli import app
from better_compute.entrypoints.server_commands import child_environment, read_settings

SOURCES = ("BC_DATABASE_URL", "BC_DATABASE_URL_FILE", "CREDENTIALS_DIRECTORY")
NOBODY = 65534


@pytest.fixture(autouse=True)
def no_url_from_the_user(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SOURCES:
        monkeypatch.delenv(name, raising=False)


def sqlite(tmp_path: Path, name: str) -> str:
    return f"sqlite:///{tmp_path / name}"


def migrate(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["migrate", "--create", *args])
    return result.exit_code, result.stdout, result.stderr


def credential(tmp_path: Path, text: str) -> Path:
    directory = tmp_path / "credentials"
    directory.mkdir()
    (directory / "database-url").write_text(text)
    return directory


def test_a_url_in_the_file_bc_database_url_file_names_is_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "url").write_text(f"  {sqlite(tmp_path, 'from-file.db')}\n\n")
    monkeypatch.setenv("BC_DATABASE_URL_FILE", str(tmp_path / "url"))
    status, out, err = migrate()
    assert (status, err) == (0, "")
    assert out == f"migrated the SQLite database {tmp_path / 'from-file.db'} to the newest schema\n"


def test_the_systemd_credential_database_url_is_read_by_itself(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(credential(tmp_path, sqlite(tmp_path, "cred.db"))))
    status, out, _ = migrate()
    assert status == 0
    assert out == f"migrated the SQLite database {tmp_path / 'cred.db'} to the newest schema\n"


def test_a_credentials_directory_without_the_url_leaves_the_other_sources(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A unit may load other credentials: only `database-url` is the URL."""
    (tmp_path / "credentials").mkdir()
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path / "credentials"))
    monkeypatch.setenv("BC_DATABASE_URL", sqlite(tmp_path, "variable.db"))
    assert read_settings(database_url=None).database_url == sqlite(tmp_path, "variable.db")


def test_the_flag_wins_over_a_file_a_credential_and_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "url").write_text(sqlite(tmp_path, "file.db"))
    monkeypatch.setenv("BC_DATABASE_URL_FILE", str(tmp_path / "url"))
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(credential(tmp_path, sqlite(tmp_path, "cred.db"))))
    monkeypatch.setenv("BC_DATABASE_URL", sqlite(tmp_path, "variable.db"))
    status, out, _ = migrate("--database-url", sqlite(tmp_path, "flag.db"))
    assert status == 0
    assert out == f"migrated the SQLite database {tmp_path / 'flag.db'} to the newest schema\n"


def test_a_url_given_twice_is_refused_naming_both(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    directory = credential(tmp_path, sqlite(tmp_path, "cred.db"))
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(directory))
    monkeypatch.setenv("BC_DATABASE_URL", sqlite(tmp_path, "variable.db"))
    status, _, err = migrate()
    assert status == 2
    assert err == (
        "error: the database URL is given twice, in BC_DATABASE_URL and in the credential database-url"
        f" ({directory / 'database-url'}): keep one (or pass --database-url, which wins)\n"
    )
    assert not (tmp_path / "cred.db").exists() and not (tmp_path / "variable.db").exists()


@pytest.mark.parametrize("command", [["serve"], ["migrate"], ["admin", "bootstrap"]])
def test_a_missing_url_file_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: list[str]
) -> None:
    monkeypatch.setenv("BC_DATABASE_URL_FILE", str(tmp_path / "nowhere"))
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: cannot read the database URL from {tmp_path / 'nowhere'} (named by BC_DATABASE_URL_FILE):"
        " no such file or directory; write the database URL into it (mode 0600), or name another file\n"
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param(
            "\n  \n",
            "is empty; write the database URL into it"
            " (sqlite:///PATH or postgresql://USER@HOST:PORT/DATABASE)",
            id="empty",
        ),
        pytest.param(
            "sqlite:///a.db\nsqlite:///b.db\n",
            "holds 2 lines; it should hold one, the database URL",
            id="two-lines",
        ),
        pytest.param(
            "hunter2-the-password\n",
            "does not hold a database URL: write one into it"
            " (sqlite:///PATH or postgresql://USER@HOST:PORT/DATABASE)",
            id="no-url",
        ),
    ],
)
def test_a_credential_that_holds_no_url_is_one_line_that_never_quotes_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str, problem: str
) -> None:
    directory = credential(tmp_path, text)
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(directory))
    status, _, err = migrate()
    assert status == 2
    assert err == f"error: {directory / 'database-url'} (the credential database-url) {problem}\n"
    assert "hunter2" not in err


def test_a_file_that_never_ends_is_refused_after_a_bounded_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BC_DATABASE_URL_FILE", "/dev/zero")
    status, _, err = migrate()
    assert status == 2
    assert err == (
        "error: /dev/zero (named by BC_DATABASE_URL_FILE) is larger than 65536 bytes;"
        " it should hold one line, the database URL\n"
    )


def test_an_empty_bc_database_url_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BC_DATABASE_URL_FILE", "")
    status, _, err = migrate()
    assert (status, err) == (
        2,
        "error: BC_DATABASE_URL_FILE is empty: set it to the file that holds the database URL\n",
    )


def as_nobody(call: Callable[[], str | None]) -> str:
    """What `call` returns, or the message of the `Unusable` it raises, run with nobody's uid: root
    may read any file, so an unreadable one is only unreadable to another user (a forked child)."""
    if os.geteuid() != 0:
        try:
            return str(call())
        except database.Unusable as exc:
            return exc.message
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                said = str(call())
            except database.Unusable as exc:
                said = exc.message
            os.write(writer, said.encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(child, 0)
    return said


def test_an_unreadable_url_file_names_it_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "database-url"
    path.write_text("postgresql://compute:pw@db/compute\n")
    path.chmod(0o600)  # root's (or this user's), as the credential's source is
    tmp_path.chmod(0o755)
    said = as_nobody(lambda: database.given_url(None, {"BC_DATABASE_URL_FILE": str(path)}))
    assert said == (
        f"cannot read the database URL from {path} (named by BC_DATABASE_URL_FILE): permission denied;"
        " make it readable by the user that runs better-compute (owned by it, mode 0600), or let systemd"
        " read it: LoadCredential=database-url:PATH"
    )


def test_a_credentials_directory_it_may_not_enter_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """Under systemd without a mount namespace of its own, a credentials directory the service user
    could not enter once made `serve` die of a PermissionError traceback while looking for the file."""
    directory = credential(tmp_path, "sqlite:///x.db")
    directory.chmod(0o700)
    tmp_path.chmod(0o755)
    said = as_nobody(lambda: database.given_url(None, {"CREDENTIALS_DIRECTORY": str(directory)}))
    assert said.startswith(
        f"cannot read the database URL from {directory / 'database-url'} (the credential database-url):"
        " permission denied;"
    )


def test_the_server_hands_its_children_the_url_it_chose_not_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The reconciler child reads its settings from the environment: it must open the database the
    server opened (here the flag's, over a credential) and not find the URL given twice."""
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(credential(tmp_path, sqlite(tmp_path, "cred.db"))))
    parent = read_settings(database_url=sqlite(tmp_path, "flag.db"))
    environment = child_environment(parent)
    assert "CREDENTIALS_DIRECTORY" not in environment
    assert "BC_DATABASE_URL_FILE" not in environment
    for name in SOURCES:
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert read_settings(database_url=None).database_url == sqlite(tmp_path, "flag.db")
