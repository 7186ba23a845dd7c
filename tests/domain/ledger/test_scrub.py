"""Scrubbing between tenants as pure rules: which `policy.scrub` each sharing mode takes, and which
atoms are owed a scrub, to whom (domain.ledger.scrub)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from better_compute.domain.fleet.pools import SHARING_MODES, PoolSettings, check_settings, stored_settings
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.ledger.scrub import EndedHold, owed_by, owed_to_others
from better_compute.domain.ops.fleet import parse_fleet
from tests.builders import T0, at, small_fleet

ALLOWED = {
    ("exclusive", "none"),
    ("exclusive", "reset"),
    ("exclusive", "zero"),
    ("mig", "none"),
    ("mig", "zero"),
    ("timeslice", "none"),
    ("mps", "none"),
}


@pytest.mark.parametrize("mode", SHARING_MODES)
@pytest.mark.parametrize("scrub", ["none", "reset", "zero"])
def test_each_sharing_mode_takes_the_scrubs_that_make_sense_for_it(mode: str, scrub: str) -> None:
    if (mode, scrub) in ALLOWED:
        settings = check_settings(mode, {"scrub": scrub}, "pools.create")  # type: ignore[arg-type]
        assert settings.scrub == scrub
        assert stored_settings(mode, settings.as_mapping()).scrub == scrub  # type: ignore[arg-type]
        return
    with pytest.raises(InvalidInput) as refused:
        check_settings(mode, {"scrub": scrub}, "pools.create")  # type: ignore[arg-type]
    assert refused.value.message.startswith(
        f"pools.create.policy.scrub {scrub} does not apply to {mode} pools"
    )
    assert refused.value.details["field"] == "pools.create.policy.scrub"


def test_an_unknown_scrub_is_refused_and_none_is_the_default_kept_out_of_the_stored_policy() -> None:
    with pytest.raises(InvalidInput, match="must be one of none, reset, zero"):
        check_settings("exclusive", {"scrub": "shred"}, "pools.update")
    assert check_settings("exclusive", {}, "pools.update").scrub == "none"
    assert check_settings("exclusive", {"scrub": None}, "pools.update").scrub == "none"
    assert "scrub" not in PoolSettings().as_mapping()
    assert PoolSettings(scrub="zero").as_mapping() == {"scrub": "zero"}


def test_an_atom_is_owed_to_the_tenant_of_its_last_booking_ended_since_its_last_scrub() -> None:
    ended = [
        EndedHold("a", "acme", at(1)),
        EndedHold("a", "platform", at(2)),
        EndedHold("b", "acme", at(1), scrubbed_at=at(1.5)),  # scrubbed since
        EndedHold("c", "acme", at(1), scrubbed_at=at(0.5)),  # ended after its scrub
        EndedHold("d", "acme", at(5)),  # not over yet
    ]
    assert owed_by(ended, at(3)) == {"a": "platform", "c": "acme"}
    assert owed_by(ended, at(5)) == {"a": "platform", "c": "acme", "d": "acme"}
    assert owed_by([], T0) == {}


def test_an_owed_atom_is_kept_from_every_other_tenant_and_from_the_admin() -> None:
    owed = {"a": "platform", "c": "acme"}
    assert owed_to_others(owed, "platform") == {"c"}
    assert owed_to_others(owed, "acme") == {"a"}
    assert owed_to_others(owed, None) == {"a", "c"}
    assert owed_by([EndedHold("a", "acme", T0 + timedelta(seconds=1))], T0) == {}


def test_a_fleet_file_sets_a_pools_scrub_where_its_mode_allows_it() -> None:
    fleet = small_fleet(mode="exclusive")
    fleet["pools"][0]["policy"] = {"scrub": "zero"}  # type: ignore[index]
    assert parse_fleet(fleet).pools[0].settings.scrub == "zero"
    shared = small_fleet(mode="timeslice")
    shared["pools"][0]["policy"]["scrub"] = "zero"  # type: ignore[index]
    with pytest.raises(InvalidInput, match="does not apply to timeslice pools"):
        parse_fleet(shared)
