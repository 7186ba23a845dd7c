"""Signed inventory reports that arrive while others are being written are written together, on
SQLite and PostgreSQL: each sender is answered as if its report were alone, a report that fails a
check writes nothing while the rest of its batch lands, and a batch whose shared write fails is
written again one report at a time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from better_compute.client import Compute, ConflictError, InvalidInputError
from better_compute.service.fleet import node_reports
from better_compute.service.fleet.node_reports import Outcome, Sent
from better_compute.service.fleet.report_batches import ReportBatches
from better_compute.service.kernel.ports import StorePort
from better_compute.service.tx import Tx
from better_compute.storage.store import Store
from tests.api.test_node_reports import inventory
from tests.node_world import NodeWorld


@pytest.fixture
def world(store: Store, tmp_path: Path) -> NodeWorld:
    return NodeWorld(store, tmp_path)


class HeldFirst:
    """`accept_batch`, recording each batch's nodes; the first batch waits for `release`, so that the
    reports sent meanwhile queue behind it."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.batches: list[list[str]] = []

    def __call__(self, store: StorePort[Tx], batch: list[Sent]) -> list[Outcome]:
        self.batches.append([s.signed.node for s in batch])
        if len(self.batches) == 1:
            assert self.release.wait(30)
        return node_reports.accept_batch(store, batch)


def batched(world: NodeWorld) -> tuple[HeldFirst, ReportBatches]:
    writer = HeldFirst()
    reports: ReportBatches = world.http.app.state.services.reports  # type: ignore[attr-defined]
    reports._write = writer
    return writer, reports


def queued(reports: ReportBatches, count: int) -> None:
    """Wait until `count` reports wait behind the one being written."""
    deadline = time.monotonic() + 30
    while len(reports._queue) < count:
        assert time.monotonic() < deadline, "the reports never queued"
        time.sleep(0.005)


def in_threads(*calls: Callable[[], Any]) -> tuple[list[threading.Thread], list[Any]]:
    """Run each call on its own thread, in order, each started once the one before is under way."""
    results: list[Any] = [None] * len(calls)

    def run(n: int) -> None:
        try:
            results[n] = calls[n]()
        except Exception as error:  # the caller asserts on it
            results[n] = error

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(calls))]
    for thread in threads:
        thread.start()
    return threads, results


def held_then_queued(
    reports: ReportBatches, writer: HeldFirst, first: Callable[[], Any], *late: Callable[[], Any]
) -> tuple[Any, list[Any]]:
    """Send `first` and hold its batch; send each of `late` meanwhile, each on its own thread, and
    once they all queue behind it let it go; (first's answer, late's answers), each an answer or the
    error raised."""
    threads, first_result = in_threads(first)
    while not writer.batches:
        time.sleep(0.005)
    late_threads, late_results = in_threads(*late)
    queued(reports, len(late))
    writer.release.set()
    for thread in [*threads, *late_threads]:
        thread.join(30)
    return first_result[0], late_results


def bookable_atoms(world: NodeWorld, node: str) -> int:
    items = world.http.get("/v1/atoms", params={"bookable": "true"}, headers=world.admin).json()["items"]
    gpus = {
        g["id"]
        for g in world.http.get("/v1/gpus", params={"node": node}, headers=world.admin).json()["items"]
    }
    return sum(1 for a in items if a["gpuId"] in gpus)


def joined_and_batched(world: NodeWorld) -> tuple[Compute, Compute, HeldFirst, ReportBatches]:
    """n-1's and n-2's clients, once both have joined, and the app's batches held at their first
    (`batched`)."""
    one, two = world.node(world.join("n-1")), world.node(world.join("n-2"))
    return one, two, *batched(world)


def both_bookable(world: NodeWorld) -> tuple[int, int]:
    """n-1's and n-2's bookable atoms."""
    return bookable_atoms(world, "n-1"), bookable_atoms(world, "n-2")


def test_reports_sent_while_one_is_written_are_written_together_and_each_answered(world: NodeWorld) -> None:
    one, two, writer, reports = joined_and_batched(world)
    before = both_bookable(world)
    first, late = held_then_queued(
        reports,
        writer,
        lambda: one.nodes.report("n-1", inventory("n-1")),
        lambda: two.nodes.report("n-2", inventory("n-2", healthy_first=False)),
        lambda: one.nodes.report("n-1", inventory("n-1", healthy_first=False)),
    )
    assert [(r.node, r.kind, r.sequence, r.duplicate) for r in [first, *late]] == [
        ("n-1", "Inventory", 1, False),
        ("n-2", "Inventory", 1, False),
        ("n-1", "Inventory", 2, False),
    ]
    assert [sorted(b) for b in writer.batches] == [["n-1"], ["n-1", "n-2"]]
    # Both reports of the second batch were applied: each node's first GPU is down now.
    assert both_bookable(world) == (before[0] - 7, before[1] - 7)
    assert reports._queue == type(reports._queue)() and not reports._leading


def test_a_report_refused_in_a_batch_writes_nothing_and_the_rest_of_the_batch_lands(world: NodeWorld) -> None:
    one, two, writer, reports = joined_and_batched(world)
    before = both_bookable(world)
    # A generation never handed to n-1: refused under its lock, after its sequence was checked.
    never = {**inventory("n-1", healthy_first=False), "observedGeneration": 99}
    _, late = held_then_queued(
        reports,
        writer,
        lambda: one.nodes.report("n-1", inventory("n-1")),
        lambda: one.nodes.report("n-1", never),
        lambda: two.nodes.report("n-2", inventory("n-2", healthy_first=False)),
    )
    assert [sorted(b) for b in writer.batches] == [["n-1"], ["n-1", "n-2"]]
    assert isinstance(late[0], InvalidInputError) and late[0].details["field"] == "generation"
    assert late[1].sequence == 1 and not late[1].duplicate
    assert both_bookable(world) == (before[0], before[1] - 7)
    # The refused report took no sequence number: n-1's last taken is still its first report's.
    with world.store.read() as tx:
        assert tx.nodes.by_ids(["n-1"])["n-1"].report_sequence == 1
    assert one.nodes.report("n-1", inventory("n-1", healthy_first=False)).sequence == 3
    assert bookable_atoms(world, "n-1") == before[0] - 7


def test_a_batch_whose_shared_write_fails_is_written_one_report_at_a_time(
    world: NodeWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two, writer, reports = joined_and_batched(world)
    real = node_reports.ingest_in
    shared: list[int] = []

    def fails_together(tx: Any, batch: Any, now: Any) -> Any:
        if len(batch) > 1:
            shared.append(len(batch))
            raise RuntimeError("the shared write failed")
        return real(tx, batch, now)

    monkeypatch.setattr(node_reports, "ingest_in", fails_together)
    before = both_bookable(world)
    _, late = held_then_queued(
        reports,
        writer,
        lambda: one.nodes.report("n-1", inventory("n-1")),
        lambda: one.nodes.report("n-1", inventory("n-1", healthy_first=False)),
        lambda: two.nodes.report("n-2", inventory("n-2", healthy_first=False)),
    )
    assert shared == [2]
    assert [(r.node, r.sequence) for r in late] == [("n-1", 2), ("n-2", 1)]
    assert both_bookable(world) == (before[0] - 7, before[1] - 7)


def test_a_resent_report_in_a_batch_is_answered_as_a_duplicate_takes_its_number_and_is_not_applied(
    world: NodeWorld,
) -> None:
    one, two, writer, reports = joined_and_batched(world)
    before = both_bookable(world)
    # n-1 resends r-1 (its answer lost, say) with what would take a GPU down if it were applied again.
    first, late = held_then_queued(
        reports,
        writer,
        lambda: one.nodes.report("n-1", inventory("n-1"), report_id="r-1"),
        lambda: one.nodes.report("n-1", inventory("n-1", healthy_first=False), report_id="r-1"),
        lambda: two.nodes.report("n-2", inventory("n-2", healthy_first=False), report_id="r-1"),
    )
    assert [sorted(b) for b in writer.batches] == [["n-1"], ["n-1", "n-2"]]
    assert [(r.node, r.sequence, r.duplicate) for r in [first, *late]] == [
        ("n-1", 1, False),
        ("n-1", 2, True),
        ("n-2", 1, False),  # the same reportId from another node is another report
    ]
    assert both_bookable(world) == (before[0], before[1] - 7)
    with world.store.read() as tx:
        assert {n.id: n.report_sequence for n in tx.nodes.by_ids(["n-1", "n-2"]).values()} == {
            "n-1": 2,
            "n-2": 1,
        }


def test_a_report_of_another_kind_is_not_held_behind_a_batch(world: NodeWorld) -> None:
    one, two, writer, reports = joined_and_batched(world)
    threads, first = in_threads(lambda: one.nodes.report("n-1", inventory("n-1")))
    while not writer.batches:
        time.sleep(0.005)
    # n-1's inventory is being written (held); n-2 says which generation it has applied meanwhile.
    observed = two.nodes.report("n-2", {"kind": "ObservedGeneration", "generation": 0})
    assert (observed.node, observed.kind, observed.sequence) == ("n-2", "ObservedGeneration", 1)
    assert writer.batches == [["n-1"]] and not reports._queue
    writer.release.set()
    for thread in threads:
        thread.join(30)
    assert first[0].sequence == 1


def test_a_report_in_a_batch_naming_another_nodes_gpu_is_refused_while_the_rest_of_the_batch_lands(
    world: NodeWorld,
) -> None:
    one, two, writer, reports = joined_and_batched(world)
    before = both_bookable(world)
    mine = inventory("n-1", healthy_first=False)
    # n-2 names n-1's second GPU as its own third one.
    stolen = {**inventory("n-2", healthy_first=False)}
    stolen["gpus"] = [*stolen["gpus"], {**mine["gpus"][1], "index": 2}]
    _, late = held_then_queued(
        reports,
        writer,
        lambda: one.nodes.report("n-1", inventory("n-1")),
        lambda: one.nodes.report("n-1", mine),
        lambda: two.nodes.report("n-2", stolen),
    )
    assert [sorted(b) for b in writer.batches] == [["n-1"], ["n-1", "n-2"]]
    assert late[0].sequence == 2
    assert isinstance(late[1], ConflictError) and late[1].reason == "GpuOwnedElsewhere"
    assert late[1].details["uuids"] == [mine["gpus"][1]["uuid"]]
    # n-1's report landed (its first GPU down); n-2's wrote nothing, and its GPU stays n-1's.
    assert both_bookable(world) == (before[0] - 7, before[1])
    with world.store.read() as tx:
        assert tx.gpus.by_ids([mine["gpus"][1]["uuid"]])[mine["gpus"][1]["uuid"]].node_id == "n-1"
        assert tx.nodes.by_ids(["n-2"])["n-2"].report_sequence == 0


def test_two_reports_of_one_batch_naming_one_new_gpu_give_it_to_one_node(world: NodeWorld) -> None:
    one, two, writer, reports = joined_and_batched(world)
    new = {**inventory("n-3")["gpus"][0], "index": 2}  # a GPU no node has reported
    _, late = held_then_queued(
        reports,
        writer,
        lambda: one.nodes.report("n-1", inventory("n-1")),
        lambda: one.nodes.report("n-1", {"kind": "Inventory", "gpus": [*inventory("n-1")["gpus"], new]}),
        lambda: two.nodes.report("n-2", {"kind": "Inventory", "gpus": [*inventory("n-2")["gpus"], new]}),
    )
    assert [sorted(b) for b in writer.batches] == [["n-1"], ["n-1", "n-2"]]
    assert late[0].sequence == 2  # the first of the batch (in node order) to name it has it
    assert isinstance(late[1], ConflictError) and late[1].details["uuids"] == [new["uuid"]]
    with world.store.read() as tx:
        assert tx.gpus.by_ids([new["uuid"]])[new["uuid"]].node_id == "n-1"
