"""A node of the GPU claim race: at each round, once every node is ready, it sends its signed
inventory naming its own GPUs and one GPU no node has reported yet, the same for every node.
Each process has its own store, as a server process does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from better_compute.domain.fleet.inventory import GpuReport
from better_compute.domain.fleet.node_reports import InventoryReported, Report, SignedRequest, signed_bytes
from better_compute.domain.kernel.errors import DomainError
from better_compute.service.fleet import node_reports
from better_compute.storage.store import Store


def new_gpu(round_: int) -> str:
    """The GPU every node names at round `round_`."""
    return f"GPU-race-{round_:04d}"


def _read(report: InventoryReported) -> Callable[[bytes], Report]:
    def read(_body: bytes) -> Report:
        return report

    return read


def race(
    url: str, node: str, key: bytes, own: list[GpuReport], rounds: int, barrier: Any, outcomes: Any
) -> None:
    """Send `rounds` inventories of `node` (its `own` GPUs and that round's new GPU), each once all
    nodes are ready; put `(round, node, outcome)` on `outcomes` for each (`accepted`, or the
    refusal's `details.reason` or code)."""
    store = Store.open(url, migrate_schema=False, pool_size=2)
    signer = Ed25519PrivateKey.from_private_bytes(key)
    try:
        for n in range(rounds):
            extra = replace(own[0], uuid=new_gpu(n), index=len(own), mig_instances=())
            report = InventoryReported(node, (*own, extra))
            body = f"{node}/{n}".encode()
            barrier.wait(60)
            now = datetime.now(UTC)
            stamp = int(now.timestamp())
            target = f"/v1/nodes/{node}/reports"
            signature = signer.sign(signed_bytes("POST", target, node, stamp, n + 1, body))
            signed = SignedRequest(node, stamp, n + 1, signature, "POST", target, body)
            try:
                node_reports.accept(store, signed, _read(report), now)
                outcomes.put((n, node, "accepted"))
            except DomainError as refused:
                outcomes.put((n, node, str(refused.details.get("reason") or refused.code)))
    finally:
        store.close()
