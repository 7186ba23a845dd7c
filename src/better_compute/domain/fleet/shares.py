"""What share of one GPU an atom is: the one rule every booking bills and every capacity count weighs by.

Bills must be exact to the fraction (a 3g.40gb on an H100 is 3/7 of it, not 0.43), so a share is a
`fractions.Fraction` (docs/billing.md). Storage writes it beside each atom and copies it onto every
booking as it is made, so a later change of a pool's `replicas` or of a MIG layout (which re-derives
the atom with the same id) cannot change what an earlier booking bills. A property of the atom and
its GPU model alone, so it lives in fleet, below metering, placement and endpoints, which read it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from functools import cache

from better_compute.domain import catalog
from better_compute.domain.fleet.atoms import Atom, AttrValue

FALLBACK_COMPUTE_SLICES = 7
"""A MIG instance of a model the catalog does not know is taken over 7 compute slices (the H100,
A100, H200 and B200 figure), from the `<G>g` of its profile name: the best the report tells."""

_COMPUTE = re.compile(r"^(?:mig-)?(\d+)g\.", re.IGNORECASE)


def share(atom: Atom) -> Fraction:
    """The atom's share of one GPU, which a booking of it bills per hour held.

    - a whole GPU (`gpu`): 1
    - a time-slice slot: 1 / `slots`
    - an MPS slot: `mpsUnits` / 100 (so with 3 replicas a slot is 33/100, as MPS serves it)
    - a MIG instance: its profile's compute slices over its model's (catalog): 3g.40gb on an H100
      is 3/7, 1g.24gb on an RTX PRO 6000 is 1/4
    """
    return _share(atom.cls, _hashable(atom.attributes))


def share_of_kind(cls: str, attributes: Mapping[str, AttrValue]) -> Fraction:
    """`share` of an atom of class `cls` with these attributes (what one of a kind of atom would
    bill, such as an instance of a profile on a model, without the atom)."""
    return _share(cls, _hashable(attributes))


def _hashable(attributes: Mapping[str, AttrValue]) -> tuple[tuple[str, AttrValue], ...]:
    keys = ("sharing", "slots", "mpsUnits", "gpuModel", "migProfile")
    return tuple((k, attributes[k]) for k in keys if k in attributes)


@cache
def _share(cls: str, attributes: tuple[tuple[str, AttrValue], ...]) -> Fraction:
    attrs = dict(attributes)
    if cls == "gpu.slot":
        if attrs.get("sharing") == "mps" and _positive(attrs.get("mpsUnits")):
            return Fraction(int(attrs["mpsUnits"]), 100)
        if _positive(attrs.get("slots")):
            return Fraction(1, int(attrs["slots"]))
        return Fraction(1)
    if cls == "gpu.mig":
        return _mig_share(attrs.get("gpuModel"), attrs.get("migProfile"))
    return Fraction(1)


def _positive(value: AttrValue | None) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _mig_share(model_id: AttrValue | None, profile_name: AttrValue | None) -> Fraction:
    if not isinstance(profile_name, str):
        return Fraction(1)
    model = catalog.find_model(model_id) if isinstance(model_id, str) else None
    profile = model.find_profile(profile_name) if model is not None else None
    if model is not None and profile is not None and model.compute_slices > 0:
        return Fraction(profile.compute_slices, model.compute_slices)
    match = _COMPUTE.match(profile_name.strip())
    if match is None:
        return Fraction(1)
    return min(Fraction(1), Fraction(int(match[1]), FALLBACK_COMPUTE_SLICES))


__all__ = ["FALLBACK_COMPUTE_SLICES", "share", "share_of_kind"]
