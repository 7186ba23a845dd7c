"""Wires the Slurm port to its adapter: each Slurm cluster's commands run with its own `SLURM_CONF`.

Only entry points import the adapter (an import-linter contract); the follower asks for a cluster's
`SlurmControl` and never sees a command line.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from better_compute.domain.fleet.records import Cluster
from better_compute.service.fleet.slurm import SlurmControl
from better_compute.slurm.commands import SlurmCommands


def slurm_conf(conf_dir: str | None, cluster_id: str) -> Path | None:
    """`<conf_dir>/<cluster id>/slurm.conf` when it exists; None: the host's own configuration."""
    if not conf_dir:
        return None
    path = Path(conf_dir) / cluster_id / "slurm.conf"
    return path if path.is_file() else None


def slurm_control_for(conf_dir: str | None) -> Callable[[Cluster], SlurmControl]:
    """A cluster's `SlurmControl`: the Slurm commands, pointed at its `slurm.conf` (`BC_SLURM_CONF_DIR`)."""

    def control(cluster: Cluster) -> SlurmControl:
        path = slurm_conf(conf_dir, cluster.id)
        env = dict(os.environ)
        if path is not None:
            env["SLURM_CONF"] = str(path)
        return SlurmCommands(env=env)

    return control
