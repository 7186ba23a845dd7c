"""Nodes racing to report one GPU no node has reported yet: exactly one gets it, on PostgreSQL.

Each node's report checks who holds the uuids it names before it writes, but two reports of a brand
new GPU both find it held by nobody; the one to commit second must not overwrite the first's GPU row
(the upsert's ON CONFLICT would). storage.fleet.gpus writes a node's claim on a uuid only where no other
node's is: the second waits on the first's uncommitted row, and is refused once it commits. The
exact interleaving is forced first; then real processes, one per node, race round after round, and
the outcome is checked by SQL.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from dataclasses import replace

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from sqlalchemy import text

from better_compute.bcd.identity import public_key_text
from better_compute.domain.fleet.inventory import NodeReport
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import inventory, joining
from better_compute.service.fleet.rederive import stored_reports
from better_compute.storage.store import Store
from tests.builders import T0, fleet_spec
from tests.processes import race_context
from tests.reliability.gpu_claim_race_worker import new_gpu, race
from tests.reliability.interleave import until_blocked

pytestmark = pytest.mark.postgres

NODES = 4
ROUNDS = 40 * int(os.environ.get("BC_RACE_SCALE", "1"))

OWNERS_SQL = (
    "SELECT g.id, g.node_id, g.present, d.node_id FROM gpus g LEFT JOIN device_uuids d ON d.uuid = g.id"
    " WHERE g.id LIKE 'GPU-race-%' ORDER BY g.id"
)


def _url(store: Store) -> str:
    return store.engine.url.render_as_string(hide_password=False)


def test_two_nodes_reporting_one_new_gpu_at_once_leave_it_with_the_first(pg_store: Store) -> None:
    """n-1's report of a new GPU has written it but not committed when n-2's report of it, having
    found it held by nobody, writes it too."""
    store = pg_store
    load_fleet(store, fleet_spec(nodes=2, mode="exclusive"), T0)
    with store.read() as tx:
        one, two = stored_reports(tx, ["n-1", "n-2"])
    extra = replace(one.gpus[0], uuid=new_gpu(0), index=2)
    first = store.begin()
    tx = first.__enter__()
    errors: list[BaseException] = []

    def second() -> None:
        try:
            inventory.ingest(store, [NodeReport("n-2", (*two.gpus, extra))], T0)
        except BaseException as exc:
            errors.append(exc)

    racer = threading.Thread(target=second)
    try:
        inventory.ingest_in(tx, [NodeReport("n-1", (*one.gpus, extra))], T0)
        racer.start()
        until_blocked(store, racer)
    except BaseException:
        first.__exit__(*sys.exc_info())
        raise
    first.__exit__(None, None, None)
    racer.join(30)
    assert [getattr(e, "reason", None) for e in errors] == ["GpuOwnedElsewhere"], errors
    with store.engine.connect() as conn:
        assert conn.execute(text(OWNERS_SQL)).all() == [(new_gpu(0), "n-1", True, "n-1")]
        on_two = conn.execute(text("SELECT count(*) FROM atoms WHERE node_id = 'n-2'")).scalar_one()
    assert on_two == len(two.gpus)  # n-2's own GPUs as they were: its report wrote nothing


def test_nodes_racing_to_report_one_new_gpu_leave_it_with_exactly_one(pg_store: Store) -> None:
    store = pg_store
    load_fleet(store, fleet_spec(nodes=NODES, mode="exclusive", gpus=1), T0)
    names = [f"n-{i + 1}" for i in range(NODES)]
    keys: dict[str, bytes] = {}
    for name in names:
        key = Ed25519PrivateKey.generate()
        token = joining.issue_in_process(store, name, T0).token
        joining.join(store, name, token, public_key_text(key), T0)
        keys[name] = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    with store.read() as tx:
        own = {r.node: list(r.gpus) for r in stored_reports(tx, names)}
    ctx = race_context()
    barrier = ctx.Barrier(NODES)
    outcomes = ctx.Queue()
    workers = [
        ctx.Process(target=race, args=(_url(store), name, keys[name], own[name], ROUNDS, barrier, outcomes))
        for name in names
    ]
    for worker in workers:
        worker.start()
    results = [outcomes.get(timeout=120) for _ in range(NODES * ROUNDS)]
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    won = Counter(n for n, _, outcome in results if outcome == "accepted")
    refused = Counter(outcome for _, _, outcome in results if outcome != "accepted")
    # Every round: one node's report taken, every other refused for naming a GPU it holds.
    assert all(won[n] == 1 for n in range(ROUNDS)), won
    assert refused == Counter({"GpuOwnedElsewhere": (NODES - 1) * ROUNDS}), refused
    winner = {n: node for n, node, outcome in results if outcome == "accepted"}
    with store.engine.connect() as conn:
        rows = conn.execute(text(OWNERS_SQL)).all()
    # Each round's GPU is on its winner's row, held by it while present there (a node reports the
    # last round's GPU gone when its next report is taken).
    assert [(gpu, node) for gpu, node, _, _ in rows] == [(new_gpu(n), winner[n]) for n in range(ROUNDS)]
    assert all(holder == (node if present else None) for _, node, present, holder in rows), rows
    assert rows[-1][2:] == (True, winner[ROUNDS - 1])
