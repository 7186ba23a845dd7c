"""What share of one GPU an atom is: the one rule for billing a booking and for accounting capacity.

A fraction of a GPU must add up exactly (two of four slots and a 3g.40gb of an H100 are 1/2 + 3/7 of
a GPU, not 0.93), so a share is a `fractions.Fraction`, and hours are rounded only where they are
shown (`shown`).
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from better_compute.domain import catalog
from better_compute.domain.atoms import Atom, AttrValue

HOURS_PLACES = 6
"""Decimal places hours are shown with (`0.928571`); everything before that is exact."""


def share(atom: Atom) -> Fraction:
    """The atom's share of its GPU.

    - a whole GPU (`gpu`): 1
    - a time-slice slot: 1 / `slots`
    - an MPS slot (it carries `mpsUnits`, only in mps pools): `mpsUnits` / 100, so with 3 replicas
      a slot is 33/100, what MPS actually gives it
    - a MIG instance: its profile's compute slices over its model's, from the catalog (3g.40gb on
      an H100 is 3/7; 1g.24gb on an RTX PRO 6000 is 1/4)

    An atom whose attributes do not say (a model or profile the catalog does not know) counts as a
    whole GPU: a share is never guessed smaller than what the atom may hold.
    """
    attrs = atom.attributes
    if atom.cls == "gpu.slot":
        units = _positive(attrs.get("mpsUnits"))
        if units is not None:
            return min(Fraction(1), Fraction(units, 100))
        slots = _positive(attrs.get("slots"))
        return Fraction(1, slots) if slots is not None else Fraction(1)
    if atom.cls == "gpu.mig":
        return _mig_share(attrs.get("gpuModel"), attrs.get("migProfile"))
    return Fraction(1)


def _positive(value: AttrValue | None) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _mig_share(model_id: AttrValue | None, profile_name: AttrValue | None) -> Fraction:
    model = catalog.find_model(model_id) if isinstance(model_id, str) else None
    if model is None or model.compute_slices <= 0 or not isinstance(profile_name, str):
        return Fraction(1)
    profile = model.find_profile(profile_name)
    if profile is None:
        return Fraction(1)
    return min(Fraction(1), Fraction(profile.compute_slices, model.compute_slices))


def shown(value: Fraction, places: int = HOURS_PLACES) -> str:
    """`value` (not negative) as a decimal string of `places` places, rounded half up (`0.928571`):
    the only rounding of hours, where they are shown. Exact: no float or rounded division on the way."""
    scaled = value * 10**places
    whole, rest = divmod(scaled.numerator, scaled.denominator)
    if 2 * rest >= scaled.denominator:
        whole += 1
    return f"{Decimal(whole).scaleb(-places):f}"
