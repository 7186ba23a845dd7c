"""Pages for list use cases: items in a stable order and the cursor of the next page (one type).

A store-side list reads one item more than the page holds (`fetch`), so `listing` knows whether a
next page exists without a second query. Tenancy lists are small (tenants, pools, quota rows,
policies) and often filtered by visibility after reading, so `page` pages them in memory, by a sort
key unique per item.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

DEFAULT_LIMIT = 100


class HasId(Protocol):
    @property
    def id(self) -> str: ...


T = TypeVar("T")
Item = TypeVar("Item", bound=HasId)


@dataclass(frozen=True)
class Listing(Generic[T]):
    """One page: `next_cursor` is None on the last page."""

    items: list[T] = field(default_factory=list)
    next_cursor: str | None = None


def fetch(limit: int | None) -> int:
    """How many items to read for a page of `limit`: one more, to learn whether more follow."""
    return (limit or DEFAULT_LIMIT) + 1


def by_id(item: HasId) -> str:
    return item.id


def listing(fetched: Sequence[Item], limit: int | None) -> Listing[Item]:
    """The page among items read in id order with `fetch(limit)`."""
    size = limit or DEFAULT_LIMIT
    items = list(fetched[:size])
    more = len(fetched) > size
    return Listing(items=items, next_cursor=items[-1].id if more and items else None)


def page(items: Sequence[T], key: Callable[[T], str], limit: int | None, after: str | None) -> Listing[T]:
    """The items after cursor `after` in `key` order, at most `limit` (default 100) of them."""
    size = limit or DEFAULT_LIMIT
    ordered = sorted(items, key=key)
    if after is not None:
        ordered = [r for r in ordered if key(r) > after]
    chosen = ordered[:size]
    more = len(ordered) > size
    return Listing(items=chosen, next_cursor=key(chosen[-1]) if more and chosen else None)
