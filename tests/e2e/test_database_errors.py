"""Defects 2 and 13 of issue 11, as a user meets them in a shell: a PostgreSQL database that does not
exist, a PostgreSQL port nobody listens on, and `serve` on a port that is taken are each one
`error: ...` line with the fix, never a traceback."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import pytest

from tests.e2e.conftest import free_port, run_cli

COMMANDS = [["serve"], ["admin", "bootstrap"], ["migrate"]]


@pytest.mark.postgres
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_postgres_database_that_does_not_exist(command: list[str], postgres_url: str, tmp_path: Path) -> None:
    base, _, _ = postgres_url.rpartition("/")
    name = f"bc_missing_{uuid.uuid4().hex[:8]}"
    server = base.rpartition("@")[2]
    host, _, port = server.partition(":")

    done = run_cli([*command, "--database-url", f"{base}/{name}"], tmp_path)

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f'error: database "{name}" does not exist on ')
    assert f"create it (createdb -h {host} -p {port or 5432}" in done.stderr
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_postgres_port_that_refuses(command: list[str], tmp_path: Path) -> None:
    port = free_port()  # nobody listens on it

    done = run_cli([*command, "--database-url", f"postgresql://postgres@127.0.0.1:{port}/bc"], tmp_path)

    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: no PostgreSQL server answers at postgres@127.0.0.1:{port} (")
    assert done.stderr.rstrip().endswith(
        "start it, or fix the host and port in --database-url (or BC_DATABASE_URL)"
    )


def test_serve_on_a_busy_port_says_which_port_to_use(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        done = run_cli(
            ["serve", "--database-url", f"sqlite:///{tmp_path / 'bc.db'}", "--port", str(port)], tmp_path
        )

    assert done.returncode == 2
    assert done.stderr == (
        f"error: cannot listen on 127.0.0.1:{port}: address already in use; pass another --port"
        f" (make run: use PORT={port + 1} make run) and point the CLI at it with"
        f" BC_SERVER=http://127.0.0.1:{port + 1}\n"
    )
    assert not (tmp_path / "bc.db").exists()  # refused before the database was made
