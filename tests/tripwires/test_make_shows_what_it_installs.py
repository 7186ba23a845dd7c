"""`make` shows what it installs (issue 11, defect 14): a first `make run` spent a minute silent."""

from __future__ import annotations

from pathlib import Path

MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"


def test_make_shows_what_it_installs() -> None:
    installs = [line.strip() for line in MAKEFILE.read_text().splitlines() if "pip install" in line]
    assert installs, "the Makefile installs with pip"
    for line in installs:
        assert "--quiet" not in line.split() and "-q" not in line.split(), line
