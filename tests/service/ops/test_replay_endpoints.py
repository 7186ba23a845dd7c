"""Endpoints in a replay: an endpoint asked of a pool short of idle nodes waits `Failed` until a
booking ends, then takes its nodes through the layout gate, whose nodes' simulated daemons take the
new layout at once; it holds them until it is deleted, and the nodes come back to the pool's layout
for tenants. A recorded history with an endpoint, replayed with its policy unchanged, meets the
same fate, request by request."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.ops.replay import (
    EndpointAsk,
    PolicySet,
    check_window,
    parse_demand,
    parse_policy_set,
)
from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet
from better_compute.entrypoints.ids import RandomIds
from better_compute.entrypoints.replay import SimulatedNodes, scratch
from better_compute.service.endpoints import endpoints
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.ops import replay
from better_compute.service.ops.placement_retry import Retrier
from better_compute.service.placement.placement_stock import Stock
from better_compute.service.tenancy import quotas
from better_compute.storage.store import Store

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="test-admin")
T0 = datetime(2026, 12, 1, 9, tzinfo=UTC)
LAYOUT = ["mig-3g.40gb", "mig-2g.20gb", "mig-2g.20gb"]
ONE_SLICE = 1 / 7
"""A 1g.10gb instance of an A100-80GB, as a share of its GPU (7 of them make the pool's layout)."""


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def fleet_file() -> dict[str, Any]:
    """Two nodes of 2 A100-80GBs, platform's mig pool of seven 1g.10gb instances a GPU."""
    return {
        "tenants": [{"id": "platform"}, {"id": "acme"}],
        "clusters": [
            {
                "name": "c1",
                "region": "r1",
                "nodes": [{"name": "m", "replicas": 2, "gpus": {"model": "A100-80GB", "count": 2}}],
            }
        ],
        "pools": [
            {
                "name": "p1",
                "cluster": "c1",
                "mode": "mig",
                "owner": "platform",
                "policy": {"migLayout": "all-1g.10gb"},
                "nodes": ["m-1", "m-2"],
                "ownerQuota": {"gpu": 4, "gpu.mig": 28},
            }
        ],
    }


def endpoint_body() -> dict[str, Any]:
    return {
        "name": "chat",
        "tenantId": "platform",
        "variants": [
            {
                "name": "AllTraffic",
                "poolId": "p1",
                "instanceCount": 2,
                "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": LAYOUT}],
            }
        ],
    }


def one_slice(start: datetime, end: datetime) -> dict[str, Any]:
    return {
        "tenantId": "acme",
        "poolId": "p1",
        "devices": [{"class": "gpu.mig", "count": 1}],
        "start": start.isoformat(),
        "duration": f"{int((end - start).total_seconds())}s",
    }


def demand() -> dict[str, Any]:
    """acme's slice from 9:00 to 11:00 on one node; platform's endpoint of two instances asked at
    9:30 and deleted at 13:00; acme's slice asked at 12:00 (the endpoint holds every node) and
    another at 13:30 (the nodes are the pool's again)."""
    variants = endpoint_body()["variants"]
    line = [{"class": "gpu.mig", "count": 1}]
    return {
        "requests": [
            {"kind": "reservation", "id": "early", "at": at(0), "tenant": "acme", "pool": "p1",
             "devices": line, "end": at(120)},
            {"kind": "endpoint", "id": "chat", "at": at(30), "tenant": "platform", "name": "chat",
             "variants": variants, "until": at(240)},
            {"kind": "reservation", "id": "noon", "at": at(180), "tenant": "acme", "pool": "p1",
             "devices": line, "end": at(240)},
            {"kind": "reservation", "id": "late", "at": at(270), "tenant": "acme", "pool": "p1",
             "devices": line, "end": at(300)},
        ]
    }  # fmt: skip


ACME_QUOTA = {"quotas": [{"tenantId": "acme", "poolId": "p1", "class": "gpu.mig", "limit": 4}]}


def test_an_endpoint_waits_for_idle_nodes_holds_them_once_cut_and_gives_them_back_when_deleted() -> None:
    fleet = parse_fleet(fleet_file())
    window = check_window(T0, at(300))
    base = replay.Today()
    done = replay.run(scratch, fleet, base, parse_policy_set(ACME_QUOTA), parse_demand(demand()), window)
    by_key = {o.key: o for o in done.outcomes}

    # Worked by hand. 9:00: acme's slice books one 1g instance of one node until 11:00. 9:30: the
    # endpoint asks for 2 nodes and the pool has 1 idle one: it is Failed, taking nothing. 11:00:
    # the slice ends, the retrier takes the endpoint again, its nodes are cut (their daemons take
    # the layout at once) and handed over: it holds 2 nodes of 2 GPUs from 11:00 to its deletion at
    # 13:00 (8 GPU-hours), having waited 1.5 hours short of 2 nodes (6 GPU-hours refused).
    chat = by_key["chat"]
    assert (chat.wait_s, chat.granted_hours, chat.refused_hours) == (5400.0, 8.0, 6.0)
    assert (chat.refused_reason, chat.refused, chat.preempted) == ("insufficient_capacity", False, 0)
    # acme's slices: the first held 2 hours; at 12:00 every instance is the endpoint's, so the
    # second is refused; at 13:30 the nodes are back at the pool's layout and the third is granted.
    early, noon, late = by_key["early"], by_key["noon"], by_key["late"]
    assert early.granted_hours == pytest.approx(2 * ONE_SLICE, abs=1e-6)
    assert (noon.refused, noon.granted_hours) == (True, 0.0)
    assert noon.refused_hours == pytest.approx(1 * ONE_SLICE, abs=1e-6)
    assert late.granted_hours == pytest.approx(0.5 * ONE_SLICE, abs=1e-6)
    assert done.tenants["platform"].gpu_hours_granted == 8.0
    assert done.tenants["platform"].wait_p50_s == 5400.0


class SlowNodes(SimulatedNodes):
    """Nodes whose daemons take their time: a node converges only once `ready` (a real node spends
    minutes repartitioning), where a replay's converge at once."""

    ready = False

    def converge(self, node_id: str, now: datetime) -> None:
        if self.ready:
            super().converge(node_id, now)


class Deployment:
    """A deployment as the server runs it, in miniature: the use cases the routes call, then the
    reconcilers' passes at that instant (the gate, the retrier), with the nodes' daemons simulated
    slower than a replay simulates them."""

    def __init__(self, store: Store, nodes: SimulatedNodes) -> None:
        self.now = T0
        self.sandbox = replay.Sandbox(store, BookingIndex(), Stock(), RandomIds(), nodes)
        self.retrier = Retrier(self.sandbox, lambda: self.now)

    def at(self, when: datetime, action: Any = None) -> None:
        self.now = when
        if action is not None:
            action(when)
        replay.reconcile_at(self.sandbox, self.retrier, when)


def test_replaying_a_recorded_history_with_an_endpoint_reproduces_each_requests_fate(store: Store) -> None:
    spec = parse_fleet(fleet_file())
    load_fleet(store, spec, T0)
    nodes = SlowNodes(store, spec)
    nodes.join(["m-1", "m-2"], T0)
    quotas.set_quota(store, ADMIN, "acme", "p1", "gpu.mig", 4, T0)
    d = Deployment(store, nodes)
    s = d.sandbox

    def reserve(start: datetime, end: datetime) -> Any:
        return lambda now: reservations.create(
            store, s.index, ADMIN, one_slice(start, end), now, s.ids.reservation
        )

    d.at(at(0), reserve(at(0), at(120)))
    d.at(at(30), lambda now: endpoints.create(store, ADMIN, endpoint_body(), now))
    assert endpoints.get(store, ADMIN, "chat", at(30)).status == "Failed"
    d.at(at(120))  # the slice ends: the retrier takes the endpoint again, and its nodes are cut
    assert endpoints.get(store, ADMIN, "chat", at(120)).status == "Creating"
    nodes.ready = True  # ten minutes later, their daemons have repartitioned them
    d.at(at(130))
    assert endpoints.get(store, ADMIN, "chat", at(130)).status == "InService"
    d.at(at(240), lambda now: endpoints.delete(store, ADMIN, "chat", now))
    d.at(at(270), reserve(at(270), at(300)))

    window = check_window(T0, at(300))
    past = replay.history(store, window)
    assert [type(a).__name__ for a in past.demand.asks] == ["ReservationAsk", "EndpointAsk", "ReservationAsk"]
    chat = past.demand.asks[1]
    assert isinstance(chat, EndpointAsk)
    assert (chat.at, chat.until, chat.instances(), chat.pools()) == (at(30), at(240), 2, {"p1"})
    happened = replay.recorded(store, past, window)
    # The nodes are the endpoint's from the start of their cut (11:00), in the history as in a
    # replay, whose nodes converge at once: the ten minutes of repartitioning are the endpoint's.
    again = replay.run(
        scratch, replay.today_fleet(store), replay.today(store), PolicySet(), past.demand, window
    )
    assert [(o.wait_s, o.granted_hours, o.refused_hours) for o in happened.outcomes][1] == (5400.0, 8.0, 6.0)
    assert again.outcomes == happened.outcomes
    assert again.tenants == happened.tenants


def test_an_endpoint_request_without_variants_is_refused_by_name() -> None:
    bad = {"requests": [{"kind": "endpoint", "at": T0.isoformat(), "tenant": "platform", "name": "chat"}]}
    with pytest.raises(InvalidInput, match=r"requests\[0\]\.variants must list 1 to 10 variants"):
        parse_demand(bad)
    with pytest.raises(InvalidInput, match="must be workload, reservation or endpoint"):
        parse_demand({"requests": [{"kind": "notebook", "at": T0.isoformat(), "tenant": "platform"}]})


def two_pool_fleet() -> dict[str, Any]:
    """The fleet above, and a second mig pool of one node of 8 A100-80GBs."""
    fleet = fleet_file()
    fleet["clusters"][0]["nodes"].append({"name": "big", "gpus": {"model": "A100-80GB", "count": 8}})
    fleet["pools"].append(
        {
            "name": "p2",
            "cluster": "c1",
            "mode": "mig",
            "owner": "platform",
            "policy": {"migLayout": "all-1g.10gb"},
            "nodes": ["big"],
            "ownerQuota": {"gpu": 8, "gpu.mig": 56},
        }
    )
    return fleet


def test_an_endpoints_gpu_hours_are_each_of_its_nodes_gpus() -> None:
    """Two instances of 2 GPUs in p1 and one of 8 in p2, for an hour: 2 x 2 + 8 = 12 GPU-hours (not
    three instances at their pools' mean)."""
    variants = endpoint_body()["variants"] + [
        {
            "name": "Big",
            "poolId": "p2",
            "instanceCount": 1,
            "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": LAYOUT}],
        }
    ]
    asked = {"kind": "endpoint", "at": at(0), "tenant": "platform", "name": "chat", "variants": variants}
    done = replay.run(
        scratch,
        parse_fleet(two_pool_fleet()),
        replay.Today(),
        PolicySet(),
        parse_demand({"requests": [{**asked, "until": at(60)}]}),
        check_window(T0, at(120)),
    )
    (chat,) = done.outcomes
    assert (chat.granted_hours, chat.refused_hours, chat.wait_s) == (12.0, 0.0, 0.0)


def test_an_endpoint_alive_at_the_windows_end_leaves_another_tenants_gpu_hours_as_they_were() -> None:
    """acme's 1g slice holds 1/7 of a GPU for an hour whether or not an endpoint cut the pool's
    other node to its own layout and still holds it when the window ends."""
    fleet = parse_fleet(fleet_file())
    window = check_window(T0, at(120))
    slice_ = {
        "kind": "reservation",
        "id": "slice",
        "at": at(0),
        "tenant": "acme",
        "pool": "p1",
        "devices": [{"class": "gpu.mig", "count": 1}],
        "end": at(60),
    }
    one = endpoint_body()["variants"][0] | {"instanceCount": 1}
    chat = {"kind": "endpoint", "at": at(0), "tenant": "platform", "name": "chat", "variants": [one]}
    policy = parse_policy_set(ACME_QUOTA)
    alone = replay.run(scratch, fleet, replay.Today(), policy, parse_demand({"requests": [slice_]}), window)
    beside = replay.run(
        scratch, fleet, replay.Today(), policy, parse_demand({"requests": [slice_, chat]}), window
    )
    assert alone.outcomes[0].granted_hours == pytest.approx(ONE_SLICE, abs=1e-6)
    assert beside.outcomes[0] == alone.outcomes[0]
    assert beside.outcomes[1].granted_hours == 2 * 2.0  # its node's 2 GPUs for the 2 hours


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"until": at(30)}, r"requests\[0\]\.until \(.*\) must come after the request is made"),
        ({"until": at(60)}, r"requests\[0\]\.until \(.*\) must come after the request is made"),
        (
            {"variants": [{"poolId": "p1", "instanceCount": 10**9}]},
            r"requests\[0\]\.variants\[0\]\.instanceCount must be an integer from 1 to 64",
        ),
        (
            {"variants": [{"poolId": "p1", "instanceCount": -5}]},
            r"requests\[0\]\.variants\[0\]\.instanceCount must be an integer from 1 to 64",
        ),
        ({"variants": ["p1"]}, r"requests\[0\]\.variants\[0\] must be an object"),
    ],
)
def test_an_endpoint_request_deleted_before_it_is_made_or_of_a_bad_count_is_refused_by_name(
    change: dict[str, Any], message: str
) -> None:
    asked = {"kind": "endpoint", "at": at(60), "tenant": "platform", "name": "chat"}
    asked |= {"variants": endpoint_body()["variants"]} | change
    with pytest.raises(InvalidInput, match=message):
        parse_demand({"requests": [asked]})


def test_an_endpoints_instances_count_against_the_replays_request_limit() -> None:
    """Each instance is a node cut and cut back through the gate: 64 instances weigh 64 requests."""
    from better_compute.domain.ops.replay import size_of

    many = endpoint_body()["variants"][0] | {"instanceCount": 64}
    asked = {"kind": "endpoint", "at": at(0), "tenant": "platform", "name": "chat", "variants": [many]}
    assert size_of(parse_demand({"requests": [asked]}).asks) == 64


def test_a_demand_files_request_made_outside_the_window_is_refused_by_name(store: Store) -> None:
    load_fleet(store, parse_fleet(fleet_file()), T0)
    early = {"kind": "endpoint", "at": at(-30), "tenant": "platform", "name": "chat"}
    early["variants"] = endpoint_body()["variants"]
    with pytest.raises(InvalidInput, match=r"requests\[0\] is made at .*, outside the replay window"):
        replay.replay(store, scratch, ADMIN, since=T0, until=at(60), demand={"requests": [early]})


def test_the_fragmentation_a_replay_reports_follows_the_layout_an_endpoint_cut() -> None:
    """An endpoint holds every atom of its node (each GPU's own atom with its instances), so the
    node's instances, old or new, are never free capacity while it serves. Here the endpoint takes
    m-1 at the window's start and holds it to the end; what is free is p2's node of 8 whole-GPU
    instances, which the demand's one size (a whole-GPU instance) can use: nothing is stranded.
    Counting m-1's 1g.10gb instances as free would read 2002 of 10002 free milli as stranded."""
    fleet_raw = two_pool_fleet()
    fleet_raw["clusters"][0]["nodes"][0]["replicas"] = 1
    fleet_raw["clusters"][0]["nodes"][0]["name"] = "m-1"
    fleet_raw["pools"][0]["nodes"] = ["m-1"]
    fleet_raw["pools"][1]["policy"] = {"migLayout": "all-7g.80gb"}
    one = endpoint_body()["variants"][0] | {"instanceCount": 1}
    whole = {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["7g.80gb"]}]}
    requests = [
        {"kind": "endpoint", "at": at(0), "tenant": "platform", "name": "chat", "variants": [one]},
        {
            "kind": "reservation",
            "at": at(0),
            "tenant": "platform",
            "pool": "p2",
            "devices": [{"class": "gpu.mig", "count": 1, "selector": whole}],
            "end": at(1),
        },
    ]
    done = replay.run(
        scratch,
        parse_fleet(fleet_raw),
        replay.Today(),
        PolicySet(),
        parse_demand({"requests": requests}),
        check_window(T0, at(60)),
    )
    assert done.outcomes[0].granted_hours == 2.0  # m-1's 2 GPUs for the hour
    assert done.overall.fragmentation == 0.0
