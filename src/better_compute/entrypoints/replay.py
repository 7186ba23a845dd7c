"""Replay's throwaway store: a fresh SQLite file with the real migrations, the replayed fleet
registered and its nodes' first reports ingested, with a booking index, stock and ids of its own,
and the fleet's simulated nodes (`SimulatedNodes`), which join and take the layouts they are told
as their daemons would.

The migrations run once per process into a template file; each replay copies it (a copy takes
milliseconds, the migrations a second or two). The file lives in a temporary directory that is
removed when the replay ends, so nothing of it outlives the request, and the deployment's own
store is never written.
"""

from __future__ import annotations

import base64
import itertools
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from better_compute.bcd.fake import FakeNode
from better_compute.bcd.inventory import gpu_report
from better_compute.domain.fleet.mig_plan import converged
from better_compute.domain.ops.fleet import FleetSpec
from better_compute.entrypoints.fleet import fleet_model_of, load_fleet
from better_compute.service.fleet import inventory, joining
from better_compute.service.gate import node_spec
from better_compute.service.kernel.ports import StorePort
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.ops.replay import Sandbox
from better_compute.service.placement.placement_stock import Stock
from better_compute.service.tx import Tx
from better_compute.storage.kernel.db import make_engine
from better_compute.storage.store import Store

_template: dict[str, Path] = {}
"""The migrated template of this process, made by the first replay."""
_template_lock = threading.Lock()


class CountingIds:
    """Ids that count up from 1 per kind (`service.kernel.ids.Ids`): a replay is repeatable, and
    ids made later sort later as the production ones do."""

    def __init__(self) -> None:
        self._next = itertools.count(1)

    def _id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._next):014d}"

    def reservation(self) -> str:
        return self._id("rsv")

    def credential(self) -> str:
        return self._id("cred")

    def policy(self) -> str:
        return self._id("pol")

    def workload(self) -> str:
        return self._id("wkl")

    def deployment(self) -> str:
        return self._id("dep")

    def operation(self) -> str:
        return self._id("op")


class SimulatedNodes:
    """The nodes of a fleet, simulated over the fake GPU backend, each doing at once what its
    daemon does (`service.ops.replay.ReplayedNodes`): it joins with a key of its own through the
    join use cases, and when asked to converge it reads its spec through `node_spec.read` (what
    the spec long poll serves), gives each GPU the MIG layout the spec tells (a GPU already there
    is left alone, as the daemon's mig-layout unit leaves it: `mig_plan.converged`), and reports
    its inventory with the spec's generation observed through `inventory.ingest`. No container is
    run and no time passes: a replay is about what holds which GPUs, not about a reconfiguration's
    minutes."""

    def __init__(self, store: StorePort[Tx], fleet: FleetSpec) -> None:
        self.store = store
        self.fleet = fleet
        self.specs = {n.name: n for n in fleet.nodes}
        self.fakes: dict[str, FakeNode] = {}
        self.model_of = fleet_model_of(fleet)

    def join(self, node_ids: Sequence[str], now: datetime) -> None:
        for node in node_ids:
            token = joining.issue_in_process(self.store, node, now).token
            raw = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
            joining.join(self.store, node, token, base64.b64encode(raw).decode("ascii"), now)

    def converge(self, node_id: str, now: datetime) -> None:
        spec = self.specs.get(node_id)
        if spec is None:
            return  # a node the fleet does not simulate: its report never comes
        fake = self.fakes.get(node_id)
        if fake is None:  # as the fleet registered it: its first report was this one's
            fake = self.fakes[node_id] = FakeNode.for_node(self.fleet, spec)
        served = node_spec.read(self.store, node_id, now)
        for told in served.spec.gpus:
            gpu = fake.gpu(told.uuid)
            if told.mig_layout is not None and not converged(
                gpu_report(gpu.read()), gpu.model, told.mig_layout
            ):
                gpu.apply_layout(told.mig_layout)
        fake.observed_generation = served.generation
        inventory.ingest(self.store, [fake.report()], now, self.model_of)


def _migrated_template() -> Path:
    with _template_lock:
        made = _template.get("path")
        if made is None or not made.exists():
            made = Path(tempfile.mkdtemp(prefix="bc-replay-template-")) / "template.db"
            Store.open(f"sqlite:///{made}").close()
            _template["path"] = made
        return made


@contextmanager
def scratch(fleet: FleetSpec, now: datetime) -> Iterator[Sandbox]:
    """A throwaway store holding `fleet` as registered at `now` (`service.ops.replay.Scratch`)."""
    folder = Path(tempfile.mkdtemp(prefix="bc-replay-"))
    try:
        path = folder / "replay.db"
        shutil.copyfile(_migrated_template(), path)
        # Nothing of it need survive a crash: nothing waits for the disk, neither a commit nor a
        # WAL checkpoint (synchronous OFF; a checkpoint's sync cost milliseconds a booking on a
        # shared disk).
        store = Store(make_engine(f"sqlite:///{path}", synchronous="OFF"))
        try:
            load_fleet(store, fleet, now)
            # One tie-break for every replay (a server process's is its pid): a replay repeats.
            yield Sandbox(store, BookingIndex(), Stock(salt=0), CountingIds(), SimulatedNodes(store, fleet))
        finally:
            store.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


__all__ = ["CountingIds", "SimulatedNodes", "scratch"]
