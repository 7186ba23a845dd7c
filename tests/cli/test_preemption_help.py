"""Issue 39, item 9: the CLI's help and the README say the same true thing about preemption.

The `priority-classes` help said "recorded; nothing preempts yet" while the README (and the server)
evict preemptible replicas of lower priority, for a project's floor and for its fair share
(docs/scheduling.md). Read at 80 columns and piped, as a user reads it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from better_compute.entrypoints.cli import app

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
WORKLOADS = README.split("## Workloads across clusters", 1)[1].split("\n## ", 1)[0]
RULE = "a workload evicts preemptible replicas of lower priority"
ENVS = pytest.mark.parametrize("env", [{"COLUMNS": "80"}, {}], ids=["80-columns", "piped"])


def _text(output: str) -> str:
    """The words of a help screen, without its boxes and line breaks."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", output).split())


@ENVS
def test_priority_classes_help_says_what_preempts(runner: CliRunner, env: dict[str, str]) -> None:
    group = runner.invoke(app, ["priority-classes", "--help"], env=env)
    create = runner.invoke(app, ["priority-classes", "create", "--help"], env=env)
    root = runner.invoke(app, ["--help"], env=env)

    for result in (group, create, root):
        assert result.exit_code == 0, result.output
        assert all(len(line) <= 80 for line in result.output.splitlines())
        assert "nothing preempts" not in _text(result.output)
    assert RULE in _text(group.output).lower()
    assert RULE in _text(root.output).lower()
    preemptible = _text(create.output)
    assert "--preemptible" in preemptible
    assert "evicted: for a higher priority, a project's floor or its fair share" in preemptible


def test_the_readme_says_the_same_about_preemption() -> None:
    words = " ".join(WORKLOADS.split())

    assert RULE in words.lower()
    assert "priority-classes create --preemptible" in words
    assert "floor" in words and "fair share" in words
    assert "nothing preempts" not in README
