"""Where `endpoints.invoke` sends a request, and what it bounds (docs/endpoints.md#invoking-an-endpoint).

A request goes to one of the component's ready copies (`copy_states.ready_copies`: never a copy that
is not ready), the one with the fewest requests outstanding from this server process; among copies
with equally few, the next in turn (round-robin), so that an idle endpoint still spreads its load.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from better_compute.domain.endpoints.copy_states import ReadyCopy
from better_compute.domain.endpoints.endpoints import DEFAULT_INVOKE_PATH
from better_compute.domain.kernel.errors import Unavailable

MAX_INVOKE_BODY_BYTES = 6 * 1024 * 1024
"""The largest request body `invoke` forwards: SageMaker's real-time payload limit (6 MiB)."""

INVOKE_TIMEOUT_S = 60.0
"""How long the model server has to answer (SageMaker's real-time limit, 60 s); past it, 503."""

CopyKey = tuple[str, int]
"""A copy by (component, index)."""


class NoReadyCopy(Unavailable):
    """A component with no copy that is ready to take a request (503 UNAVAILABLE)."""

    def __init__(self, endpoint: str, component: str, why: str) -> None:
        super().__init__(f"component {component} of endpoint {endpoint} has {why}", retry_after=1)
        self.details = {"endpointName": endpoint, "component": component}


def invoke_path(spec: Mapping[str, Any]) -> str:
    """The path a component's copies take requests on: its stored `invokePath` when it has one (a
    path, as the component's checked spec stores it), else `/invocations`. The one place routing reads
    it, so the component's field is read here and nowhere else."""
    path = spec.get("invokePath")
    return path if isinstance(path, str) and path.startswith("/") else DEFAULT_INVOKE_PATH


def routable(ready: Sequence[ReadyCopy]) -> list[ReadyCopy]:
    """The ready copies a request can reach: those whose node said where their model server listens."""
    return [c for c in ready if c.address is not None]


def order_copies(
    ready: Sequence[ReadyCopy], outstanding: Mapping[CopyKey, int], turn: int
) -> list[ReadyCopy]:
    """The copies in the order a request tries them: fewest outstanding first; among equals, the copy
    `turn` steps along the copy order first (round-robin). `ready` is in copy order."""
    n = len(ready)
    ranked = sorted(
        range(n), key=lambda i: (outstanding.get((ready[i].component, ready[i].copy), 0), (i - turn) % n)
    )
    return [ready[i] for i in ranked]


__all__ = [
    "DEFAULT_INVOKE_PATH",
    "INVOKE_TIMEOUT_S",
    "MAX_INVOKE_BODY_BYTES",
    "CopyKey",
    "NoReadyCopy",
    "invoke_path",
    "order_copies",
    "routable",
]
