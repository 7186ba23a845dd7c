"""A node's report sequence numbers, recorded for many nodes at once (`accept_sequences`): all of
them or, when one is not greater than the number stored, a refusal the caller rolls back."""

from __future__ import annotations

from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from tests.builders import T0, fleet_spec


def test_sequences_are_recorded_together_and_one_not_greater_is_told(store: Store) -> None:
    load_fleet(store, fleet_spec(nodes=3), T0)
    with store.read() as tx:
        a, b, c = sorted(n.id for n in tx.nodes.page(None, None, None))
    with store.begin() as tx:
        assert tx.nodes.accept_sequences([(a, 1, T0), (b, 5, T0), (c, 2, T0)])
    with store.begin() as tx:
        # b's 5 is taken (the same number again, as a report racing the first would carry).
        assert not tx.nodes.accept_sequences([(a, 2, T0), (b, 5, T0)])
        assert not tx.nodes.accept_sequences([(c, 1, T0)])
        assert tx.nodes.accept_sequences([])
    with store.read() as tx:
        found = tx.nodes.by_ids([a, b, c])
    # (Told of b's, a caller rolls back; this one committed, so a's 2 stands.)
    assert {n: found[n].report_sequence for n in (a, b, c)} == {a: 2, b: 5, c: 2}
