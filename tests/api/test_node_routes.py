"""The holes issue 35 found at the node routes, through the real app on SQLite and PostgreSQL: a join
whose body names another node than its path, a report or spec read validated before its caller is
known, a signed spec read sent again, and an idle `bcd` that `doctor` called silent."""

from __future__ import annotations

import base64
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from better_compute.client import UnauthenticatedError
from better_compute.domain.fleet.node_reports import HEADERS, signed_bytes
from better_compute.storage.kernel.tables import nodes
from better_compute.storage.store import Store
from tests.builders import stored_events
from tests.node_world import NodeWorld


@pytest.fixture
def world(store: Store, tmp_path: Path) -> NodeWorld:
    return NodeWorld(store, tmp_path)


def error(answer: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = answer.json()["error"]
    return body


def recorded(client: Any) -> list[httpx.Request]:
    """The requests `client` (a node's `Compute`) sends from now on, signed, as they went out."""
    sent: list[httpx.Request] = []
    client._http.event_hooks["request"].append(sent.append)
    return sent


def send_again(world: NodeWorld, request: httpx.Request) -> httpx.Response:
    """`request` sent again byte for byte, as someone who captured it would."""
    headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
    return world.http.request(
        request.method, request.url.raw_path.decode("ascii"), headers=headers, content=request.content
    )


def silent(world: NodeWorld) -> list[str]:
    answer = world.http.get("/v1/doctor", headers=world.admin)
    assert answer.status_code == 200, answer.text
    return [f["subject"] for f in answer.json()["findings"] if f["code"] == "node.silent"]


# -- nodes.join ---------------------------------------------------------------------------------


def test_join_refuses_a_body_naming_another_node(world: NodeWorld) -> None:
    token = world.join_token("n-1")
    key = "A" * 43 + "="
    crossed = world.http.post("/v1/nodes/n-1/join", json={"node": "n-2", "token": token, "publicKey": key})
    assert crossed.status_code == 400, crossed.text
    assert error(crossed)["code"] == "INVALID_INPUT"
    assert error(crossed)["details"] == {"field": "node", "path": "n-1", "body": "n-2"}
    assert "n-2" in error(crossed)["message"] and "n-1" in error(crossed)["message"]
    # Nothing happened: no node joined, and the token still admits the join it was made for.
    assert stored_events(world.store, "node.joined") == []
    joined = world.http.post("/v1/nodes/n-1/join", json={"node": "n-1", "token": token, "publicKey": key})
    assert joined.status_code == 200, joined.text


# -- who is calling, before what is sent ----------------------------------------------------------


def test_an_unsigned_report_is_401_not_a_field_error(world: NodeWorld) -> None:
    nonsense = {"node": "n-1", "report": {"kind": "NoSuchKind"}, "extra": 1}
    bare = world.http.post("/v1/nodes/n-1/reports", json=nonsense)
    assert bare.status_code == 401, bare.text
    assert error(bare)["details"]["reason"] == "unsigned"
    not_json = world.http.post(
        "/v1/nodes/n-1/reports", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 401 and error(not_json)["details"]["reason"] == "unsigned"


def test_a_badly_signed_report_is_401_not_a_field_error(world: NodeWorld) -> None:
    identity = world.join("n-1")
    client = world.node(identity)
    sent = recorded(client.nodes._compute)
    client.nodes.report("n-1", {"kind": "ObservedGeneration", "generation": 0})
    headers = {name: sent[-1].headers[name] for name in HEADERS}
    headers["BC-Sequence"] = "99"  # a fresh number, but the signature covers the old one
    forged = world.http.post(
        "/v1/nodes/n-1/reports", json={"node": "n-1", "report": {"kind": "Nope"}}, headers=headers
    )
    assert forged.status_code == 401, forged.text
    assert error(forged)["details"]["reason"] == "signature"


def test_a_signed_report_with_a_bad_body_is_still_a_field_error(world: NodeWorld) -> None:
    client = world.node(world.join("n-1"))
    with pytest.raises(Exception) as refused:
        client.nodes._compute._http.post(  # the typed client would refuse the body itself
            "/v1/nodes/n-1/reports", json={"node": "n-1", "report": {"kind": "ObservedGeneration"}}
        ).raise_for_status()
    answer = refused.value.response  # type: ignore[attr-defined]
    assert answer.status_code == 400, answer.text
    assert error(answer)["code"] == "INVALID_INPUT"
    assert "report" in error(answer)["message"] and error(answer)["details"]["errors"]
    not_json = client.nodes._compute._http.post(
        "/v1/nodes/n-1/reports", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 400 and error(not_json)["code"] == "INVALID_INPUT"


def test_an_unsigned_spec_read_is_401_not_a_query_error(world: NodeWorld) -> None:
    bare = world.http.get("/v1/nodes/n-1/spec", params={"after": "x", "wait": 999})
    assert bare.status_code == 401, bare.text
    # The admin, once known, hears what is wrong with the query.
    admin = world.http.get("/v1/nodes/n-1/spec", params={"after": "x", "wait": 999}, headers=world.admin)
    assert admin.status_code == 400, admin.text


def test_a_spec_read_naming_another_node_than_it_can_sign_as_is_a_signature_refusal(world: NodeWorld) -> None:
    """A caller that puts another node's name in the signature headers is refused for what it
    cannot sign, before the path is looked at: it learns nothing from which path it asked for."""
    client = world.node(world.join("n-1"))
    world.join("n-2")
    sent = recorded(client.nodes._compute)
    client.nodes.spec("n-1")
    captured = sent[-1]
    forged = captured.headers.copy()
    forged["BC-Node"] = "n-2"
    answer = world.http.get(
        captured.url.raw_path.decode("ascii"),
        headers={k: v for k, v in forged.items() if k.lower() not in ("host", "content-length")},
    )
    assert answer.status_code == 401, answer.text
    assert error(answer)["details"]["reason"] == "signature"


# -- a spec read sent again -----------------------------------------------------------------------


def test_a_signed_spec_read_cannot_be_replayed(world: NodeWorld) -> None:
    client = world.node(world.join("n-1"))
    sent = recorded(client.nodes._compute)
    first = client.nodes.spec("n-1")
    again = send_again(world, sent[-1])
    assert again.status_code == 401, again.text
    assert error(again)["details"]["reason"] == "replayed"
    # Still refused minutes later, however long the first one waited; the node itself goes on reading.
    world.clock.now += timedelta(minutes=4)
    assert send_again(world, sent[-1]).status_code == 401
    assert client.nodes.spec("n-1").generation == first.generation
    assert client.nodes.report("n-1", {"kind": "ObservedGeneration", "generation": 0}).sequence > 1
    reasons = [e["payload"]["reason"] for e in stored_events(world.store, "node.report.refused")]
    assert reasons == ["replayed", "replayed"]


def test_copies_of_one_signed_spec_read_sent_at_once_admit_one(world: NodeWorld) -> None:
    """Six copies of one captured read, sent together: the conditional update takes its number once
    (on PostgreSQL the losers wait on the row, then find the number taken)."""
    client = world.node(world.join("n-1"))
    sent = recorded(client.nodes._compute)
    client.nodes.spec("n-1")
    captured = sent[-1]
    # The server forgets the number, so that each copy could be the first to use it.
    with world.store.engine.begin() as conn:
        conn.execute(update(nodes).where(nodes.c.id == "n-1").values(report_sequence=0))
    codes: list[int] = []
    barrier = threading.Barrier(6)

    def send() -> None:
        barrier.wait()
        codes.append(send_again(world, captured).status_code)

    threads = [threading.Thread(target=send) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [200] + [401] * 5


def test_a_spec_read_signed_with_a_used_sequence_number_is_refused(world: NodeWorld) -> None:
    identity = world.join("n-1")
    client = world.node(identity)
    client.nodes.report("n-1", {"kind": "ObservedGeneration", "generation": 0})  # number 1
    (identity.state_dir / "sequence").write_text("1\n")  # a node that forgot, or a forger with its key
    with pytest.raises(UnauthenticatedError) as refused:
        client.nodes.spec("n-1")
    assert refused.value.details["reason"] == "replayed"


def test_a_spec_read_signed_with_sequence_0_as_bcd_did_is_refused_saying_to_upgrade(world: NodeWorld) -> None:
    identity = world.join("n-1")
    stamp = int(world.clock.now.timestamp())
    target = "/v1/nodes/n-1/spec"
    signature = identity.key.sign(signed_bytes("GET", target, "n-1", stamp, 0, b""))
    headers = {
        "BC-Node": "n-1",
        "BC-Timestamp": str(stamp),
        "BC-Sequence": "0",
        "BC-Signature": base64.b64encode(signature).decode(),
    }
    old = world.http.get(target, headers=headers)
    assert old.status_code == 401, old.text
    assert error(old)["details"]["reason"] == "replayed"
    assert "upgrade bcd" in error(old)["message"]


# -- a live bcd is not silent ---------------------------------------------------------------------


def test_an_idle_live_bcd_is_not_silent(world: NodeWorld) -> None:
    daemon, _ = world.daemon("n-1")
    settled = daemon.step(False)
    while not settled:
        settled = daemon.step(settled)
    assert silent(world) == []
    # An hour with nothing to do: the daemon only long-polls its spec, and that is contact.
    for _ in range(6):
        world.clock.now += timedelta(minutes=10)
        assert daemon.step(True)
        assert silent(world) == [], "a bcd that reads its spec is alive"
    nodes = world.http.get("/v1/nodes", headers=world.admin).json()["items"]
    node = next(n for n in nodes if n["id"] == "n-1")
    assert node["lastContactAt"] == world.clock.now.isoformat().replace("+00:00", "Z")
    # Its bcd stops: ten minutes later it is silent, and says since when.
    last = world.clock.now
    world.clock.now += timedelta(minutes=10)
    assert silent(world) == ["n-1"]
    finding = next(
        f
        for f in world.http.get("/v1/doctor", headers=world.admin).json()["findings"]
        if f["code"] == "node.silent"
    )
    assert last.isoformat().replace("+00:00", "Z") in finding["detail"]
