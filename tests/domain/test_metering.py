"""An atom's share of its GPU, exactly, and hours shown rounded half up to 6 places."""

from __future__ import annotations

from fractions import Fraction

import pytest

from better_compute.domain.atoms import AttrValue
from better_compute.domain.metering import share, shown
from tests.builders import atom


@pytest.mark.parametrize(
    ("key", "attributes", "expected"),
    [
        pytest.param("gpu", {"gpuModel": "H100-80GB"}, Fraction(1), id="a whole GPU is 1"),
        pytest.param("slot:0", {"slots": 4, "sharing": "timeslice"}, Fraction(1, 4), id="a timeslice slot"),
        pytest.param(
            "slot:0", {"slots": 3, "sharing": "mps", "mpsUnits": 33}, Fraction(33, 100), id="an MPS slot of 3"
        ),
        pytest.param(
            "mig:1.0",
            {"gpuModel": "H100-80GB", "migProfile": "3g.40gb"},
            Fraction(3, 7),
            id="3g.40gb on H100",
        ),
        pytest.param(
            "mig:1.0",
            {"gpuModel": "RTX-PRO-6000", "migProfile": "1g.24gb"},
            Fraction(1, 4),
            id="1g on an RTX PRO 6000",
        ),
        pytest.param(
            "mig:1.0", {"gpuModel": "no-such-gpu", "migProfile": "1g.10gb"}, Fraction(1), id="unknown model"
        ),
        pytest.param(
            "mig:1.0", {"gpuModel": "H100-80GB", "migProfile": "9g.99gb"}, Fraction(1), id="unknown profile"
        ),
        pytest.param("slot:0", {}, Fraction(1), id="a slot that does not say"),
    ],
)
def test_share_of_an_atom(key: str, attributes: dict[str, AttrValue], expected: Fraction) -> None:
    assert share(atom(key=key, attributes=attributes)) == expected


def test_two_of_four_slots_and_a_3g_for_an_hour_are_the_seeds_0_928571() -> None:
    slot = atom(key="slot:0", attributes={"slots": 4, "sharing": "timeslice"})
    three = atom(key="mig:1.0", attributes={"gpuModel": "H100-80GB", "migProfile": "3g.40gb"})
    assert shown(2 * share(slot) + share(three)) == "0.928571"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Fraction(0), "0.000000"),
        (Fraction(744), "744.000000"),
        (Fraction(1, 3), "0.333333"),
        (Fraction(2, 3), "0.666667"),
        (Fraction(1, 2_000_000), "0.000001"),
        (Fraction(1, 2_000_001), "0.000000"),
    ],
)
def test_shown_rounds_half_up_to_six_places(value: Fraction, text: str) -> None:
    assert shown(value) == text
