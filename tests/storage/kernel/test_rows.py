"""Bulk writes (storage.kernel.rows.upsert and insert_all): what a repository writes in bulk reads back the same, on
SQLite (one cached statement) and on PostgreSQL (COPY into a scratch table, then one merge), JSON
columns included."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from fractions import Fraction

import pytest
from sqlalchemy.exc import StatementError

from better_compute.domain.fleet.atoms import Atom, atom_id_for
from better_compute.domain.fleet.gpu_states import GpuState, StateChange
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.kernel.rows import COPY_FROM
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


def test_gpu_state_periods_written_in_bulk_read_back_the_same(store: Store) -> None:
    """A fleet's first reports open a period for each of thousands of GPUs at once (COPY on
    PostgreSQL); each reads back as written, and closing them all leaves none open."""
    load_fleet(store, fleet_spec(nodes=16, gpus=8), T0)
    with store.read() as tx:
        nodes = [n.id for n in tx.nodes.page(None, None, None)]
        gpus = tx.gpus.of_nodes(nodes)
    assert len(gpus) >= COPY_FROM
    states = [
        GpuState(
            g.id, g.node_id, None if n % 2 else "p1", n % 5 != 0, n % 3 == 0, (("a", Fraction(n % 7 + 1, 7)),)
        )
        for n, g in enumerate(gpus)
    ]
    at = T0 + timedelta(hours=1)
    with store.begin() as tx:
        tx.gpu_states.write([StateChange(s.gpu_id, at, s) for s in states])
    with store.read() as tx:
        found = tx.gpu_states.open_of([s.gpu_id for s in states])
    assert [(found[s.gpu_id].state, found[s.gpu_id].span.start) for s in states] == [(s, at) for s in states]
    with store.begin() as tx:
        tx.gpu_states.write([StateChange(s.gpu_id, at + timedelta(hours=1), None) for s in states])
    with store.read() as tx:
        assert tx.gpu_states.open_of([s.gpu_id for s in states]) == {}


def test_a_naive_datetime_is_refused_by_a_bulk_write_as_by_any_other(store: Store) -> None:
    """COPY binds each value through its column's type, as a statement does: `UtcDateTime` refuses
    a datetime without a zone (written as the server's local time, it would be hours off). Before,
    the bulk path of `upsert` wrote it."""
    load_fleet(store, fleet_spec(nodes=16, gpus=8), T0)
    with store.read() as tx:
        gpus = tx.gpus.of_nodes([n.id for n in tx.nodes.page(None, None, None)])
    naive = (T0 + timedelta(hours=1)).replace(tzinfo=None)
    assert len(gpus) >= COPY_FROM
    with pytest.raises((ValueError, StatementError), match="naive datetime"), store.begin() as tx:
        tx.gpus.put([replace(g, updated_at=naive) for g in gpus])
