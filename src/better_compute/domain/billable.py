"""How much of a GPU-hour one hour of an atom bills: `share`, the one function billable hours use.

Every atom counts as one whole GPU (share 1) here. The exact shares of docs/concepts.md (a slot
1/slots, an MPS slot mpsUnits/100, a MIG instance its compute slices over the GPU's) replace this
function and change nothing else: `better_compute_billable_hours_total` multiplies each atom's hours
by what it answers.
"""

from __future__ import annotations

from fractions import Fraction

from better_compute.domain.atoms import Atom


def share(atom: Atom) -> Fraction:
    """The share of a whole GPU that `atom` bills per hour held."""
    return Fraction(1)
