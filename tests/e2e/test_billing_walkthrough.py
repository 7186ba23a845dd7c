"""The README's billing walkthrough, step by step, against a real server loaded with
examples/demo-fleet.yaml: two of four time-slice slots and one 3g.40gb for an hour bill 0.928571
gpu.h100.hours. The request bodies are read from the README itself, so the two cannot drift apart."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
SECTION = README.split("## Billing", 1)[1].split("\n## ", 1)[0]
PERIOD = ["--from", "2030-01-01", "--to", "2030-02-01"]


def body(name: str) -> str:
    """The JSON the README's `NAME='...'` line holds."""
    match = re.search(rf"^{name}='(.*?)'$", SECTION, re.MULTILINE | re.DOTALL)
    assert match is not None, f"the README's billing section sets {name}"
    return match.group(1)


def test_the_readme_billing_example_bills_0_928571_gpu_h100_hours(server: Server) -> None:
    assert "`gpu.h100.hours` `0.928571`" in SECTION
    credential = server.cli_env(
        "api", "credentials.create", "--json", '{"tenantId":"platform","name":"billing"}'
    )
    assert credential.returncode == 0, credential.stderr
    platform = json.loads(credential.stdout)["token"]
    for name in ("SLOTS", "MIG"):
        booked = server.cli_env("api", "reservations.create", "--token", platform, "--json", body(name))
        assert booked.returncode == 0, booked.stderr
        assert json.loads(booked.stdout)["start"] == "2030-01-15T10:00:00Z"

    shown = server.cli_env("bills", "show", "--tenant", "platform", *PERIOD)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"gpu\.h100\.hours\s+0\.928571", shown.stdout), shown.stdout
    bill = json.loads(server.cli_env("bills", "show", "--tenant", "platform", *PERIOD, "--json").stdout)
    assert bill["lines"] == [{"meter": "gpu.h100.hours", "hours": "0.928571"}]

    priced = server.cli_env(
        "prices", "set", "--meter", "gpu.h100.hours", "--per-hour", "2.50", "--currency", "USD"
    )
    assert priced.returncode == 0, priced.stderr
    assert "2.32 USD" in server.cli_env("bills", "show", "--tenant", "platform", *PERIOD).stdout

    out = server.home / "usage.csv"
    exported = server.cli_env("usage", "export", *PERIOD, "--format", "csv", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert sorted(r["share"] for r in rows if r["kind"] == "booking") == ["1/4", "1/4", "3/7"]
    assert [(r["meter"], r["hours"]) for r in rows if r["kind"] == "total"] == [
        ("gpu.h100.hours", "0.928571")
    ]
