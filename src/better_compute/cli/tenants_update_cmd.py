"""`better-compute tenants update ID --name NAME`: change a tenant's display name (admin).

A tenant's id is what every reservation, quota row, bill and event names, so it never changes; its
name is the one field `tenants.update` takes (`tenant.updated` is logged with the name before and
after)."""

from __future__ import annotations

from typing import Annotated

import typer

from better_compute.cli import config
from better_compute.cli.calls import JsonFlag, call
from better_compute.cli.output import print_json, stdout
from better_compute.cli.resources_cmd import tenants_app


@tenants_app.command("update")
def tenants_update(
    tenant_id: Annotated[str, typer.Argument(metavar="ID")],
    name: Annotated[str, typer.Option("--name", help="The tenant's new display name.", show_default=False)],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """Change a tenant's display name (admin); its id never changes."""
    updated = call(
        server, token, as_json, lambda c: c.tenants.update(tenant_id, name=name), {"name": "--name"}
    )
    if as_json:
        print_json(updated.model_dump(mode="json", by_alias=True))
        return
    stdout().print(f"tenant {updated.id} is now named {updated.name!r}", markup=False)
