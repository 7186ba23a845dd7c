"""Defect 15 of issue 11: a CLI call imports only what it uses.

Commands that read the catalog or talk to a server must not import server code (SQLAlchemy, Alembic,
psycopg, FastAPI, prometheus-client): each CLI call pays for its imports before it does anything.
Each command runs in a fresh interpreter, so what it imported is exactly what `sys.modules` holds
after it; the server is a mock transport behind the CLI's `config.connect` seam (no sockets). How long a call takes is
`bench/cli_startup.py`'s business, not a test's.

Issue 39, item 10: the root's `--help` and `gpus --json` import none of the command modules that talk to
a server (nor the wire models), because the root group imports a top-level command's module only when it
runs (`cli/lazy.py`); the listing the root prints from `cli/app.py`'s `COMMANDS` is the one the commands'
own help gives.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from better_compute.cli.app import COMMANDS, ORDER, app, load_all
from better_compute.entrypoints import server_commands  # noqa: F401  (serve, migrate, admin, ...)

SERVER_MODULES = ("sqlalchemy", "alembic", "psycopg", "fastapi", "uvicorn", "prometheus_client")
OUR_SERVER_PACKAGES = ("better_compute.api", "better_compute.service", "better_compute.storage")

PROBE = """
import contextlib, io, json, sys

from better_compute.entrypoints.cli import main

if sys.argv[2] == "server":
    from better_compute.cli import config


    def connect(settings):
        import httpx

        from better_compute.client import Compute

        page = httpx.Response(200, json={"items": [], "nextCursor": None})
        transport = httpx.MockTransport(lambda request: page)
        return Compute(settings.server, settings.token, transport=transport)


    config.connect = connect
sys.argv = ["better-compute", *json.loads(sys.argv[1])]
status = 0
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main()
    except SystemExit as exc:
        status = exc.code or 0
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""

CATALOG_COMMANDS = [
    ["gpus", "--json"],
    ["layouts", "list", "--gpu", "H100-80GB"],
    ["layouts", "validate", "--gpu", "H100-80GB", "mixed:3g.40gb+2x2g.20gb"],
    ["advise", "--model", "Llama-3.1-8B", "--context", "8000"],
]
SERVER_COMMANDS = [
    ["api", "clusters.list", "--token", "bc_x"],
    ["reservations", "list", "--token", "bc_x"],
    ["events", "--token", "bc_x"],
    ["usage", "export", "--from", "2030-01-01", "--to", "2030-02-01", "--token", "bc_x"],
]


def _imported(args: list[str]) -> tuple[int, list[str]]:
    kind = "server" if args in SERVER_COMMANDS else "catalog"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args), kind], capture_output=True, text=True, check=True
    )
    report = json.loads(done.stdout.splitlines()[-1])
    return report["status"], report["modules"]


def _server_code(modules: list[str]) -> list[str]:
    return [
        name
        for name in modules
        if name.split(".")[0] in SERVER_MODULES
        or any(name == p or name.startswith(p + ".") for p in OUR_SERVER_PACKAGES)
    ]


@pytest.mark.parametrize("args", CATALOG_COMMANDS + SERVER_COMMANDS, ids=" ".join)
def test_cli_commands_import_no_server_code(args: list[str]) -> None:
    status, modules = _imported(args)

    assert status == 0
    assert _server_code(modules) == []


@pytest.mark.parametrize("args", CATALOG_COMMANDS, ids=" ".join)
def test_catalog_commands_import_neither_the_client_nor_settings(args: list[str]) -> None:
    status, modules = _imported(args)

    assert status == 0
    loaded = set(modules)
    assert {
        "httpx",
        "pydantic_settings",
        "better_compute.client",
        "better_compute.settings",
    } & loaded == set()


COMMAND_MODULES = tuple(
    f"better_compute.cli.{module}" for module in sorted({m for e in COMMANDS.values() for m in e.modules})
)


def _command_modules(modules: list[str]) -> list[str]:
    return [name for name in modules if name in COMMAND_MODULES]


def _wire_models(modules: list[str]) -> list[str]:
    """The wire models (pydantic classes); `better_compute.wire.codes`, the error codes, is plain."""
    return [
        name
        for name in modules
        if name.startswith("better_compute.wire.") and name != "better_compute.wire.codes"
    ]


def test_the_root_help_imports_no_command_module_nor_pydantic() -> None:
    status, modules = _imported(["--help"])

    assert status == 0
    assert _command_modules(modules) == []
    assert _wire_models(modules) == []
    assert [name for name in modules if name.split(".")[0] in ("pydantic", "pydantic_core", "httpx")] == []


def test_gpus_json_imports_only_the_catalog_command_module_and_no_pydantic() -> None:
    """Not even through typer, which built a pydantic adapter for every absent option (`--help`)."""
    status, modules = _imported(["gpus", "--json"])

    assert status == 0
    assert _command_modules(modules) == ["better_compute.cli.catalog"]
    assert _wire_models(modules) == []
    assert [name for name in modules if name.split(".")[0] in ("pydantic", "pydantic_core", "httpx")] == []
    assert "better_compute.cli.endpoint_advice" not in modules  # only `advise --endpoint` needs it


def _help(first: str, args: list[str]) -> str:
    """`better-compute ARGS` at 80 columns in a fresh interpreter, after running `first`."""
    probe = f"{first}; from better_compute.entrypoints.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", probe, *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "80"},
    )
    return done.stdout


@pytest.mark.parametrize("args", [["--help"], ["admin", "--help"]], ids=" ".join)
def test_the_root_listing_is_the_one_the_commands_give(args: list[str]) -> None:
    """The root's `--help` printed from `COMMANDS` (nothing imported) is the `--help` printed with every
    command module imported first: same names, order and summaries, at 80 columns. `admin` is built up
    front, so a command module that adds to it would be missing until imported: it must not."""
    lazy = _help("pass", args)
    eager = _help("from better_compute.cli.app import load_all; load_all()", args)

    assert lazy == eager
    assert "│ pools " in lazy or "│ bootstrap " in lazy


def test_every_top_level_command_has_an_entry_with_its_own_summary() -> None:
    """A top-level command registered by a module but missing from `COMMANDS` (or a summary that no
    longer matches its help) is named here, with the text to put in `cli/app.py`."""
    load_all()
    root = typer.main.get_command(app)
    assert isinstance(root, typer.core.TyperGroup)
    with typer.Context(root) as ctx:
        listed = root.list_commands(ctx)
        stale = {}
        for name in listed:
            command = root.get_command(ctx, name)
            assert command is not None
            summary = inspect.cleandoc(command.short_help or command.help or "").split("\n\n")[0].strip()
            if name in COMMANDS and COMMANDS[name].summary != summary:
                stale[name] = summary
    assert sorted(set(listed) - set(ORDER)) == [], (
        "add these to COMMANDS in cli/app.py (to ORDER, if the composition root registers them)"
    )
    assert stale == {}, "COMMANDS in cli/app.py: put these summaries"
    assert listed == ORDER


def test_a_mistyped_command_is_still_offered_the_close_name(runner: CliRunner) -> None:
    result = runner.invoke(app, ["pool", "list"], terminal_width=80)

    assert result.exit_code == 2
    assert "Did you mean 'pools'?" in result.output
