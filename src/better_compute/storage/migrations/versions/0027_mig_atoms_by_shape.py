"""A MIG atom is named by its slice, not by the driver's ids: `mig:<profile>@<placement start>`.

A MIG atom's key was `mig:<gi>.<ci>`, NVML's GPU-instance and compute-instance ids, which the driver
hands out: after a reboot at another layout, or a re-partition, another slice can come back under a
booked instance's ids and the booked slice under other ids (`domain.fleet.atoms.mig_key`). Every MIG
atom gets the key of its slice and the id derived from it, and every row that names it by id follows:
its bookings, the endpoint copy placed on it (`component_copies`), the showback spans
(`copy_spans`) and the capacity history's shares (`gpu_states.shares`, keyed by atom id). Events
stay as written: they are history, read by no look-up of an atom.

An atom's slice is read from its GPU's latest report: the instance there at the atom's GI/CI ids of
the atom's profile. An atom whose instance is not in it (gone since, or replaced at its ids by
another profile) gets the slice its profile can only be at when the profile has one placement (a
`7g.80gb` at 0); otherwise its placement is unknown, and it keeps its old key and id: it is not
present, so nothing is booked on it any more, and no slice's atom can ever be mistaken for it. Nor
does an atom take a slice another atom of its GPU already has (two atoms are never merged, so no
two bookings ever come to share an atom).

Revision ID: 0027
Revises: 0026
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import sqlalchemy as sa
from alembic import op

from better_compute.domain import catalog
from better_compute.domain.catalog import normalize_profile_name
from better_compute.domain.fleet.atoms import atom_id_for, mig_key

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

_LEGACY = re.compile(r"^mig:(\d+)\.(\d+)$")

_REFERENCES = ("bookings", "component_copies", "copy_spans")
"""The tables whose `atom_id` names an atom."""


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _shape_keys(rows: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    """{old atom id: (new atom id, new key)} for the MIG atoms still keyed by GI/CI ids."""
    by_gpu: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        by_gpu.setdefault(r["gpu_id"], []).append(r)
    moves: dict[str, tuple[str, str]] = {}
    for gpu_id, atoms in by_gpu.items():
        first = atoms[0]
        reported = _json(first["mig_instances"]) or []
        model = catalog.find_model(first["model"]) if first["model"] else None
        # Every slice an atom of the GPU already has, whether keyed by its slice before this runs (a
        # downgrade and upgrade again) or not: no atom takes another's.
        taken = {r["key"] for r in atoms if not _LEGACY.match(r["key"])}
        found: list[tuple[Mapping[str, Any], str]] = []
        guessed: list[tuple[Mapping[str, Any], str]] = []
        for r in atoms:
            if not _LEGACY.match(r["key"]):
                continue
            attrs = _json(r["attributes"]) or {}
            profile = str(attrs.get("migProfile", ""))
            gi, ci = (int(x) for x in _LEGACY.match(r["key"]).groups())  # type: ignore[union-attr]
            there = next(
                (
                    i
                    for i in reported
                    if int(i["giId"]) == gi
                    and int(i["ciId"]) == ci
                    and normalize_profile_name(str(i["profile"])) == normalize_profile_name(profile)
                ),
                None,
            )
            if there is not None:
                found.append((r, mig_key(profile, int(there["placementStart"]), ci)))
                continue
            mig_profile = model.find_profile(profile.split("c.", 1)[-1]) if model and profile else None
            if mig_profile is not None and len(mig_profile.starts) == 1:
                guessed.append((r, mig_key(profile, mig_profile.starts[0], ci)))
        for r, key in found + guessed:  # an instance in the report first: it is there now
            if key in taken:
                continue
            taken.add(key)
            moves[r["id"]] = (atom_id_for(gpu_id, key), key)
    return moves


def _legacy_keys(rows: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    """{atom id: (old atom id, old key)} for the MIG atoms keyed by their slice (the downgrade)."""
    by_gpu: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        by_gpu.setdefault(r["gpu_id"], []).append(r)
    moves: dict[str, tuple[str, str]] = {}
    for gpu_id, atoms in by_gpu.items():
        taken = {r["key"] for r in atoms if _LEGACY.match(r["key"])}
        for r in sorted(atoms, key=lambda r: not r["present"]):
            if _LEGACY.match(r["key"]):
                continue
            attrs = _json(r["attributes"]) or {}
            key = f"mig:{attrs.get('giId')}.{attrs.get('ciId')}"
            if key in taken or not _LEGACY.match(key):
                continue
            taken.add(key)
            moves[r["id"]] = (atom_id_for(gpu_id, key), key)
    return moves


def _rekey(moves: Mapping[str, tuple[str, str]]) -> None:
    """Give each atom of `moves` its new id and key, and every row naming it the new id: the new
    atom is written, its references moved, then the old one deleted (the foreign keys hold
    throughout; each atom's bookings move together, so no exclusion constraint sees a pair).

    Set-based, through a temporary table of the moves: a statement per table whatever the fleet's
    size (a parameter per atom would pass PostgreSQL's 65,535 in one statement, and a statement per
    atom would scan `copy_spans`, which has no index on `atom_id`, once per atom)."""
    if not moves:
        return
    bind = op.get_bind()
    bind.execute(
        sa.text(
            "CREATE TEMPORARY TABLE atom_moves"
            " (old_id VARCHAR(32) PRIMARY KEY, new_id VARCHAR(32) NOT NULL, new_key VARCHAR(64) NOT NULL)"
        )
    )
    bind.execute(
        sa.text("INSERT INTO atom_moves (old_id, new_id, new_key) VALUES (:old, :new_id, :new_key)"),
        [{"old": old, "new_id": new_id, "new_key": key} for old, (new_id, key) in moves.items()],
    )
    columns = [c["name"] for c in sa.inspect(bind).get_columns("atoms")]
    copied = ", ".join(
        "m.new_id" if c == "id" else "m.new_key" if c == "key" else f'a."{c}"' for c in columns
    )
    listed = ", ".join(f'"{c}"' for c in columns)
    bind.execute(
        sa.text(
            f"INSERT INTO atoms ({listed}) SELECT {copied} FROM atoms a JOIN atom_moves m ON m.old_id = a.id"
        )
    )
    for table in _REFERENCES:
        bind.execute(
            sa.text(
                f"UPDATE {table} SET atom_id = (SELECT m.new_id FROM atom_moves m WHERE m.old_id = {table}.atom_id)"
                " WHERE atom_id IN (SELECT old_id FROM atom_moves)"
            )
        )
    bind.execute(sa.text("DELETE FROM atoms WHERE id IN (SELECT old_id FROM atom_moves)"))
    states = bind.execute(
        sa.text(
            "SELECT id, shares FROM gpu_states WHERE gpu_id IN"
            " (SELECT a.gpu_id FROM atoms a JOIN atom_moves m ON m.new_id = a.id)"
        )
    ).all()
    bind.execute(sa.text("DROP TABLE atom_moves"))
    changed = []
    for state_id, raw in states:
        shares = _json(raw) or {}
        if any(a in moves for a in shares):
            renamed = {moves[a][0] if a in moves else a: s for a, s in shares.items()}
            changed.append({"id": state_id, "shares": json.dumps(renamed)})
    if changed:
        cast = "CAST(:shares AS JSON)" if bind.dialect.name == "postgresql" else ":shares"
        bind.execute(sa.text(f"UPDATE gpu_states SET shares = {cast} WHERE id = :id"), changed)


_MIG_ATOMS = (
    'SELECT a.id, a.gpu_id, a."key", a.attributes, a.present, g.mig_instances, g.model'
    " FROM atoms a JOIN gpus g ON g.id = a.gpu_id WHERE a.\"class\" = 'gpu.mig'"
)


def upgrade() -> None:
    rows = [dict(r._mapping) for r in op.get_bind().execute(sa.text(_MIG_ATOMS))]
    _rekey(_shape_keys(rows))


def downgrade() -> None:
    rows = [dict(r._mapping) for r in op.get_bind().execute(sa.text(_MIG_ATOMS))]
    _rekey(_legacy_keys(rows))
