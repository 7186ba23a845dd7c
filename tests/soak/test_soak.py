"""The PostgreSQL soak, bounded (`tests/soak/soak.py` says what runs and what is counted). `make
test` runs it for SOAK_SECONDS (35 s of load by default, about a minute and a half in all); `make
soak` runs it at length and prints the same JSON summary on its last line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.soak import soak

pytestmark = [pytest.mark.postgres, pytest.mark.e2e]


def test_nodes_restarting_under_load_and_layout_flips_leave_no_atom_held_twice(
    postgres_url: str, tmp_path: Path
) -> None:
    summary = soak.run(postgres_url, tmp_path, soak.Settings.from_env())
    print(json.dumps(summary))
    assert summary["reservationsMade"] > 0 and summary["layoutFlips"] > 0 and summary["kills"] > 0, summary
    assert summary["tenantsCreated"] > 0 and summary["tenantsDeleted"] > 0, summary
    # A daemon never crash-loops on what the hardware says (a reboot that took its MIG instances).
    assert summary["bcdCrashes"] == 0, summary["bcdCrashExits"]
    assert {name: summary[name] for name in soak.ASSERTED} == dict.fromkeys(soak.ASSERTED, 0), summary
