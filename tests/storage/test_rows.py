"""Bulk upserts (storage.rows.upsert): what a repository writes in bulk reads back the same, on
SQLite (one cached statement) and on PostgreSQL (COPY into a scratch table, then one merge), JSON
columns included."""

from __future__ import annotations

from dataclasses import replace

from better_compute.domain.atoms import Atom, atom_id_for
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.rows import COPY_FROM
from better_compute.storage.store import Store
from tests.builders import T0, fleet_spec


def test_atoms_written_in_bulk_read_back_the_same_and_are_updated_in_bulk(store: Store) -> None:
    load_fleet(store, fleet_spec(nodes=1), T0)
    with store.read() as tx:
        node = tx.nodes.page(None, 1, None)[0].id
        gpu = tx.gpus.of_nodes([node])[0]
    count = COPY_FROM + 20  # PostgreSQL's COPY path
    written = [
        Atom(
            id=atom_id_for(gpu.id, f"slot:{n}"),
            gpu_id=gpu.id,
            node=node,
            cls="gpu.slot",
            key=f"slot:{n}",
            bookable=n % 2 == 0,
            partition_pending=False,
            pool_id=None,
            numa_node=None if n % 3 else 1,
            nvlink_domain=None,
            # A text with quotes, tabs and non-ASCII (COPY's escapes), and integers past 64 bits.
            attributes={"slot": n, "label": f'é "{n}"\t\\', "big": 2**70 + n, "ratio": n / 8, "on": True},
        )
        for n in range(count)
    ]
    with store.begin() as tx:
        tx.atoms.put(written)
    with store.read() as tx:
        found = {a.id: a for a in tx.atoms.of_nodes([node])}
    assert [found[a.id] for a in written] == written
    changed = [replace(a, bookable=not a.bookable, attributes={"slot": -1}) for a in written]
    with store.begin() as tx:
        tx.atoms.put(changed)
    with store.read() as tx:
        found = {a.id: a for a in tx.atoms.of_nodes([node])}
    assert [found[a.id] for a in changed] == changed
