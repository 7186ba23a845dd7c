"""Loading a fleet file: register what it names, simulate its nodes, ingest their reports."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from better_compute.bcd.fake import FakeNode
from better_compute.bcd.fleet_file import read_fleet
from better_compute.domain.ops.fleet import FleetSpec
from better_compute.service.fleet import inventory
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ops import fleet
from better_compute.service.tx import Tx

__all__ = ["fleet_model_of", "fleet_progress", "load_fleet", "read_fleet", "simulated_nodes"]


def simulated_nodes(spec: FleetSpec) -> list[FakeNode]:
    return [FakeNode.for_node(spec, node) for node in spec.nodes]


def fleet_model_of(spec: FleetSpec) -> inventory.ModelOf:
    """The catalog model of a product name a simulated node of `spec` reports: the fleet's generic
    models by their own name, the catalog's by its products."""
    generic = {m.id: m.id for m in spec.generic_models}

    def model_of(product: str) -> str | None:
        return generic.get(product) or inventory.model_id_of(product)

    return model_of


WRITERS = 2
"""Batches a fleet load writes at once on PostgreSQL."""

Report = Callable[[int, int], None]
"""Told `(nodes loaded, nodes in all)` after each batch of a fleet load."""


def load_fleet(
    store: StorePort[Tx],
    spec: FleetSpec,
    now: datetime,
    *,
    batch: int = 200,
    progress: Report | None = None,
    simulate: bool = True,
) -> int:
    """Register the fleet and, when `simulate`, ingest one simulated report per node (the report
    each node's simulated daemon would send first, so the atoms are there before it has started);
    returns the number of nodes. A large fleet takes a while, so `progress` hears after every batch
    how far it has got. Without `simulate` the nodes have no GPUs until their own daemons report."""
    fleet.register_fleet(store, spec, now)
    if not simulate:
        store.analyze()
        return len(spec.nodes)
    fakes = simulated_nodes(spec)
    batches = [fakes[i : i + batch] for i in range(0, len(fakes), batch)]

    model_of = fleet_model_of(spec)

    def ingest(nodes: list[FakeNode]) -> int:
        inventory.ingest(store, [f.report() for f in nodes], now, model_of)
        return len(nodes)

    # PostgreSQL takes batches of distinct nodes side by side: one writer's Python runs while the
    # other's statements do (SQLite has one writer at a time, so there it would only wait).
    writers = WRITERS if store.dialect == "postgresql" else 1
    done = 0
    pool = ThreadPoolExecutor(writers, thread_name_prefix="fleet-load")
    try:
        for written in pool.map(ingest, batches):
            done += written
            if progress is not None:
                progress(done, len(fakes))
    finally:  # a batch that failed stops the load: none begins after it (one under way ends)
        pool.shutdown(cancel_futures=True)
    store.analyze()
    return len(fakes)


@contextmanager
def fleet_progress(console: Console) -> Iterator[Report | None]:
    """A progress bar for `load_fleet` on `console` (stderr in `serve`) when it is a terminal, so a
    large fleet file does not look like a hang; None elsewhere, so logs and pipes stay clean."""
    if not console.is_terminal:
        yield None
        return
    columns = (
        TextColumn("loading fleet"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("nodes"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("fleet", total=None)

        def report(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield report
