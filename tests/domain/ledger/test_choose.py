"""Choosing atoms: together first (GPU, NVLink, NUMA, node), then few fragments, all or nothing."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from better_compute.domain.fleet.atoms import Atom
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.admission import DeviceRequest
from better_compute.domain.ledger.choose import (
    Chosen,
    NoFit,
    choose,
    cordoned_note,
    earliest_common_start,
    kinds_of,
    matching,
    never_fits,
    shortlist,
)
from tests.builders import atom, device_request

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def h(n: float) -> datetime:
    return T0 + timedelta(hours=n)


def gpu(
    gpu_id: str, node: str = "n1", numa: int | None = 0, nvlink: str | None = None, bookable: bool = True
) -> Atom:
    return atom(
        gpu_id,
        node=node,
        numa_node=numa,
        nvlink_domain=nvlink,
        bookable=bookable,
        attributes={"gpuModel": "H100-80GB", "vramGiB": 80},
    )


def slots(gpu_id: str, n: int, node: str = "n1", numa: int | None = 0, first: int = 0) -> list[Atom]:
    return [
        atom(
            gpu_id,
            f"slot:{i}",
            node=node,
            numa_node=numa,
            attributes={"sharing": "timeslice", "slot": i, "slots": 4},
        )
        for i in range(first, first + n)
    ]


def migs(gpu_id: str, profiles: list[str], node: str = "n1") -> list[Atom]:
    return [
        atom(gpu_id, f"mig:{gi}.0", node=node, attributes={"migProfile": profile, "giId": gi, "ciId": 0})
        for gi, profile in enumerate(profiles, start=1)
    ]


def chosen(result: Chosen | NoFit) -> tuple[tuple[str, ...], ...]:
    assert isinstance(result, Chosen), result
    return result.atoms_per_request


def test_a_request_stays_on_one_gpu_when_it_can() -> None:
    atoms = slots("g1", 1, first=3) + slots("g2", 4)
    assert chosen(choose([device_request("gpu.slot", 2)], atoms, {"g1": 3})) == (("g2/slot:0", "g2/slot:1"),)


def test_nvlink_domain_before_numa_node() -> None:
    atoms = [
        gpu("g0", numa=0),
        gpu("g1", numa=0),
        gpu("g2", numa=0, nvlink="nvl-a"),
        gpu("g3", numa=1, nvlink="nvl-a"),
    ]
    assert chosen(choose([device_request("gpu", 2)], atoms, {})) == (("g2/gpu", "g3/gpu"),)


def test_numa_node_before_the_rest_of_the_node() -> None:
    atoms = [gpu("g0", numa=0), gpu("g1", numa=1), gpu("g2", numa=1), gpu("g3", numa=2)]
    assert chosen(choose([device_request("gpu", 2)], atoms, {})) == (("g1/gpu", "g2/gpu"),)


def test_one_node_before_several() -> None:
    atoms = [
        gpu("a0", node="a", numa=0),
        gpu("b0", node="b", numa=0),
        gpu("b1", node="b", numa=1),
        gpu("c0", node="c", numa=0),
    ]
    assert chosen(choose([device_request("gpu", 2)], atoms, {})) == (("b0/gpu", "b1/gpu"),)


def test_a_request_no_node_holds_spreads_over_the_fewest_nodes() -> None:
    atoms = [gpu("a0", node="a"), gpu("b0", node="b"), gpu("b1", node="b"), gpu("c0", node="c")]
    result = chosen(choose([device_request("gpu", 3)], atoms, {}))
    assert result == (("b0/gpu", "b1/gpu", "a0/gpu"),)


def test_partly_used_gpus_fill_before_untouched_ones() -> None:
    atoms = slots("g1", 4) + slots("g2", 2, first=2) + slots("g3", 1, first=3)
    assert chosen(choose([device_request("gpu.slot", 1)], atoms, {"g2": 2, "g3": 3})) == (("g3/slot:3",),)
    assert chosen(choose([device_request("gpu.slot", 2)], atoms, {"g2": 2, "g3": 3})) == (
        ("g2/slot:2", "g2/slot:3"),
    )


def test_between_equally_busy_gpus_the_tightest_fit_wins() -> None:
    atoms = migs("g1", ["1g.10gb"] * 7) + migs("g2", ["1g.10gb", "1g.10gb", "3g.40gb"])
    result = chosen(choose([device_request("gpu.mig", 1, migProfile=["1g.10gb"])], atoms, {"g1": 2, "g2": 2}))
    assert result == (("g2/mig:1.0",),)


def test_the_busiest_gpu_wins_over_the_tightest_fit() -> None:
    atoms = migs("g1", ["1g.10gb"] * 5) + migs("g2", ["1g.10gb"])
    assert chosen(choose([device_request("gpu.mig", 1)], atoms, {"g1": 2})) == (("g1/mig:1.0",),)


def test_the_selector_decides_the_profile() -> None:
    atoms = migs("g1", ["1g.10gb", "3g.40gb"]) + migs("g2", ["3g.40gb"])
    result = chosen(choose([device_request("gpu.mig", 1, migProfile=["3g.40gb"])], atoms, {"g1": 5}))
    assert result == (("g1/mig:2.0",),)


def test_whole_gpu_requests_take_only_bookable_gpu_atoms() -> None:
    atoms = [gpu("g0", bookable=False), *slots("g0", 4), gpu("g1", node="n2")]
    assert chosen(choose([device_request("gpu", 1)], atoms, {})) == (("g1/gpu",),)
    result = choose([device_request("gpu", 2)], atoms, {})
    assert isinstance(result, NoFit)
    assert result.message == "devices[0]: 2 gpu atoms wanted, 1 free in the pool for that window"


def test_requests_of_one_reservation_never_share_atoms_and_gather() -> None:
    atoms = slots("g1", 4) + slots("g2", 4, node="n2")
    result = chosen(choose([device_request("gpu.slot", 1), device_request("gpu.slot", 2)], atoms, {}))
    assert result == (("g1/slot:0",), ("g1/slot:1", "g1/slot:2"))


def test_all_or_nothing_names_the_request_that_does_not_fit() -> None:
    atoms = [gpu("g0"), gpu("g1")]
    result = choose([device_request("gpu", 1), device_request("gpu", 2)], atoms, {})
    assert result == NoFit(
        1,
        "2 gpu atoms wanted, 1 free in the pool for that window"
        " besides those the reservation's other requests take",
        2,
        1,
    )
    assert result.field == "devices[1]"


def test_the_no_fit_message_mentions_the_selector() -> None:
    result = choose([device_request("gpu.mig", 1, migProfile=["7g.80gb"])], migs("g1", ["1g.10gb"]), {})
    assert isinstance(result, NoFit)
    assert (
        result.message
        == "devices[0]: 1 gpu.mig atom matching the selector wanted, 0 free in the pool for that window"
    )


def test_a_narrow_request_is_served_even_when_a_broad_one_comes_first() -> None:
    atoms = migs("g1", ["3g.40gb", "1g.10gb"])
    result = chosen(
        choose(
            [device_request("gpu.mig", 1), device_request("gpu.mig", 1, migProfile=["3g.40gb"])], atoms, {}
        )
    )
    assert result == (("g1/mig:2.0",), ("g1/mig:1.0",))


def test_choices_do_not_depend_on_candidate_order() -> None:
    atoms = (
        [gpu(f"g{i}", node=f"n{i % 3}", numa=i % 2, nvlink="x" if i % 4 == 0 else None) for i in range(24)]
        + slots("s1", 4, node="n9")
        + slots("s2", 3, node="n9", first=1)
    )
    requests = [device_request("gpu", 3), device_request("gpu.slot", 2), device_request("gpu", 1)]
    expected = choose(requests, atoms, {"s2": 1})
    rng = random.Random(7)
    for _ in range(20):
        shuffled = atoms[:]
        rng.shuffle(shuffled)
        assert choose(requests, shuffled, {"s2": 1}) == expected


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1), st.integers(1, 4)), min_size=1, max_size=12),
    st.lists(st.tuples(st.sampled_from(["gpu", "gpu.slot"]), st.integers(1, 6)), min_size=1, max_size=4),
)
def test_chosen_atoms_are_distinct_of_the_right_class_and_count(
    layout: list[tuple[int, int, int]], wanted: list[tuple[str, int]]
) -> None:
    atoms: list[Atom] = []
    for i, (node, numa, n_slots) in enumerate(layout):
        if i % 2:
            atoms.append(gpu(f"g{i}", node=f"n{node}", numa=numa))
        else:
            atoms.extend(slots(f"g{i}", n_slots, node=f"n{node}", numa=numa))
    requests = [device_request(cls, count) for cls, count in wanted]
    result = choose(requests, atoms, {})
    by_id = {a.id: a for a in atoms}
    supply = Counter(a.cls for a in atoms)
    demand: Counter[str] = Counter()
    for cls, count in wanted:
        demand[cls] += count
    if isinstance(result, NoFit):
        assert any(demand[c] > supply[c] for c in demand)
        return
    assert all(demand[c] <= supply[c] for c in demand)
    ids = result.atom_ids
    assert len(ids) == len(set(ids))
    for request, picked in zip(requests, result.atoms_per_request, strict=True):
        assert len(picked) == request.count
        assert all(by_id[a].cls == request.cls for a in picked)


def test_matching_filters_class_bookability_and_selector() -> None:
    atoms = [gpu("g0", bookable=False), gpu("g1"), *migs("g2", ["1g.10gb", "3g.40gb"])]
    assert [a.id for a in matching(device_request("gpu"), atoms)] == ["g1/gpu"]
    assert [a.id for a in matching(device_request("gpu.mig", migProfile=["3g.40gb"]), atoms)] == [
        "g2/mig:2.0"
    ]


def test_a_big_candidate_set_is_chosen_on_the_fullest_gpu() -> None:
    # How fast: bench/reservations.py times admission over 56,000 atoms (timings live in benchmarks).
    atoms: list[Atom] = []
    for n in range(250):
        for g in range(8):
            gpu_id = f"n{n}-g{g}"
            atoms.extend(migs(gpu_id, ["1g.10gb"] * 7 + ["3g.40gb"] * 2 + ["2g.20gb"] * 16, node=f"n{n}"))
    assert len(atoms) == 50_000
    busy = {f"n{n}-g{g}": (n * g) % 5 for n in range(250) for g in range(8)}
    requests = [
        device_request("gpu.mig", 3, migProfile=["1g.10gb"]),
        device_request("gpu.mig", 40, migProfile=["2g.20gb"]),
        device_request("gpu.mig", 1),
    ]
    result = choose(requests, atoms, busy)
    assert isinstance(result, Chosen)
    gpus_of_first = {a.split("/")[0] for a in result.atoms_per_request[0]}
    assert len(gpus_of_first) == 1 and busy[next(iter(gpus_of_first))] == 4


def test_atoms_busy_until_different_times_are_free_together_from_the_kth_end() -> None:
    busy = {"a": [Window(h(0), h(3))], "b": [Window(h(0), h(1))], "c": [Window(h(0), h(2))]}
    hour = timedelta(hours=1)
    assert earliest_common_start(busy, 1, hour, h(0)) == h(1)
    assert earliest_common_start(busy, 2, hour, h(0)) == h(2)
    assert earliest_common_start(busy, 3, hour, h(0)) == h(3)
    assert earliest_common_start(busy, 4, hour, h(0)) is None


def test_earliest_common_start_respects_gaps_between_bookings() -> None:
    busy = {
        "a": [Window(h(0), h(1)), Window(h(3), h(10))],
        "b": [Window(h(0), h(2))],
    }
    # For an hour, a fits from 1h to 2h and from 10h on, b from 2h on: both at 2h.
    assert earliest_common_start(busy, 2, timedelta(hours=1), h(0)) == h(2)
    # For 90 minutes, a fits only at 1h..1h30 before 10h, when b is still booked.
    assert earliest_common_start(busy, 2, timedelta(minutes=90), h(0)) == h(10)
    assert earliest_common_start(busy, 1, timedelta(hours=1), h(0)) == h(1)
    assert earliest_common_start(busy, 1, timedelta(hours=3), h(0)) == h(2)
    assert earliest_common_start(busy, 3, timedelta(hours=1), h(0)) is None


def test_earliest_common_start_with_open_ended_bookings_and_requests() -> None:
    busy = {
        "a": [Window(h(2), None)],
        "b": [Window(h(0), h(5)), Window(h(6), h(7))],
        "c": [Window(h(0), h(4))],
    }
    assert earliest_common_start(busy, 1, timedelta(hours=1), h(0)) == h(0)
    assert earliest_common_start(busy, 2, timedelta(hours=1), h(0)) == h(5)
    assert earliest_common_start(busy, 2, None, h(0)) == h(7)
    assert earliest_common_start(busy, 3, timedelta(minutes=30), h(0)) is None
    assert earliest_common_start(busy, 2, timedelta(hours=2), h(0)) == h(7)
    assert earliest_common_start({"free": []}, 1, None, h(3)) == h(3)


def test_earliest_common_start_never_goes_before_not_before() -> None:
    busy = {"a": [Window(h(-6), h(1))], "b": []}
    assert earliest_common_start(busy, 2, timedelta(hours=1), h(-5)) == h(1)
    assert earliest_common_start(busy, 2, timedelta(hours=1), h(4)) == h(4)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 30), st.integers(1, 6)), max_size=4),
        min_size=1,
        max_size=5,
    ),
    st.integers(1, 5),
    st.integers(1, 6),
)
def test_earliest_common_start_agrees_with_a_brute_force_scan(
    bookings: list[list[tuple[int, int]]], count: int, length: int
) -> None:
    busy = {f"a{i}": [Window(h(s), h(s + n)) for s, n in spans] for i, spans in enumerate(bookings)}

    def free_at(atom: str, t: int) -> bool:
        want = Window(h(t), h(t + length))
        return not any(w.overlaps(want) for w in busy[atom])

    expected = next((t for t in range(40) if sum(free_at(a, t) for a in busy) >= count), None)
    got = earliest_common_start(busy, count, timedelta(hours=length), h(0))
    assert got == (None if expected is None else h(expected))


def test_inside_an_nvlink_domain_a_request_keeps_to_one_numa_node() -> None:
    # One node, one NVLink domain over 8 GPUs: GPUs 0-3 on NUMA 0, 4-7 on NUMA 1; g5 is busy.
    atoms = [gpu(f"g{i}", numa=0 if i < 4 else 1, nvlink="nvl") for i in range(8)]
    free = [a for a in atoms if a.gpu_id != "g5"]
    busy = {"g5": 1}
    numa = {a.id: a.numa_node for a in atoms}
    three = choose([device_request("gpu", 3)], free, busy)
    assert isinstance(three, Chosen)
    # Three fit on either NUMA node: the one with a busy GPU fills up first (few fragments).
    assert {numa[a] for a in three.atom_ids} == {1}
    four = choose([device_request("gpu", 4)], free, busy)
    assert isinstance(four, Chosen)
    assert {numa[a] for a in four.atom_ids} == {0}  # only NUMA 0 has four free
    six = choose([device_request("gpu", 6)], free, busy)
    assert isinstance(six, Chosen) and len({numa[a] for a in six.atom_ids}) == 2  # neither can: both


def test_kinds_of_lists_the_bookable_classes_and_profiles_smallest_first() -> None:
    atoms = [gpu("g0", bookable=False), *migs("g0", ["3g.40gb", "1g.10gb", "2g.20gb", "1g.10gb+me"])]
    kinds = kinds_of(atoms)
    assert kinds.classes == ("gpu.mig",)
    assert kinds.profiles == ("1g.10gb", "1g.10gb+me", "2g.20gb", "3g.40gb")


def test_never_fits_names_the_first_request_the_whole_pool_cannot_serve() -> None:
    """Issue 11, defect 4: what can never be is told apart from what is busy."""
    atoms = [gpu("g0", bookable=False), *migs("g0", ["3g.40gb", "2g.20gb", "2g.20gb"])]
    kinds = kinds_of(atoms)
    requests = [
        device_request("gpu.mig", 1),
        device_request("gpu.mig", 3, migProfile=["2g.20gb"]),
        device_request("gpu", 1),
    ]
    in_pool = [len(matching(r, atoms)) for r in requests]
    assert in_pool == [3, 2, 0]
    never = never_fits(requests, in_pool, kinds, "p1")
    assert never is not None and never.never and never.request_index == 1
    assert never.message == (
        "devices[1]: 3 gpu.mig atoms matching the selector wanted, pool p1 has 2 in all "
        "(profiles in this pool: 2g.20gb, 3g.40gb)"
    )
    never = never_fits(requests[2:], in_pool[2:], kinds, "p1")
    assert never is not None and never.message == (
        "devices[0]: pool p1 has no gpu atom (atom classes in this pool: gpu.mig; its GPUs are split)"
    )
    assert never_fits(requests[:1], in_pool[:1], kinds, "p1") is None
    assert never_fits(requests[2:], [0], kinds_of([]), "p1") == NoFit(
        0, "pool p1 has no gpu atom (it has no bookable atoms)", 1, 0, never=True
    )


def _spread(atoms: list[Atom], ids: tuple[str, ...]) -> int:
    """How far apart the chosen atoms are: 0 one GPU, 1 one NVLink domain, 2 one NUMA node, 3 one
    node, 4 several nodes (the topology order of rule 1)."""
    by_id = {a.id: a for a in atoms}
    picked = [by_id[i] for i in ids]
    levels = [
        lambda a: a.gpu_id,
        lambda a: None if a.nvlink_domain is None else (a.node, a.nvlink_domain),
        lambda a: None if a.numa_node is None else (a.node, a.numa_node),
        lambda a: a.node,
    ]
    for depth, level in enumerate(levels):
        keys = {level(a) for a in picked}
        if len(keys) == 1 and None not in keys:
            return depth
    return 4


def test_the_requests_of_one_reservation_are_kept_together_like_one_request() -> None:
    """Issue 11, defect 19: [{gpu,1},{gpu,1}] on an empty pool landed on two nodes."""
    atoms = [gpu("a0", node="a"), gpu("b0", node="b"), gpu("b1", node="b"), gpu("c0", node="c")]
    one = chosen(choose([device_request("gpu", 2)], atoms, {}))
    split = chosen(choose([device_request("gpu", 1), device_request("gpu", 1)], atoms, {}))
    assert one == (("b0/gpu", "b1/gpu"),)
    assert split == (("b0/gpu",), ("b1/gpu",))
    # And by NVLink domain before NUMA node, as one request would be.
    atoms = [
        gpu("g0", numa=0),
        gpu("g1", numa=0),
        gpu("g2", numa=0, nvlink="x"),
        gpu("g3", numa=1, nvlink="x"),
    ]
    split = chosen(choose([device_request("gpu", 1), device_request("gpu", 1)], atoms, {}))
    assert sorted(a for ids in split for a in ids) == ["g2/gpu", "g3/gpu"]


def test_a_reservation_with_requests_of_two_classes_stays_on_one_gpu() -> None:
    atoms = migs("g1", ["1g.10gb", "3g.40gb"], node="a") + migs("g2", ["1g.10gb"], node="b")
    atoms += migs("g3", ["3g.40gb"], node="c")
    split = chosen(
        choose(
            [
                device_request("gpu.mig", 1, migProfile=["3g.40gb"]),
                device_request("gpu.mig", 1, migProfile=["1g.10gb"]),
            ],
            atoms,
            {},
        )
    )
    assert split == (("g1/mig:2.0",), ("g1/mig:1.0",))


_topology = st.lists(
    st.tuples(st.sampled_from("abc"), st.integers(0, 1), st.sampled_from([None, "x", "y"])),
    min_size=1,
    max_size=10,
)


@settings(max_examples=200, deadline=None)
@given(_topology, st.lists(st.integers(1, 2), min_size=2, max_size=3))
def test_a_reservation_is_never_spread_wider_than_one_request_of_its_total(
    topology: list[tuple[str, int, str | None]], counts: list[int]
) -> None:
    atoms = [gpu(f"g{i}", node=node, numa=numa, nvlink=nvl) for i, (node, numa, nvl) in enumerate(topology)]
    total = sum(counts)
    one = choose([device_request("gpu", total)], atoms, {})
    split = choose([device_request("gpu", n) for n in counts], atoms, {})
    assert isinstance(one, Chosen) == isinstance(split, Chosen)
    if isinstance(one, Chosen) and isinstance(split, Chosen):
        assert _spread(atoms, split.atom_ids) <= _spread(atoms, one.atom_ids)
        assert len(set(split.atom_ids)) == total


def test_never_fits_counts_atoms_of_cordoned_nodes_apart() -> None:
    kinds = kinds_of([gpu("g0"), gpu("g1")])
    one, three = device_request("gpu", 1), device_request("gpu", 3)
    # Only a cordon keeps it from fitting: the message says so, and how many are cordoned.
    never = never_fits([one], [0], kinds, "p1", [2])
    assert never == NoFit(
        0,
        "1 gpu atom wanted, pool p1 has 0 on nodes that take new bookings and 2 more on cordoned nodes",
        1,
        0,
        never=True,
        cordoned=2,
    )
    # More than the pool has at all: said as ever, the cordoned ones counted apart.
    never = never_fits([three], [1], kinds, "p1", [1])
    assert never is not None and never.cordoned == 1
    assert never.reason == (
        "3 gpu atoms wanted, pool p1 has 1 on nodes that take new bookings and 1 more on cordoned nodes"
    )
    # Enough on nodes that take bookings: not for never_fits to refuse.
    assert never_fits([one], [1], kinds, "p1", [5]) is None
    assert cordoned_note(0) == ""
    assert cordoned_note(1) == " (1 more matching atom is on cordoned nodes)"
    assert cordoned_note(3) == " (3 more matching atoms are on cordoned nodes)"


def same_gpu_slots(count: int) -> DeviceRequest:
    return DeviceRequest(cls="gpu.slot", count=count, same_gpu=True)


def test_same_gpu_slots_are_refused_rather_than_split_over_gpus() -> None:
    # Three slots free on each of two GPUs: four could be served split, but not on one GPU.
    atoms = slots("g1", 3, first=1) + slots("g2", 3, first=1)
    split = choose([device_request("gpu.slot", 4)], atoms, {"g1": 1, "g2": 1})
    assert {a.split("/")[0] for a in chosen(split)[0]} == {"g1", "g2"}
    refused = choose([same_gpu_slots(4)], atoms, {"g1": 1, "g2": 1})
    assert isinstance(refused, NoFit)
    assert refused.message == (
        "devices[0]: 4 gpu.slot atoms wanted on one GPU, at most 3 free on any one GPU of the pool for that window"
    )
    assert (refused.wanted, refused.available, refused.never) == (4, 3, False)


def test_same_gpu_slots_land_on_the_busiest_gpu_that_holds_them_all() -> None:
    atoms = slots("g1", 1, first=3) + slots("g2", 2, first=2) + slots("g3", 4)
    assert chosen(choose([same_gpu_slots(2)], atoms, {"g1": 3, "g2": 2})) == (("g2/slot:2", "g2/slot:3"),)


def test_same_gpu_lines_of_one_reservation_each_stay_on_their_own_gpu() -> None:
    # Two lines of three slots, two GPUs of four free slots: each line on one GPU, none split.
    atoms = slots("g1", 4) + slots("g2", 4)
    result = chosen(choose([same_gpu_slots(3), same_gpu_slots(3)], atoms, {}))
    assert [{a.split("/")[0] for a in ids} for ids in result] == [{"g1"}, {"g2"}]


def test_same_gpu_after_another_line_took_slots_says_so() -> None:
    # The first line can only stay together on g1, leaving one there and two on g2: three free, but
    # not on one GPU.
    atoms = slots("g1", 4) + slots("g2", 2, first=2)
    refused = choose([device_request("gpu.slot", 3), same_gpu_slots(3)], atoms, {"g2": 2})
    assert isinstance(refused, NoFit)
    assert refused.request_index == 1
    assert refused.reason.endswith("besides those the reservation's other requests take")


def test_a_same_gpu_line_more_than_any_gpu_of_the_pool_holds_never_fits() -> None:
    kinds = kinds_of(slots("g1", 4) + slots("g2", 4))
    never = never_fits([same_gpu_slots(5)], [8], kinds, "p", most_on_one_gpu=[4])
    assert isinstance(never, NoFit) and never.never
    assert (
        never.message
        == "devices[0]: 5 gpu.slot atoms wanted on one GPU, and no GPU of pool p has more than 4"
    )
    assert never_fits([same_gpu_slots(4)], [8], kinds, "p", most_on_one_gpu=[4]) is None
    # Without the per-GPU counts only the pool's total is checked, as before.
    assert never_fits([same_gpu_slots(5)], [8], kinds, "p") is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=5), st.integers(1, 4))
def test_same_gpu_is_served_exactly_when_some_gpu_holds_the_count(free: list[int], count: int) -> None:
    atoms = [a for i, n in enumerate(free) for a in slots(f"g{i}", n)]
    result = choose([same_gpu_slots(count)], atoms, {})
    if max(free) >= count:
        ids = chosen(result)[0]
        assert len(ids) == count and len({a.split("/")[0] for a in ids}) == 1
    else:
        assert isinstance(result, NoFit)


def test_a_same_gpu_shortlist_passes_over_partly_used_gpus_that_cannot_hold_it() -> None:
    # Twenty partly used GPUs with two free slots each would fill the shortlist (4 x 4 + 16 = 32 atoms)
    # before the untouched g99 is reached; none of them can hold four slots on one GPU.
    partly = {f"g{i:02}": slots(f"g{i:02}", 4) for i in range(20)}
    by_gpu = {**partly, "g99": slots("g99", 4)}
    busy = {f"{g}/slot:{i}" for g in partly for i in (0, 1)}
    busy_by_gpu = dict.fromkeys(partly, 2)
    listed = shortlist(same_gpu_slots(4), by_gpu, busy, busy_by_gpu, reserve=16)
    assert {a.gpu_id for a in listed} == {"g99"}
    assert chosen(choose([same_gpu_slots(4)], listed, busy_by_gpu)) == (
        tuple(f"g99/slot:{i}" for i in range(4)),
    )
    # Without same_gpu the partly used GPUs come first, as before.
    loose = shortlist(device_request("gpu.slot", 4), by_gpu, busy, busy_by_gpu, reserve=16)
    assert "g99" not in {a.gpu_id for a in loose}


def test_a_shortlist_looks_past_small_nodes_for_one_that_holds_the_reservation() -> None:
    # Twenty one-GPU nodes of 4 slots come first in the pool's order, then one node of four GPUs.
    # Eight slots fill the shortlist's 4 x 8 + 16 = 48 atoms from the small nodes alone, and no
    # node of those holds eight: the shortlist goes on to the big node, so the request stays on it.
    by_gpu = {f"a{i:02}": slots(f"a{i:02}", 4, node=f"small-{i:02}") for i in range(20)}
    by_gpu |= {f"b{i}": slots(f"b{i}", 4, node="big") for i in range(4)}
    request = device_request("gpu.slot", 8)
    listed = shortlist(request, by_gpu, set(), {})
    assert "big" in {a.node for a in listed}
    picked = chosen(choose([request], listed, {}))[0]
    assert {a.split("/")[0][0] for a in picked} == {"b"}


def test_gpus_equal_by_rule_2_go_where_the_fragmentation_grows_least() -> None:
    atoms = slots("g1", 4, node="n1") + slots("g2", 4, node="n2") + slots("g3", 4, node="n3")
    seen: list[tuple[str, str, int, int]] = []

    def growth(node: str, gpu: str, before: int, after: int) -> float:
        seen.append((node, gpu, before, after))
        return {"n1": 5.0, "n2": -1.0, "n3": 2.0}[node]

    # Two of four slots: 1,000 free milli-GPUs become 500 on whichever GPU; n2 grows least.
    picked = chosen(choose([same_gpu_slots(2)], atoms, {}, fragmentation=growth))
    assert {a.split("/")[0] for a in picked[0]} == {"g2"}
    assert sorted(seen) == [("n1", "g1", 1000, 500), ("n2", "g2", 1000, 500), ("n3", "g3", 1000, 500)]
    # Without it, the smallest id (rule 3).
    assert {a.split("/")[0] for a in chosen(choose([same_gpu_slots(2)], atoms, {}))[0]} == {"g1"}


def test_the_fragmentation_gradient_never_overrides_busiest_first() -> None:
    # g3 is partly used: rule 2 takes it whatever the gradient says, and asks the gradient nothing.
    atoms = slots("g1", 4, node="n1") + slots("g3", 2, node="n3", first=2)

    def growth(node: str, gpu: str, before: int, after: int) -> float:
        raise AssertionError("no tie to break")

    picked = chosen(choose([same_gpu_slots(2)], atoms, {"g3": 2}, fragmentation=growth))
    assert picked == (("g3/slot:2", "g3/slot:3"),)
