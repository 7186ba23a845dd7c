"""`nodes.slurmGres` (admin): what a Slurm cluster is told of one node's atoms.

`gresConf` is the node's gres.conf lines (newline-ended, its `AutoDetect=off` first), `nodeLine`
its slurm.conf `NodeName=... Gres=...` line: whole GPUs as `gpu:<model>`, MIG instances as
`gpu:<profile>` with their device files, time-slice and MPS slots as `shard` (docs/slurm.md).
"""

from __future__ import annotations

from pydantic import Field

from better_compute.wire.common import WireAnswer, WireRequest


class NodeSlurmGresGet(WireRequest):
    """`nodes.slurmGres`: the node's id (the path's)."""

    node: str = Field(min_length=1)


class NodeSlurmGresPublic(WireAnswer):
    """The node's gres.conf lines and its slurm.conf node line."""

    gres_conf: str
    node_line: str
