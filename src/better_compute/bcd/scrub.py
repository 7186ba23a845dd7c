"""Scrubbing between tenants on the node: who last held each atom, whether it is clean since, and
the backend call that cleans it.

The devices converger records an atom's holder (its tenant and allocation) when it hands the atom
over, and the atom is unclean from then on. Once that allocation is gone, in a pool whose
`policy.scrub` is not `none`, the atom is scrubbed at once (`reset`: a GPU reset, whole GPUs only;
`zero`: a zeroing pass over the MIG instance's memory, or the GPU's) and reported in one
`ScrubDone`. An unclean atom is never handed to another tenant: that allocation stays pending until
the scrub succeeds; a failed scrub is logged and tried again on the next pass. The tenant that left
the atom may have it back without one.

The record is a JSON file in the state directory (`scrub.json`), written whole before the atom is
handed over, so a restarted daemon still knows whose data is where.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from better_compute.bcd.gpu import GpuBackend, GpuError

SCRUB_MODES = ("reset", "zero")
"""The scrubs this daemon can run (`none` runs nothing)."""


@dataclass(frozen=True, slots=True)
class Holder:
    """Who last held an atom on this node, and whether it was cleaned since."""

    tenant: str | None
    allocation: str
    clean: bool = False

    def json(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "allocation": self.allocation, "clean": self.clean}


@dataclass(frozen=True, slots=True)
class Target:
    """What one scrub works on: a GPU, and the GPU instance of a MIG atom (None: the whole GPU)."""

    atom_id: str
    gpu_uuid: str
    gi_id: int | None
    whole: bool


class ScrubState:
    """The holders of this node's atoms, kept in `path` (created when first written)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.holders: dict[str, Holder] = {}
        if path.exists():
            raw = json.loads(path.read_text(encoding="utf-8"))
            for atom, h in (raw.get("atoms") or {}).items():
                tenant = h.get("tenant")
                self.holders[str(atom)] = Holder(
                    None if tenant is None else str(tenant),
                    str(h.get("allocation", "")),
                    bool(h.get("clean")),
                )

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"atoms": {a: h.json() for a, h in sorted(self.holders.items())}}, indent=1)
        partial = self.path.with_name(f".{self.path.name}.partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(self.path)

    def hold(self, atoms: Iterable[str], tenant: str | None, allocation: str) -> None:
        """The allocation of `tenant` holds these atoms now: each is unclean until scrubbed."""
        changed = False
        for atom in atoms:
            held = Holder(tenant, allocation)
            if self.holders.get(atom) != held:
                self.holders[atom] = held
                changed = True
        if changed:
            self._write()

    def rekey(self, aliases: Mapping[str, str]) -> None:
        """Move each record kept under an old id of `aliases` to the atom's id now (`devices.legacy_ids`);
        where both are recorded, the unclean one wins, so no one's data is forgotten."""
        moved = {old: new for old, new in aliases.items() if old in self.holders and old != new}
        if not moved:
            return
        for old, new in moved.items():
            h = self.holders.pop(old)
            kept = self.holders.get(new)
            if kept is None or (kept.clean and not h.clean):
                self.holders[new] = h
        self._write()

    def mark_clean(self, atoms: Iterable[str]) -> None:
        for atom in atoms:
            h = self.holders.get(atom)
            if h is not None:
                self.holders[atom] = Holder(h.tenant, h.allocation, True)
        self._write()

    def unclean(self) -> dict[str, Holder]:
        return {a: h for a, h in sorted(self.holders.items()) if not h.clean}

    def blocks(self, atom: str, tenant: str | None) -> bool:
        """Whether `atom` holds another tenant's data than `tenant`'s (so it must be scrubbed first)."""
        h = self.holders.get(atom)
        return h is not None and not h.clean and h.tenant != tenant


class Scrubber:
    """Runs one scrub on the backend; `state` is where the holders are kept."""

    def __init__(self, backend: GpuBackend, state: ScrubState) -> None:
        self.backend = backend
        self.state = state

    def scrub(self, target: Target, mode: str) -> None:
        """Clean one atom as `mode` says; raises GpuError when it did not happen."""
        if mode == "reset":
            if not target.whole:
                raise GpuError(
                    f"policy.scrub reset cleans whole GPUs only; atom {target.atom_id} is part of "
                    f"{target.gpu_uuid}"
                )
            self.backend.reset_gpu(target.gpu_uuid)
        elif mode == "zero":
            self.backend.zero_memory(target.gpu_uuid, target.gi_id)
        else:
            raise GpuError(
                f"policy.scrub {mode!r} is not known to this bcd (it knows {', '.join(SCRUB_MODES)})"
            )
