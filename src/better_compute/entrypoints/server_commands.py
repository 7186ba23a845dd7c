"""`better-compute serve` and `better-compute admin ...`: commands that open the database themselves."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from better_compute.api.limits import DEFAULT_MAX_BODY_BYTES, DEFAULT_REQUEST_TIMEOUT
from better_compute.cli.app import admin_app, app
from better_compute.domain.errors import DomainError
from better_compute.storage.store import Store

DEFAULT_DATABASE_URL = "sqlite:///better-compute.db"
DEFAULT_TIMEOUT_KEEP_ALIVE = 5
"""Seconds, uvicorn's own default: time for a client's next request on the same connection, and
short enough that idle connections do not pile up."""


def database_url(option: str | None) -> str:
    return option or os.environ.get("BC_DATABASE_URL") or DEFAULT_DATABASE_URL


DatabaseOpt = Annotated[
    str | None,
    typer.Option(
        "--database-url", help="SQLAlchemy or libpq URL (default: $BC_DATABASE_URL or ./better-compute.db)"
    ),
]


@app.command()
def serve(
    database_url_opt: DatabaseOpt = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    fleet: Annotated[Path | None, typer.Option(help="Fleet file (YAML) to load before serving.")] = None,
    workers: Annotated[
        int,
        typer.Option(
            min=1, max=64, help="Server processes; more use more cores (each keeps its own caches)."
        ),
    ] = 1,
    access_log: Annotated[bool, typer.Option(help="Log every request.")] = True,
    max_body_bytes: Annotated[
        int, typer.Option(min=1, help="Largest request body taken, in bytes; a larger one is refused (413).")
    ] = DEFAULT_MAX_BODY_BYTES,
    timeout_keep_alive: Annotated[
        int, typer.Option(min=1, help="Seconds an idle connection (no request under way) is kept open.")
    ] = DEFAULT_TIMEOUT_KEEP_ALIVE,
    timeout_request: Annotated[
        int,
        typer.Option(
            min=1,
            help="Seconds a client has to send a request's head, and each next part of its body (408).",
        ),
    ] = int(DEFAULT_REQUEST_TIMEOUT),
) -> None:
    """Migrate the database, load a fleet file if given, and serve the HTTP API until Ctrl-C."""
    import uvicorn

    from better_compute.api.app import create_app
    from better_compute.entrypoints.fleet import load_fleet, read_fleet
    from better_compute.entrypoints.http_protocol import timed_protocol

    url = database_url(database_url_opt)
    store = Store.open(url)
    if fleet is not None:
        try:
            count = load_fleet(store, read_fleet(fleet), datetime.now(UTC))
        except DomainError as exc:
            typer.echo(f"error: {exc.message}", err=True)
            raise typer.Exit(2) from None
        typer.echo(f"loaded {fleet}: {count} simulated nodes")
    typer.echo(f"serving on http://{host}:{port} (database: {store.dialect}); docs at /docs")
    connections: dict[str, Any] = {
        "http": timed_protocol(timeout_request),
        "timeout_keep_alive": timeout_keep_alive,
    }
    if workers == 1:
        app = create_app(store, max_body_bytes=max_body_bytes, request_timeout=timeout_request)
        uvicorn.run(app, host=host, port=port, log_level="info", access_log=access_log, **connections)
        return
    store.close()
    # Worker processes build their app from the environment (entrypoints/asgi.py).
    os.environ["BC_DATABASE_URL"] = url
    os.environ["BC_MAX_BODY_BYTES"] = str(max_body_bytes)
    os.environ["BC_TIMEOUT_REQUEST"] = str(timeout_request)
    uvicorn.run(
        "better_compute.entrypoints.asgi:create",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="info",
        access_log=access_log,
        **connections,
    )


@admin_app.command()
def bootstrap(
    database_url_opt: DatabaseOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Add another admin token even though one already exists.")
    ] = False,
) -> None:
    """Migrate the database and create the first fleet-admin token, printed once on the last line.

    Only the token's hash is stored, so keep the printed token: it cannot be shown again. A second
    run refuses while an admin credential exists, unless --force.
    """
    from better_compute.service import credentials

    store = Store.open(database_url(database_url_opt))
    try:
        issued = credentials.bootstrap_admin(store, datetime.now(UTC), force=force)
    except DomainError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from None
    finally:
        store.close()
    typer.echo(f"created fleet-admin credential {issued.credential.id}; this token is shown only once:")
    typer.echo(issued.token)


__all__ = ["admin_app", "bootstrap", "serve"]
