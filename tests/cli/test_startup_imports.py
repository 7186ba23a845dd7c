"""Defect 15 of issue 11: a CLI call imports only what it uses.

Commands that read the catalog or talk to a server must not import server code (SQLAlchemy, Alembic,
psycopg, FastAPI, prometheus-client): each CLI call pays for its imports before it does anything.
Each command runs in a fresh interpreter, so what it imported is exactly what `sys.modules` holds
after it; the server is a mock transport behind the CLI's `config.connect` seam (no sockets). How long a call takes is
`bench/cli_startup.py`'s business, not a test's.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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
