"""`better-compute serve` and `better-compute admin ...`: commands that open the database themselves."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from better_compute.cli.app import admin_app, app
from better_compute.domain.errors import DomainError
from better_compute.settings import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_TIMEOUT_KEEP_ALIVE,
    DEFAULT_TIMEOUT_REQUEST,
    Settings,
)


def read_settings(**options: Any) -> Settings:
    """The settings: each option given on the command line, else its `BC_*` variable, else its
    default. A value that is not valid stops the command with a message naming the setting."""
    try:
        return Settings(**{name: value for name, value in options.items() if value is not None})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])} (BC_{str(e['loc'][0]).upper()}): {e['msg']}"
            for e in exc.errors()
        )
        typer.echo(f"error: invalid setting: {problems}", err=True)
        raise typer.Exit(2) from None


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
        int | None,
        typer.Option(
            min=1,
            help="Largest request body taken, in bytes; a larger one is refused (413)."
            f" [default: $BC_MAX_BODY_BYTES or {DEFAULT_MAX_BODY_BYTES}]",
        ),
    ] = None,
    timeout_keep_alive: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Seconds an idle connection (no request under way) is kept open."
            f" [default: $BC_TIMEOUT_KEEP_ALIVE or {DEFAULT_TIMEOUT_KEEP_ALIVE}]",
        ),
    ] = None,
    timeout_request: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Seconds a client has to send a request's head, and each next part of its body (408)."
            f" [default: $BC_TIMEOUT_REQUEST or {DEFAULT_TIMEOUT_REQUEST:g}]",
        ),
    ] = None,
) -> None:
    """Migrate the database, load a fleet file if given, and serve the HTTP API until Ctrl-C."""
    import uvicorn
    from rich.console import Console

    from better_compute.entrypoints import server
    from better_compute.entrypoints.fleet import fleet_progress, load_fleet, read_fleet
    from better_compute.entrypoints.http_protocol import timed_protocol

    settings = read_settings(
        database_url=database_url_opt,
        max_body_bytes=max_body_bytes,
        timeout_keep_alive=timeout_keep_alive,
        timeout_request=timeout_request,
    )
    connections: dict[str, Any] = {
        "http": timed_protocol(settings.timeout_request),
        "timeout_keep_alive": settings.timeout_keep_alive,
    }
    with server.running(settings) as services:
        if fleet is not None:
            try:
                spec = read_fleet(fleet)
                with fleet_progress(Console(stderr=True)) as progress:
                    count = load_fleet(services.store, spec, services.clock(), progress=progress)
            except DomainError as exc:
                typer.echo(f"error: {exc.message}", err=True)
                raise typer.Exit(2) from None
            typer.echo(f"loaded {fleet}: {count} simulated nodes")
        typer.echo(f"serving on http://{host}:{port} (database: {services.store.dialect}); docs at /docs")
        if workers == 1:
            app_ = server.build_app(services, settings)
            uvicorn.run(app_, host=host, port=port, log_level="info", access_log=access_log, **connections)
            return
    # Worker processes build their own services from the same settings (entrypoints/asgi.py).
    os.environ.update(settings.environment())
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
    from better_compute.entrypoints import server
    from better_compute.service import credentials

    with server.running(read_settings(database_url=database_url_opt)) as services:
        try:
            issued = credentials.bootstrap_admin(
                services.store, services.clock(), new_id=services.ids.credential, force=force
            )
        except DomainError as exc:
            typer.echo(f"error: {exc.message}", err=True)
            raise typer.Exit(1) from None
    typer.echo(f"created fleet-admin credential {issued.credential.id}; this token is shown only once:")
    typer.echo(issued.token)


__all__ = ["admin_app", "bootstrap", "serve"]
