"""Dividing a workload's replicas between clusters: `pack`, `spread`, floors, a cap on fan-out, and
scaling down in proportion (docs/placement.md#the-flow, step 4; seed 001 "Pack vs spread", "Re-placement and
scaling").

The rules, as a user reads them:

- **What a cluster already runs stays.** Placing more (a create, a scale up, a drain's re-placement)
  only adds: each cluster starts from what the workload has there, and no cluster is asked to give
  up replicas so that another can take them.
- **Floors first.** `cluster_floors` give named clusters at least that many replicas, as far as each
  has room; a floor on a cluster placement refuses gets nothing (its verdict says why).
- **pack** (the default) fills one cluster before opening another: clusters already used first,
  then the roomiest, then by id (or a server process's own order: `divide`'s `salt`). **spread**
  gives each new replica to the cluster with the fewest, the same order breaking ties, so shares
  differ by at most one where room allows.
- **max_clusters** caps how many clusters get replicas at all; clusters already used and floored
  clusters count first.
- **Scaling down** takes replicas away in proportion to each cluster's share (largest remainders
  keep the extra ones, ties to the earlier cluster in the order), never below a floor.

All functions are pure and deterministic: the same figures give the same shares on every replica of
the server.
"""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Strategy = Literal["pack", "spread"]
STRATEGIES: tuple[Strategy, ...] = ("pack", "spread")


@dataclass(frozen=True, slots=True)
class Division:
    """Replicas per cluster (clusters with none left out), in the order they were chosen, and how
    many replicas no cluster had room for."""

    shares: dict[str, int]
    unplaced: int

    @property
    def placed(self) -> int:
        return sum(self.shares.values())


def order_of(room: Mapping[str, int], current: Mapping[str, int], salt: int = 0) -> list[str]:
    """The order clusters are filled in: those already used (most replicas first), then the roomiest,
    then by id (or, given a `salt`, in an order the salt sets: see `divide`)."""
    if not salt:
        return sorted(room, key=lambda c: (-current.get(c, 0), -room[c], c))
    return sorted(room, key=lambda c: (-current.get(c, 0), -room[c], zlib.crc32(f"{salt}:{c}".encode()), c))


def divide(
    total: int,
    room: Mapping[str, int],
    current: Mapping[str, int],
    *,
    strategy: Strategy = "pack",
    floors: Mapping[str, int] | None = None,
    max_clusters: int | None = None,
    salt: int = 0,
) -> Division:
    """Give `total` replicas to clusters. `room[c]` is the most replicas cluster c may hold in all
    (what it has now included); `current[c]` what the workload has there now, kept even where room
    is smaller (a cluster that became full or denied keeps what runs). Only clusters in `room` get
    new replicas. Assumes `total` is at least what `current` holds (a scale down is `shrink`).

    `salt` replaces id order in the last tie-break (between clusters equally used and equally
    roomy) by an order of its own: server processes pass their own, so that two placing at once,
    each unaware of the other's uncommitted bookings, seldom pick the same cluster, and then the
    same node and atoms (`binpack`), and refuse each other. Each salt's order is a shuffle of the
    clusters, not a rotation, so two processes that once chose alike do not go on choosing alike.
    The shares are as good either way; with the same salt the same figures give the same shares."""
    shares = {c: n for c, n in current.items() if n > 0}
    order = order_of(room, current, salt)
    cap = {c: max(room.get(c, 0), shares.get(c, 0)) for c in set(room) | set(shares)}
    left = total - sum(shares.values())
    used = set(shares)
    limit = max_clusters if max_clusters is not None else len(cap) + len(used)

    def may_open(cluster: str) -> bool:
        return cluster in used or len(used) < limit

    for cluster, floor in sorted((floors or {}).items()):
        if left <= 0:
            break
        if cluster not in room or not may_open(cluster):
            continue
        give = min(left, floor - shares.get(cluster, 0), cap[cluster] - shares.get(cluster, 0))
        if give > 0:
            shares[cluster] = shares.get(cluster, 0) + give
            used.add(cluster)
            left -= give
    if left > 0 and strategy == "pack":
        for cluster in order:
            if left <= 0:
                break
            give = min(left, cap[cluster] - shares.get(cluster, 0))
            if give <= 0 or not may_open(cluster):
                continue
            shares[cluster] = shares.get(cluster, 0) + give
            used.add(cluster)
            left -= give
    elif left > 0:
        left = _spread(left, shares, cap, order, used, limit)
    ranked = {c: i for i, c in enumerate(order)}
    ordered = sorted((c for c, n in shares.items() if n > 0), key=lambda c: (ranked.get(c, len(ranked)), c))
    return Division({c: shares[c] for c in ordered}, max(0, left))


def _spread(
    left: int,
    shares: dict[str, int],
    cap: Mapping[str, int],
    order: Sequence[str],
    used: set[str],
    limit: int,
) -> int:
    """One replica at a time to the cluster with the fewest that has room (ties by `order`); a new
    cluster is opened only while fewer than `limit` are used. Returns what is left."""
    chosen = [c for c in order if c in used]
    for cluster in order:
        if len(chosen) >= limit:
            break
        if cluster not in used and cap[cluster] > 0:
            chosen.append(cluster)
    rank = {c: i for i, c in enumerate(order)}
    heap = [(shares.get(c, 0), rank[c], c) for c in chosen if shares.get(c, 0) < cap[c]]
    heapq.heapify(heap)
    while left > 0 and heap:
        count, position, cluster = heapq.heappop(heap)
        shares[cluster] = count + 1
        used.add(cluster)
        left -= 1
        if count + 1 < cap[cluster]:
            heapq.heappush(heap, (count + 1, position, cluster))
    return left


def shrink(total: int, current: Mapping[str, int], floors: Mapping[str, int] | None = None) -> dict[str, int]:
    """Scale `current` down to `total` replicas in proportion to each cluster's share (largest
    remainder), no cluster below its floor (nor above what it has). Where the floors alone add up
    to more than `total`, floors hold and the result keeps more than `total`: callers refuse such
    a request before asking (`check_floors`)."""
    held = {c: n for c, n in current.items() if n > 0}
    have = sum(held.values())
    if total >= have:
        return dict(held)
    low = {c: min(n, (floors or {}).get(c, 0)) for c, n in held.items()}
    order = order_of(held, held)
    exact = {c: (held[c] * total, have) for c in held}
    out = {c: max(low[c], held[c] * total // have) for c in held}
    extra = total - sum(out.values())
    if extra > 0:
        by_remainder = sorted(
            (c for c in order if out[c] < held[c]),
            key=lambda c: (-(exact[c][0] % exact[c][1]), order.index(c)),
        )
        for cluster in by_remainder[:extra]:
            out[cluster] += 1
    elif extra < 0:
        # floors lifted some shares: take the excess from clusters above their floor, biggest first
        for cluster in sorted(order, key=lambda c: (-(out[c] - low[c]), order.index(c))):
            while extra < 0 and out[cluster] > low[cluster]:
                out[cluster] -= 1
                extra += 1
    return {c: n for c, n in out.items() if n > 0}


__all__ = ["STRATEGIES", "Division", "Strategy", "divide", "order_of", "shrink"]
