"""`better-compute nodes gres NODE` against the real app: the node's gres.conf lines then its
slurm.conf node line, printed whole at 80 columns and piped, as JSON, and refusals in CLI terms."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from better_compute.cli.app import app
from tests.cli.test_resources_cmd import Live, live, run

__all__ = ["live"]


@pytest.mark.parametrize("env", [{"COLUMNS": "80"}, {}], ids=["80-columns", "piped"])
def test_nodes_gres_prints_gres_conf_then_the_node_line_unbroken(
    runner: CliRunner, live: Live, env: dict[str, str]
) -> None:
    result = runner.invoke(app, ["nodes", "gres", "n", "--token", live.admin], env=env)
    assert result.exit_code == 0, result.output
    served = live.http.get("/v1/nodes/n/slurm-gres", headers={"Authorization": f"Bearer {live.admin}"}).json()
    lines = result.stdout.splitlines()
    # configuration lines are never broken to the terminal: what is printed is what the server made
    assert lines == [
        *served["gresConf"].splitlines(),
        "# slurm.conf",
        "NodeName=n Gres=gpu:1g.10gb:14",
        "# with slurmdbd, for sacct to count these GRES: AccountingStorageTRES=gres/gpu,gres/gpu:1g.10gb",
    ]
    assert any(len(line) > 80 for line in lines)
    assert lines[1] == "NodeName=n AutoDetect=off"


def test_nodes_gres_as_json_and_its_refusals(runner: CliRunner, live: Live) -> None:
    shown = run(runner, live.admin, "nodes", "gres", "n", "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["nodeLine"] == "NodeName=n Gres=gpu:1g.10gb:14"
    missing = run(runner, live.admin, "nodes", "gres", "nobody")
    assert missing.exit_code == 1 and "NOT_FOUND: node nobody not found" in missing.stderr
    tenant = run(runner, live.acme, "nodes", "gres", "n")
    assert tenant.exit_code == 1 and "FORBIDDEN" in tenant.stderr
