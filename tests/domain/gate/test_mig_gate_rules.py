"""The layout gate's pure rules (domain.gate.mig_gate)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from better_compute.domain.fleet.pools import PoolSettings
from better_compute.domain.fleet.records import Pool
from better_compute.domain.gate import mig_gate as rules
from better_compute.domain.gate.records import MigLayoutGate
from tests.builders import T0

OLD, NEW = "all-1g.10gb", "mixed:3g.40gb+2x2g.20gb"


def gate(state: str, **kw: object) -> MigLayoutGate:
    return MigLayoutGate("n", "p", OLD, NEW, state, T0, scheduled_from=T0, **kw)  # type: ignore[arg-type]


def test_a_granted_node_with_a_live_tenant_hold_is_told_its_frozen_layout() -> None:
    granted = gate(rules.GRANTED, granted_at=T0, granted_generation=3)
    assert rules.told_layout(None, granted) == NEW
    assert rules.told_layout(None, granted, held=True) == OLD  # a spec server whose clock lags


def test_a_new_generation_telling_a_granted_node_its_frozen_layout_moves_the_grant_to_it() -> None:
    granted = gate(rules.GRANTED, granted_at=T0, granted_generation=3)
    again = rules.told_frozen_again(granted, True, 4)
    assert again is not None and again.granted_generation == 4 and again.version == granted.version + 1
    assert again.granted_at == T0  # how long it has been granted is unchanged (doctor's stuck check)
    converged = rules.NodeFacts(True, 4, 4, booked_until=None)
    assert isinstance(rules.next_step(again, converged, T0), rules.Wait)  # its report of 4 is not enough
    assert rules.told_frozen_again(granted, False, 4) is None  # told the new layout: nothing to move
    assert rules.told_frozen_again(granted, True, 3) is None
    assert rules.told_frozen_again(gate(rules.SCHEDULED), True, 4) is None
    assert rules.told_frozen_again(None, True, 4) is None


def test_a_grant_that_changes_nothing_the_node_is_told_counts_as_applied_once_it_has_its_generation() -> None:
    granted = gate(rules.GRANTED, granted_at=T0, granted_generation=3)
    settled = rules.told_already(granted, 3, True)
    assert settled is not None and settled.granted_generation == 2 and settled.version == granted.version + 1
    assert rules.next_step(settled, rules.NodeFacts(True, 3, 3, booked_until=None), T0) == rules.Apply()
    behind = rules.NodeFacts(True, 3, 2, booked_until=None)
    assert isinstance(rules.next_step(settled, behind, T0), rules.Wait)  # it has not converged 3 yet
    assert rules.told_already(granted, 3, False) is None  # the content moves: its next generation tells it
    assert rules.told_already(gate(rules.SCHEDULED), 3, True) is None
    assert rules.told_already(None, 3, True) is None
    assert rules.told_already(settled, 3, True) is None  # already settled


def test_a_change_to_the_layout_a_node_is_frozen_at_is_not_shown_as_a_change() -> None:
    assert rules.changing_to(gate(rules.GRANTED)) == NEW
    assert rules.changing_to(replace(gate(rules.GRANTED), pending_layout=OLD)) is None
    assert rules.changing_to(None) is None


def test_only_a_change_never_granted_is_undone_by_going_back() -> None:
    never = gate(rules.SCHEDULED)
    assert isinstance(rules.requested(never, "n", "p", OLD, OLD, T0), rules.Drop)
    once = gate(rules.SCHEDULED, granted_at=T0, granted_generation=3)
    kept = rules.requested(once, "n", "p", OLD, OLD, T0)
    # Back to its grant, whose generation still says when the node has the layout.
    assert isinstance(kept, rules.Put) and kept.gate.state == rules.GRANTED
    assert kept.gate.granted_generation == 3


def test_a_scheduled_node_is_not_granted_while_a_booking_reaches_past_its_time() -> None:
    scheduled = gate(rules.SCHEDULED)
    late = rules.NodeFacts(True, 1, 1, booked_until=T0 + timedelta(hours=1))
    assert isinstance(rules.next_step(scheduled, late, T0 + timedelta(minutes=1)), rules.Wait)
    clear = rules.NodeFacts(True, 1, 1, booked_until=None)
    assert rules.next_step(scheduled, clear, T0) == rules.Grant(release=False)


def test_a_node_scheduled_later_moves_sooner_only_when_its_bookings_end_before_its_time() -> None:
    at = T0 + timedelta(hours=5)
    scheduled = replace(gate(rules.SCHEDULED), scheduled_from=at)
    now = T0 + timedelta(minutes=10)

    def facts(until: timedelta | None, open_ended: bool = False) -> rules.NodeFacts:
        return rules.NodeFacts(True, 1, 1, None if until is None else T0 + until, open_ended)

    # The booking that held it back was released: nothing left, so from now.
    assert rules.next_step(scheduled, facts(None), now) == rules.Schedule(now)
    # Bookings left end sooner than its time: from the last of them.
    assert rules.next_step(scheduled, facts(timedelta(hours=2)), now) == rules.Schedule(
        T0 + timedelta(hours=2)
    )
    # Still held back as far as its time (or one never ends): it waits for its time.
    assert isinstance(rules.next_step(scheduled, facts(timedelta(hours=5)), now), rules.Wait)
    assert isinstance(rules.next_step(scheduled, facts(None, open_ended=True), now), rules.Wait)


def slot_gate(state: str, **kw: object) -> MigLayoutGate:
    return MigLayoutGate(  # type: ignore[arg-type]
        "n", "p", rules.slots_shape(4), rules.slots_shape(2), state, T0, scheduled_from=T0, **kw
    )


def test_a_slot_count_is_a_shape_no_layout_name_can_be() -> None:
    assert rules.shape_replicas(rules.slots_shape(7)) == 7
    assert rules.shape_replicas(OLD) is None and rules.shape_replicas(NEW) is None
    assert rules.shape_replicas(None) is None


def test_a_node_under_a_slot_change_is_told_its_frozen_count_until_the_grant() -> None:
    pool = Pool("p", "p", "c", "platform", "mps", PoolSettings(replicas=2), "gpu-hours", 1, T0)
    assert rules.told_replicas(pool, slot_gate(rules.SCHEDULED)) == 4
    granted = slot_gate(rules.GRANTED, granted_at=T0, granted_generation=3)
    assert rules.told_replicas(pool, granted) == 2
    assert rules.told_replicas(pool, granted, held=True) == 4
    assert rules.told_replicas(pool, None) == 2
    assert rules.told_layout(pool, granted) == "all-disabled"  # a slot change tells no MIG layout


def test_a_slot_change_holds_a_joined_node_until_it_reports_and_releases_one_without_a_daemon() -> None:
    scheduled = slot_gate(rules.SCHEDULED)
    joined = rules.NodeFacts(True, 1, 1, booked_until=None, joined=True)
    assert rules.next_step(scheduled, joined, T0) == rules.Grant(release=False)
    alone = rules.NodeFacts(True, 1, 1, booked_until=None, joined=False)
    assert rules.next_step(scheduled, alone, T0) == rules.Grant(release=True)
    # `carriesPoolLayout` is about MIG layouts: a node that keeps its own still takes its slot count.
    own = rules.NodeFacts(False, 1, 1, booked_until=None, joined=True)
    assert rules.next_step(scheduled, own, T0) == rules.Grant(release=False)
