"""Cluster phases and node cordons (domain.fleet.clusters): which phases take new work, and the refusals."""

from __future__ import annotations

import pytest

from better_compute.domain.fleet.clusters import (
    PHASES,
    accepts_placements,
    check_cordoned,
    check_phase,
    cluster_not_found,
    node_not_found,
)
from better_compute.domain.kernel.errors import InvalidInput, NotFound


def test_only_an_active_cluster_accepts_placements() -> None:
    assert PHASES == ("active", "cordoned", "draining")
    assert {p: accepts_placements(p) for p in PHASES} == {
        "active": True,
        "cordoned": False,
        "draining": False,
    }
    assert not accepts_placements("paused")


@pytest.mark.parametrize("phase", PHASES)
def test_every_phase_parses_as_itself(phase: str) -> None:
    assert check_phase(phase) == phase


@pytest.mark.parametrize("value", ["paused", "ACTIVE", " active", "", None, 1, ["active"]])
def test_anything_else_is_invalid_input_listing_the_phases(value: object) -> None:
    with pytest.raises(InvalidInput) as err:
        check_phase(value)
    assert err.value.message == f"phase must be one of active, cordoned, draining, not {value!r}"
    assert err.value.details == {"field": "phase", "allowed": ["active", "cordoned", "draining"]}


def test_a_cordon_is_a_boolean() -> None:
    assert check_cordoned(True) is True and check_cordoned(False) is False
    for value in (1, 0, "true", None):
        with pytest.raises(InvalidInput) as err:
            check_cordoned(value)
        assert err.value.details == {"field": "cordoned"}


def test_unknown_ones_are_not_found_naming_them() -> None:
    assert isinstance(cluster_not_found("c9"), NotFound)
    assert cluster_not_found("c9").message == "cluster c9 not found"
    assert node_not_found("n9").details == {"node": "n9"}
