"""`better-compute nodes gres NODE` (admin): what Slurm is told of one node's atoms.

It calls `nodes.slurmGres` and prints the node's gres.conf lines, then its slurm.conf node line
after a `#` comment that says so, then, as a comment, the `AccountingStorageTRES` that lets `sacct`
count the node's GRES. The lines are configuration: they are printed whole, never
broken to the terminal's width, so that what is copied into the files is what the server made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from better_compute.cli import config
from better_compute.cli.calls import JsonFlag, call
from better_compute.cli.output import print_json, stdout
from better_compute.cli.resources_cmd import nodes_app

if TYPE_CHECKING:
    from better_compute.client import Compute
    from better_compute.wire.slurm_gres import NodeSlurmGresPublic

NODE_LINE_HEADER = "# slurm.conf"
"""The comment line between the gres.conf lines and the slurm.conf node line."""


ACCOUNTING_HEADER = "# with slurmdbd, for sacct to count these GRES: AccountingStorageTRES="
"""The comment after the node line: the accounting setting the node's GRES need (docs/slurm.md#accounting)."""


def render(answer: NodeSlurmGresPublic) -> list[str]:
    """The gres.conf lines, the header comment, the node line, then the accounting advice."""
    from better_compute.domain.fleet.slurm_gres import accounting_tres

    advice = f"{ACCOUNTING_HEADER}{accounting_tres(answer.node_line)}"
    return [*answer.gres_conf.splitlines(), NODE_LINE_HEADER, answer.node_line, advice]


@nodes_app.command("gres")
def nodes_gres(
    node: Annotated[str, typer.Argument(metavar="NODE")],
    as_json: JsonFlag = False,
    server: config.ServerOption = None,
    token: config.TokenOption = None,
) -> None:
    """What Slurm is told of one node (admin): its gres.conf lines, then its slurm.conf node line.
    Whole GPUs are `gpu:<model>`, MIG instances `gpu:<profile>` with their device files, slots
    `shard`."""

    def action(c: Compute) -> NodeSlurmGresPublic:
        return c.nodes.slurm_gres(node)

    answer = call(server, token, as_json, action)
    if as_json:
        print_json(answer.model_dump(mode="json", by_alias=True))
        return
    console = stdout()
    for line in render(answer):
        console.print(line, markup=False, soft_wrap=True, overflow="ignore", crop=False)
