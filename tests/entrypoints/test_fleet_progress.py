"""Loading a fleet file tells how far it has got (issue 11, defect 14)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from better_compute.domain.ops.fleet import parse_fleet
from better_compute.entrypoints.fleet import fleet_progress, load_fleet
from better_compute.service.fleet import inventory
from better_compute.storage.store import Store
from tests.builders import T0

FLEET = {
    "tenants": [{"id": "platform"}],
    "clusters": [
        {
            "name": "c1",
            "region": "r1",
            "nodes": [{"name": "ex", "replicas": 5, "gpus": {"model": "A100-80GB", "count": 1}}],
        }
    ],
}


def test_a_slow_fleet_load_shows_progress_on_a_terminal(store: Store) -> None:
    # Defect 14 of issue 11: `serve --fleet` with a large file sat silent until it served.
    heard: list[tuple[int, int]] = []
    assert load_fleet(store, parse_fleet(FLEET), T0, batch=2, progress=lambda d, t: heard.append((d, t))) == 5
    assert heard == [(2, 5), (4, 5), (5, 5)]

    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, width=80)
    with fleet_progress(terminal) as report:
        assert report is not None
        report(3, 5)
        terminal.file.flush()
    assert "loading fleet" in screen.getvalue() and "3/5" in screen.getvalue()


def test_fleet_progress_stays_quiet_off_a_terminal() -> None:
    piped = io.StringIO()
    with fleet_progress(Console(file=piped, force_terminal=False)) as report:
        assert report is None
    assert piped.getvalue() == ""


def test_a_fleet_load_in_batches_side_by_side_lands_every_node_and_counts_each_once(store: Store) -> None:
    heard: list[tuple[int, int]] = []
    assert load_fleet(store, parse_fleet(FLEET), T0, batch=1, progress=lambda d, t: heard.append((d, t))) == 5
    assert heard == [(n, 5) for n in range(1, 6)]
    with store.read() as tx:
        nodes = [n.id for n in tx.nodes.page(None, None, None)]
        assert len(nodes) == 5
        assert sorted({g.node_id for g in tx.gpus.of_nodes(nodes)}) == sorted(nodes)


def test_a_batch_that_fails_fails_the_fleet_load(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    real = inventory.ingest
    calls: list[int] = []

    def second_fails(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the database went away")
        return real(*args)

    monkeypatch.setattr(inventory, "ingest", second_fails)
    with pytest.raises(RuntimeError, match="went away"):
        load_fleet(store, parse_fleet(FLEET), T0, batch=1)
