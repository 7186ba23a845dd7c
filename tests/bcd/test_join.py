"""`bcd join` end to end against the real app in-process: the key is made, its public half
registered, and the identity kept under the state directory with the private key in mode 0600."""

from __future__ import annotations

import functools
import json
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from better_compute.bcd import joining
from better_compute.bcd.identity import Identity
from better_compute.entrypoints.bcd import bcd_app
from better_compute.storage.store import Store
from tests.node_world import SERVER, NodeWorld


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> NodeWorld:
    store = Store.open(f"sqlite:///{tmp_path / 'bc.db'}")
    w = NodeWorld(store, tmp_path)
    monkeypatch.setattr(joining, "join", functools.partial(joining.join, transport=w.transport()))
    return w


def test_bcd_join_writes_the_identity_and_the_node_can_sign(world: NodeWorld, tmp_path: Path) -> None:
    state = tmp_path / "state"
    token = world.join_token("n-1")
    args = ["join", "--server", SERVER, "--token", token, "--node", "n-1", "--state-dir", str(state)]
    result = CliRunner().invoke(bcd_app, args)
    assert result.exit_code == 0, result.output
    assert "joined n-1" in result.output
    assert stat.S_IMODE((state / "node.key").stat().st_mode) == 0o600
    record = json.loads((state / "identity.json").read_text())
    assert (record["node"], record["server"]) == ("n-1", SERVER)
    assert record["publicKey"].startswith("-----BEGIN PUBLIC KEY-----")
    assert (state / "sequence").read_text().strip() == "1"
    identity = Identity.load(state)
    accepted = world.node(identity).nodes.report("n-1", {"kind": "ObservedGeneration", "generation": 0})
    assert accepted.sequence == 1 and identity.next_sequence() == 2
    # The token is spent: a second join with it fails and leaves the identity as it was.
    again = CliRunner().invoke(bcd_app, args)
    assert again.exit_code == 1 and "join token" in again.output
    assert json.loads((state / "identity.json").read_text()) == record
    world.store.close()
