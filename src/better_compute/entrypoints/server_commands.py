"""`better-compute serve` and `better-compute admin ...`: commands that open the database themselves."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from better_compute.cli.app import admin_app, app
from better_compute.domain.errors import DomainError
from better_compute.storage.store import Store

DEFAULT_DATABASE_URL = "sqlite:///better-compute.db"


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
) -> None:
    """Migrate the database, load a fleet file if given, and serve the HTTP API until Ctrl-C."""
    import uvicorn

    from better_compute.api.app import create_app
    from better_compute.entrypoints.fleet import load_fleet, read_fleet

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
    if workers == 1:
        uvicorn.run(create_app(store), host=host, port=port, log_level="info", access_log=access_log)
        return
    store.close()
    os.environ["BC_DATABASE_URL"] = url
    uvicorn.run(
        "better_compute.entrypoints.asgi:create",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="info",
        access_log=access_log,
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
    typer.echo(f"created fleet-admin credential {issued['id']}; this token is shown only once:")
    typer.echo(issued["token"])


__all__ = ["admin_app", "bootstrap", "serve"]
