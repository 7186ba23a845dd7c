"""The `better-compute` Typer application: commands a user runs from a shell.

Commands that talk to a server do so only through `better_compute.client`; commands that answer from
the catalog (gpus, layouts, advise) use the pure domain directly. Server-side commands (`serve`,
`admin bootstrap`) are attached by the composition root in `entrypoints/cli.py`.

Each command module registers its commands on `app` when imported (`@app.command`, `app.add_typer`), as
in any Typer application, but it is imported only when one of its commands runs: `COMMANDS` names each
top-level command's modules and its help summary, so `--help` and `gpus --json` start without importing
every module's wire models and tables (`cli/lazy.py` says how). A new top-level command gets a line in
`COMMANDS`; a new sub-command of an existing group needs none.
"""

from __future__ import annotations

import typer

from better_compute.cli.lazy import Lazy, lazy_group
from better_compute.cli.version import VersionOption

# Top-level commands in the root's listing order, with the first paragraph of each one's help (the
# listing shows it without importing the module) and the modules under better_compute.cli that register
# it. `serve`, `migrate`, `reconcile` and `admin` are registered up front by the composition root.
COMMANDS: dict[str, Lazy] = {
    "api": Lazy(
        "Call an API method; print its JSON answer, or its error object on stderr (exit status 1 for\n"
        "a refusal, 2 for a command line refused before sending, 3 for no answer).",
        "api_cmd",
    ),
    "doctor": Lazy(
        "What in the fleet needs an operator (admin): stuck or long-waiting MIG layout changes,\n"
        "waiting endpoints, silent nodes, unhealthy GPUs, reboots, refused layout changes, pools without\n"
        "fractional quota, and the ledger's self-check. Exits with status 1 when anything is found.",
        "doctor_cmd",
    ),
    "replay": Lazy(
        "Replay demand under a fleet and a policy set with the server's own rules in virtual time\n"
        "(admin): GPU-hours granted and refused (by reason), waits (p50, p99), preemptions and cost, per\n"
        "tenant and overall; nothing is written to the deployment.",
        "replay_cmd",
    ),
    "events": Lazy(
        "Events the token may read, oldest first: the admin sees every event, a tenant those about itself.",
        "events_cmd",
    ),
    "login": Lazy(
        "Check the token with one read call, then write the server and token to the config file (0600).",
        "login_cmd",
    ),
    "whoami": Lazy(
        "Who the token is, as the server says: its credential and the tenant it acts for.",
        "resources_cmd",
    ),
    "logout": Lazy(
        "Forget the token `login` stored (the config file keeps the server). $BC_TOKEN is not touched.",
        "resources_cmd",
    ),
    "reserve": Lazy("Reserve atoms of a pool for a time window.", "reservations_cmd"),
    "gpus": Lazy(
        "The GPU catalog: every model, its memory and, for MIG-capable ones, slices and profiles.",
        "catalog",
    ),
    "advise": Lazy(
        "Which MIG partitions and whole GPUs hold a model at a context length and concurrency; with\n"
        "`--endpoint`, the partition layout and instance count that serve several models at the lowest\n"
        "price.",
        "catalog",
    ),
    "bills": Lazy("Show a tenant's bill for a period.", "billing_cmd"),
    "usage": Lazy("Export usage: GPU-hours per booking in a period.", "billing_cmd", "usage_report_cmd"),
    "prices": Lazy("List and set prices per meter.", "billing_cmd"),
    "capacity": Lazy("What the fleet has free, and where every GPU-hour went.", "capacity_cmd"),
    "endpoints": Lazy(
        "Create, list, show and delete inference endpoints on MIG partitions.", "endpoints_cmd"
    ),
    "components": Lazy(
        "Create, list, show, scale and delete an endpoint's components (models on partitions).",
        "endpoints_cmd",
    ),
    "pools": Lazy(
        "List, show, create, update and delete pools; offer one to tenants; preview a MIG layout change.",
        "resources_cmd",
    ),
    "clusters": Lazy(
        "List, show and create clusters (local or Slurm); set a cluster's phase.", "resources_cmd"
    ),
    "nodes": Lazy(
        "List nodes; cordon and uncordon them; release a GPU that moved; print a node's Slurm GRES.",
        "resources_cmd",
        "node_show_cmd",
        "node_gres_cmd",
    ),
    "atoms": Lazy("List atoms: what can be booked, booked now or not, and when next free.", "resources_cmd"),
    "tenants": Lazy("List, show, create, update and delete tenants.", "resources_cmd", "tenants_update_cmd"),
    "quotas": Lazy("List and set quota rows.", "resources_cmd"),
    "device-classes": Lazy(
        "List, show and create device classes: an atom class and a selector, by name.", "resources_cmd"
    ),
    "priority-classes": Lazy(
        "List, show and create priority classes: a workload evicts preemptible replicas of lower priority.",
        "resources_cmd",
    ),
    "policies": Lazy(
        "List, show, create, update and delete policies (limits and placement constraints).",
        "resources_cmd",
    ),
    "credentials": Lazy("List, create and revoke credentials.", "resources_cmd"),
    "partitions": Lazy(
        "Hold a GPU's whole family of atoms for maintenance (admin), and end the hold.", "partitions_cmd"
    ),
    "reservations": Lazy("List, show, cancel, release and extend reservations.", "reservations_cmd"),
    "workloads": Lazy(
        "Create, list, show, scale, delete and drain workloads placed across clusters.", "workloads_cmd"
    ),
    "placement": Lazy("What placement would choose now; nothing is written.", "workloads_cmd"),
    "layouts": Lazy("Validate, list, export and import MIG layouts.", "catalog"),
    "wait": Lazy(
        "Wait until an object meets a condition, as `kubectl wait`: exit 0 when it does, 4 when\n"
        "--timeout passes first (1 when the object is not there; a refusal 1, unreachable 3).",
        "wait_cmd",
    ),
}
# The root's listing order: the commands the composition root registers up front come after `advise`.
ORDER = [*COMMANDS]
ORDER[ORDER.index("advise") + 1 : ORDER.index("advise") + 1] = ["serve", "migrate", "reconcile", "admin"]


def _app() -> typer.Typer:
    return app


app: typer.Typer = typer.Typer(
    name="better-compute",
    cls=lazy_group(_app, COMMANDS, ORDER),
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


def load_all() -> None:
    """Import every command module, so `app` holds every command (tests that walk the whole tree)."""
    import importlib

    for entry in COMMANDS.values():
        for module in entry.modules:
            importlib.import_module(f"better_compute.cli.{module}")
