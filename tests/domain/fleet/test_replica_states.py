"""The rule for a ready container (domain.fleet.replica_states): the node said `ready` and is live,
its last contact less than `READY_LEASE` ago; and the copy and replica counts that read it."""

from __future__ import annotations

from datetime import timedelta

from better_compute.domain.endpoints.copy_states import ReadyCopy, ready_copies, ready_kept
from better_compute.domain.endpoints.records import CopyRecord
from better_compute.domain.fleet.replica_states import (
    READY_LEASE,
    ReplicaState,
    is_live,
    is_ready,
    live_nodes,
    said_ready,
)
from better_compute.domain.gate.node_spec import MAX_WAIT
from better_compute.domain.placement.workloads import Containers, containers_of
from tests.builders import T0

JUST = timedelta(microseconds=1)


def test_the_lease_outlasts_two_of_the_longest_long_polls_with_slack() -> None:
    assert 2 * MAX_WAIT + timedelta(seconds=30) <= READY_LEASE
    assert timedelta(minutes=10) > READY_LEASE  # well before doctor's node.silent


def test_a_node_is_live_until_its_last_contact_is_a_lease_old() -> None:
    assert is_live(T0, T0)
    assert is_live(T0, T0 + READY_LEASE - JUST)
    assert not is_live(T0, T0 + READY_LEASE)
    assert is_live(T0 + timedelta(seconds=5), T0)  # stamped by a server process a little ahead
    assert not is_live(None, T0)  # never reached the server
    contacts = {"n-1": T0, "n-2": T0 - READY_LEASE, "n-3": None}
    assert live_nodes(contacts, T0) == {"n-1"}
    assert live_nodes(contacts, T0 - timedelta(seconds=1)) == {"n-1", "n-2"}


def test_ready_is_the_nodes_word_while_it_is_live() -> None:
    ready = ReplicaState("d.r0", "n-1", "ready", T0)
    assert said_ready(ready) and is_ready(ready, {"n-1"})
    assert not is_ready(ready, {"n-2"}) and not is_ready(ready, frozenset())
    assert not is_ready(ReplicaState("d.r0", "n-1", "not-ready", T0), {"n-1"})
    assert not is_ready(None, {"n-1"})


def test_copies_and_replicas_on_a_node_that_is_not_live_are_not_ready() -> None:
    copies = [CopyRecord("small", 0, "a0", "n-1", T0), CopyRecord("small", 1, "a1", "n-2", T0)]
    states = {
        "copy:small:0": [ReplicaState("copy:small:0", "n-1", "ready", T0, address="h:1")],
        "copy:small:1": [ReplicaState("copy:small:1", "n-2", "ready", T0, address="h:2")],
    }
    assert ready_copies(copies, states, {"n-1", "n-2"}) == [
        ReadyCopy("small", 0, "n-1", "h:1"),
        ReadyCopy("small", 1, "n-2", "h:2"),
    ]
    assert ready_copies(copies, states, {"n-1"}) == [ReadyCopy("small", 0, "n-1", "h:1")]
    assert ready_kept(copies, {0: "n-1", 1: "n-2"}, states, {"n-2"}) == 1
    assert ready_kept(copies, {0: "n-1", 1: "n-2"}, states, frozenset()) == 0
    replicas = {
        "d.r0": [ReplicaState("d.r0", "n-1", "ready", T0)],
        "d.r1": [ReplicaState("d.r1", "n-2", "ready", T0)],
    }
    assert containers_of(["d.r0", "d.r1"], replicas, {"n-1", "n-2"}) == Containers(existing=2, ready=2)
    assert containers_of(["d.r0", "d.r1"], replicas, {"n-2"}) == Containers(existing=2, ready=1)
