"""The `better-compute` Typer application: commands a user runs from a shell.

Commands that talk to a server do so only through `better_compute.client`; commands that answer from
the catalog (gpus, layouts, advise) use the pure domain directly. Server-side commands (`serve`,
`admin bootstrap`) are attached by the composition root in `entrypoints/cli.py`.
"""

from __future__ import annotations

import typer

from better_compute.cli.errors import CliGroup
from better_compute.cli.version import VersionOption

app = typer.Typer(
    name="better-compute",
    cls=CliGroup,
    help="GPU fleet control plane: book whole GPUs, MIG instances and shared slots as atoms.",
    no_args_is_help=True,
    # `--install-completion` / `--show-completion` for bash, zsh, fish and PowerShell (docs/cli.md).
    add_completion=True,
)


@app.callback()
def _root(version: VersionOption = False) -> None:
    """GPU fleet control plane: book whole GPUs, MIG instances and shared slots as atoms."""


admin_app = typer.Typer(help="Fleet administration.", no_args_is_help=True)
app.add_typer(admin_app, name="admin")

# Commands register themselves on `app` when imported.
from better_compute.cli import (  # noqa: E402, F401
    api_cmd,
    billing_cmd,
    capacity_cmd,
    doctor_cmd,
    endpoints_cmd,
    events_cmd,
    login_cmd,
    node_show_cmd,
    partitions_cmd,
    reservations_cmd,
    resources_cmd,
    tenants_update_cmd,
    usage_report_cmd,
    wait_cmd,
    workloads_cmd,
)
from better_compute.cli import catalog as _catalog  # noqa: E402, F401  (gpus, layouts, advise)
