"""Group commit of node reports, with a writer that records its batches: every report is answered
with its own outcome, a batch holds one report per node and at most `max_batch`, the lead passes on
once the leader's report is answered, and a writer's failure reaches every report of its batch."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from better_compute.domain.fleet.node_reports import SignedRequest
from better_compute.service.fleet.node_reports import Accepted, Outcome, Sent
from better_compute.service.fleet.report_batches import ReportBatches
from better_compute.service.kernel.ports import StorePort

NOW = datetime(2026, 1, 1, tzinfo=UTC)
STORE = cast(StorePort, object())


class Signed:
    def __init__(self, node: str, sequence: int) -> None:
        self.node, self.sequence = node, sequence


def sent(node: str, sequence: int) -> Sent:
    return Sent(cast(SignedRequest, Signed(node, sequence)), lambda body: cast(Any, None), NOW)


class Writer:
    """Answers each report with its node and sequence; the first batch waits for `release`."""

    def __init__(self, fail_batch: int | None = None) -> None:
        self.release = threading.Event()
        self.batches: list[list[tuple[str, int]]] = []
        self.fail_batch = fail_batch

    def __call__(self, store: StorePort, batch: list[Sent]) -> list[Outcome]:
        self.batches.append([(s.signed.node, s.signed.sequence) for s in batch])
        if len(self.batches) == 1:
            assert self.release.wait(30)
        if self.fail_batch == len(self.batches):
            raise RuntimeError("the database went away")
        return [Accepted(s.signed.node, "Inventory", s.signed.sequence) for s in batch]


def run(reports: ReportBatches, writer: Writer, first: Sent, later: list[Sent]) -> list[Any]:
    """`first` is written alone (and held); `later` queue behind it; then everything is let go."""
    outcomes: list[Any] = [None] * (1 + len(later))

    def send(n: int, item: Sent) -> None:
        try:
            outcomes[n] = reports.accept(STORE, item)
        except Exception as error:  # the test asserts on it
            outcomes[n] = error

    threads = [threading.Thread(target=send, args=(0, first))]
    threads[0].start()
    while not writer.batches:
        time.sleep(0.002)
    for n, item in enumerate(later, start=1):
        threads.append(threading.Thread(target=send, args=(n, item)))
        threads[-1].start()
        while len(reports._queue) < n:
            time.sleep(0.002)
    writer.release.set()
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive()
    return outcomes


def test_each_report_hears_its_own_outcome_and_a_batch_holds_one_report_per_node() -> None:
    writer = Writer()
    reports = ReportBatches(write=writer, max_batch=3)
    later = [sent("b", 1), sent("a", 2), sent("c", 1), sent("b", 2), sent("d", 1), sent("a", 3)]
    outcomes = run(reports, writer, sent("a", 1), later)
    assert [(o.node, o.sequence) for o in outcomes] == [
        ("a", 1),
        *((s.signed.node, s.signed.sequence) for s in later),
    ]
    # Oldest first, one per node, at most three: a node's later reports wait for the next batch.
    assert writer.batches == [[("a", 1)], [("b", 1), ("a", 2), ("c", 1)], [("b", 2), ("d", 1), ("a", 3)]]
    assert not reports._leading and not reports._queue


def test_a_failed_write_reaches_every_report_of_its_batch_and_the_next_batch_goes_on() -> None:
    writer = Writer(fail_batch=2)
    reports = ReportBatches(write=writer, max_batch=2)
    outcomes = run(reports, writer, sent("a", 1), [sent("b", 1), sent("c", 1), sent("d", 1)])
    assert isinstance(outcomes[0], Accepted)
    assert [str(o) for o in outcomes[1:3]] == ["the database went away"] * 2
    assert isinstance(outcomes[3], Accepted) and outcomes[3].node == "d"
    assert writer.batches == [[("a", 1)], [("b", 1), ("c", 1)], [("d", 1)]]


def test_a_report_sent_when_nothing_is_queued_is_written_at_once_by_its_own_thread() -> None:
    written_on: list[str] = []

    def writer(store: StorePort, batch: list[Sent]) -> list[Outcome]:
        written_on.append(threading.current_thread().name)
        return [Accepted(s.signed.node, "Inventory", s.signed.sequence) for s in batch]

    reports = ReportBatches(write=writer)
    assert reports.accept(STORE, sent("a", 1)) == Accepted("a", "Inventory", 1)
    assert reports.accept(STORE, sent("a", 2)).sequence == 2
    assert written_on == [threading.current_thread().name] * 2


@pytest.mark.parametrize("max_batch", [1, 4])
def test_many_threads_racing_are_all_answered(max_batch: int) -> None:
    def writer(store: StorePort, batch: list[Sent]) -> list[Outcome]:
        assert len({s.signed.node for s in batch}) == len(batch) <= max_batch
        return [Accepted(s.signed.node, "Inventory", s.signed.sequence) for s in batch]

    reports = ReportBatches(write=writer, max_batch=max_batch)
    answers: list[tuple[str, int]] = []
    lock = threading.Lock()
    start = threading.Barrier(16)

    def node(n: int) -> None:
        start.wait()
        for sequence in range(1, 26):
            answer = reports.accept(STORE, sent(f"n{n % 5}", sequence * 100 + n))
            with lock:
                answers.append((answer.node, answer.sequence))

    threads = [threading.Thread(target=node, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()
    assert sorted(answers) == sorted((f"n{n % 5}", s * 100 + n) for n in range(16) for s in range(1, 26))
