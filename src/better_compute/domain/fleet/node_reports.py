"""Signed node requests: the canonical bytes a node signs, and when the server accepts a signature.

Every report a node sends, and every read of its spec, carries four headers:

- `BC-Node`: the node's id;
- `BC-Timestamp`: when it was signed, in whole seconds since the Unix epoch (UTC);
- `BC-Sequence`: a decimal integer; each request, a report or a spec read, carries a larger one than
  the last the server accepted from the node;
- `BC-Signature`: the Ed25519 signature of the canonical bytes, in standard base64.

The canonical bytes are these seven lines joined by `\\n` (no trailing newline), UTF-8:
`bc-node-v1`, the HTTP method (upper case), the request target (path and, when there is one, `?`
and the query string, exactly as sent), the node id, the timestamp, the sequence, and the lowercase
hex SHA-256 of the body (of no bytes for a GET).

The server refuses with UNAUTHENTICATED: a request without the headers, with a signature that does
not verify under the node's registered key, one signed more than `CLOCK_SKEW` away from the server's
clock (stale, or from the future), and a request whose sequence is not greater than the last accepted
(a replay). A report's sequence is stored in the transaction that applies the report, so two reports
with the same number, even sent at once, take effect once; a spec read's by one statement that also
records the read's time, so a captured read cannot be sent again either (within `CLOCK_SKEW` the
sequence refuses it, after it the timestamp). A node reports only about itself: the body names the
node of the headers.

Exactly once across resends: a node queues each report with a `reportId` (a uuid) and resends it,
signed again with a new sequence number, until it is answered. The server records the ids it
accepted (for `REPORT_IDS_KEPT`) in the transaction that applies the report, and answers a copy of
an accepted one as accepted (`duplicate`) without applying it again.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar

from better_compute.domain.fleet.bindings import BindingState
from better_compute.domain.fleet.inventory import GpuReport
from better_compute.domain.fleet.records import LayoutRefusal
from better_compute.domain.fleet.replica_states import Problem, ReplicaState, RuntimeState
from better_compute.domain.kernel.errors import Unauthenticated

SCHEME = "bc-node-v1"
HEADER_NODE = "BC-Node"
HEADER_TIMESTAMP = "BC-Timestamp"
HEADER_SEQUENCE = "BC-Sequence"
HEADER_SIGNATURE = "BC-Signature"
HEADERS = (HEADER_NODE, HEADER_TIMESTAMP, HEADER_SEQUENCE, HEADER_SIGNATURE)

CLOCK_SKEW = timedelta(minutes=5)
"""How far a signed request's timestamp may be from the server's clock, either way: a captured
request is worthless after this, and a node's clock may drift this much."""

REPORT_IDS_KEPT = timedelta(days=7)
"""How long the server remembers the `reportId` of an accepted report. A node resends a queued
report until it is answered, so a copy arriving later than this is far past any outage it covers."""

MAX_SEQUENCE = 2**63 - 1
"""The largest sequence number a node may send (the stored column is a 64-bit integer)."""


@dataclass(frozen=True, slots=True)
class SignedRequest:
    """What a node sent and signed, as the server received it."""

    node: str
    timestamp: int
    sequence: int
    signature: bytes
    method: str
    target: str
    body: bytes

    def canonical(self) -> bytes:
        return signed_bytes(self.method, self.target, self.node, self.timestamp, self.sequence, self.body)


def signed_bytes(method: str, target: str, node: str, timestamp: int, sequence: int, body: bytes) -> bytes:
    """The bytes a node signs for one request (see the module)."""
    lines = (
        SCHEME,
        method.upper(),
        target,
        node,
        str(timestamp),
        str(sequence),
        hashlib.sha256(body).hexdigest(),
    )
    return "\n".join(lines).encode("utf-8")


def refused(reason: str, message: str) -> Unauthenticated:
    """A signed request refused; `details.reason` says which rule (`unsigned`, `signature`, `stale`,
    `replayed`, `not_joined`, `other_node`)."""
    return Unauthenticated(message, {"reason": reason})


def _integer(text: str, name: str) -> int:
    value = text.strip()
    if not value.isascii() or not value.isdigit() or len(value) > 19 or int(value) > MAX_SEQUENCE:
        raise refused("unsigned", f"{name} must be a non-negative decimal integer")
    return int(value)


def parse_signed(headers: Mapping[str, str | None], method: str, target: str, body: bytes) -> SignedRequest:
    """The signed request the headers describe; UNAUTHENTICATED (`unsigned`) when one is missing or
    malformed. `headers` is looked up by the names above (the caller makes the look-up
    case-insensitive, as HTTP is)."""
    missing = [name for name in HEADERS if not (headers.get(name) or "").strip()]
    if missing:
        raise refused("unsigned", f"this call must be signed by a node: send {', '.join(missing)}")
    try:
        signature = base64.b64decode((headers.get(HEADER_SIGNATURE) or "").strip(), validate=True)
    except (binascii.Error, ValueError):
        raise refused("unsigned", f"{HEADER_SIGNATURE} must be base64") from None
    return SignedRequest(
        node=(headers.get(HEADER_NODE) or "").strip(),
        timestamp=_integer(headers.get(HEADER_TIMESTAMP) or "", HEADER_TIMESTAMP),
        sequence=_integer(headers.get(HEADER_SEQUENCE) or "", HEADER_SEQUENCE),
        signature=signature,
        method=method,
        target=target,
        body=body,
    )


def check_fresh(timestamp: int, now: datetime) -> None:
    """Refuse a request signed more than `CLOCK_SKEW` from `now`, either way."""
    skew = abs(now.timestamp() - timestamp)
    if skew > CLOCK_SKEW.total_seconds():
        raise refused(
            "stale",
            f"the request was signed {int(skew)} s away from the server's clock; at most"
            f" {int(CLOCK_SKEW.total_seconds())} s are allowed (check the node's clock)",
        )


def check_sequence(sequence: int, last_accepted: int) -> None:
    """Refuse a request whose sequence is not greater than the last one accepted from its node."""
    if sequence <= last_accepted:
        raise refused(
            "replayed",
            f"sequence {sequence} is not greater than {last_accepted}, the last accepted from this node",
        )


def check_same_node(signed_by: str, named: str) -> None:
    """A node reports only about itself: the body and the path name the node that signed."""
    if signed_by != named:
        raise refused("other_node", f"node {signed_by} may report only about itself, not about {named}")


# -- What a node reports -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InventoryReported:
    """The node's whole inventory (feeds `service.fleet.inventory.ingest_in`); `observed_generation`, when
    given, is also recorded."""

    node: str
    gpus: tuple[GpuReport, ...]
    observed_generation: int | None = None
    report_id: str | None = None
    reboot_required: tuple[str, ...] = ()
    """GPUs (uuids) whose MIG mode change waits for a reboot: a GPU reset failed."""
    layout_refused: tuple[LayoutRefusal, ...] = ()
    """GPUs whose layout change the hardware (or a GPU client that would not stop) refused."""

    KIND: ClassVar[str] = "Inventory"


@dataclass(frozen=True, slots=True)
class BindingReported:
    """`AllocationBound` (state `bound`, `device-missing` or `refused`, with why) or
    `AllocationReleased` (state `released`) for one allocation on the node."""

    node: str
    allocation_id: str
    state: BindingState
    detail: str | None = None
    report_id: str | None = None

    @property
    def kind(self) -> str:
        return "AllocationReleased" if self.state == "released" else "AllocationBound"


@dataclass(frozen=True, slots=True)
class GenerationObserved:
    """The node converged the spec of this generation."""

    node: str
    generation: int
    report_id: str | None = None

    KIND: ClassVar[str] = "ObservedGeneration"


@dataclass(frozen=True, slots=True)
class ScrubDone:
    """The node cleaned these atoms of a previous tenant's data."""

    node: str
    atoms: tuple[str, ...]
    report_id: str | None = None

    KIND: ClassVar[str] = "ScrubDone"


@dataclass(frozen=True, slots=True)
class ReplicaReported:
    """`ReplicaState`: what the node's runtime made of an allocation's container."""

    node: str
    allocation_id: str
    state: RuntimeState
    exit_code: int | None = None
    problem: Problem | None = None
    detail: str | None = None
    restarts: int = 0
    address: str | None = None
    report_id: str | None = None

    KIND: ClassVar[str] = "ReplicaState"

    def record(self, at: datetime) -> ReplicaState:
        """The state as stored, taken at `at`."""
        return ReplicaState(
            self.allocation_id,
            self.node,
            self.state,
            at,
            self.exit_code,
            self.problem,
            self.detail,
            self.restarts,
            self.address,
        )


@dataclass(frozen=True, slots=True)
class AgentReported:
    """`Agent`: where the node's agent listens (`bcd run --listen`) and the token it answers to
    (domain.fleet.node_agents); a node sets only its own."""

    node: str
    url: str
    token: str
    report_id: str | None = None

    KIND: ClassVar[str] = "Agent"

    def __repr__(self) -> str:  # the token stays out of logs and tracebacks
        return f"AgentReported(node={self.node!r}, url={self.url!r}, report_id={self.report_id!r})"


Report = (
    InventoryReported | BindingReported | GenerationObserved | ScrubDone | ReplicaReported | AgentReported
)


def kind_of(report: Report) -> str:
    """The report's kind as the wire spells it."""
    return report.kind if isinstance(report, BindingReported) else report.KIND
