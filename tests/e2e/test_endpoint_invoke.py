"""`endpoints.invoke` through the real app to real local HTTP servers standing in for each copy's model
server (docs/endpoints.md#invoking-an-endpoint).

The copies' `ReplicaState` rows are written through the store here, as a node's signed report would
write them (`tx.replica_states.put`): the server does not yet take a node's report on an endpoint
copy (its check that an allocation is on the node knows only ledger allocations)."""

from __future__ import annotations

import asyncio
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from better_compute.api.routes import invocations as invocations_route
from better_compute.client import Compute, ComputeError, NotFoundError
from better_compute.domain.endpoints.endpoints import copy_allocation_id
from better_compute.domain.fleet.replica_states import ReplicaState
from better_compute.service.gate.mig_gate import Reconciler
from better_compute.storage.store import Store
from tests.api.test_endpoints import endpoint
from tests.builders import T0, bearer, tenant_token
from tests.conftest import SERIAL
from tests.node_world import NodeWorld

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

HEADER = "X-Amzn-SageMaker-Inference-Component"


@dataclass
class ModelServer:
    """A copy's model server: answers `POST /invocations` with its name and the body it got."""

    name: str
    delay: float = 0.0
    extra_headers: list[tuple[str, bytes]] = field(default_factory=list)
    seen: list[bytes] = field(default_factory=list)
    heads: list[dict[str, str]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def address(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> ModelServer:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                outer.seen.append(body)
                outer.heads.append({k.lower(): v for k, v in self.headers.items()})
                time.sleep(outer.delay)
                answer = f"{outer.name}:{self.headers.get('content-type')}:".encode() + body
                headers = [
                    (b"Content-Type", b"text/plain"),
                    *((k.encode(), v) for k, v in outer.extra_headers),
                ]
                self.send_response_only(200 if self.path == "/invocations" else 404)
                for key, value in headers:  # as bytes: a value need not be Latin-1 text
                    self._headers_buffer.append(key + b": " + value + b"\r\n")  # type: ignore[attr-defined]
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def servers() -> Iterator[list[ModelServer]]:
    made: list[ModelServer] = []
    yield made
    for s in made:
        s.stop()


def _world(store: Store, tmp_path: Path, components: dict[str, int]) -> NodeWorld:
    """An endpoint `chat` on n-1 (two GPUs cut to two 3g partitions each) with one component per
    entry of `components` (name: copies)."""
    world = NodeWorld(store, tmp_path)
    daemon, _ = world.daemon("n-1")
    assert daemon.step(False)
    made = world.http.post(
        "/v1/endpoints", json=endpoint(["mig-3g.40gb", "mig-3g.40gb"], name="chat"), headers=world.platform
    )
    assert made.status_code == 201, made.text
    assert daemon.step(True)
    Reconciler(store, world.clock, "r1").tick()
    for name, copies in components.items():
        body = {
            "name": name,
            "endpointName": "chat",
            "variantName": "AllTraffic",
            "model": name,
            "partitionType": "mig-3g.40gb",
            "devicesRequired": 1,
            "copies": copies,
        }
        created = world.http.post("/v1/components", json=body, headers=world.platform)
        assert created.status_code == 201 and created.json()["placedCopies"] == copies, created.text
    return world


def _report(store: Store, component: str, copy: int, state: str, address: str | None) -> None:
    with store.begin() as tx:
        tx.replica_states.put(
            ReplicaState(copy_allocation_id(component, copy), "n-1", state, T0, address=address)  # type: ignore[arg-type]
        )


def _invoke(http: TestClient, headers: dict[str, str], component: str, body: bytes = b"hi") -> Any:
    return http.post(
        "/v1/endpoints/chat/invoke",
        content=body,
        headers={**headers, HEADER: component, "Content-Type": "application/json"},
    )


def test_each_component_answers_from_its_own_ready_copies_named_by_header_or_query(
    store: Store, tmp_path: Path, servers: list[ModelServer]
) -> None:
    world = _world(store, tmp_path, {"llama": 2, "mistral": 1})
    for name, copy in (("llama", 0), ("llama", 1), ("mistral", 0)):
        servers.append(ModelServer(f"{name}-{copy}").start())
        _report(store, name, copy, "ready", servers[-1].address)
    with TestClient(world.http.app) as http:
        answer = _invoke(http, world.platform, "mistral", b'{"x": 1}')
        assert answer.status_code == 200, answer.text
        assert answer.content == b'mistral-0:application/json:{"x": 1}'
        assert answer.headers["content-type"] == "text/plain"
        assert answer.headers["bc-invoked-copy"] == "mistral:0"
        by_query = http.post(
            "/v1/endpoints/chat/invoke",
            params={"inferenceComponentName": "llama"},
            content=b"q",
            headers=world.platform,
        )
        assert by_query.status_code == 200 and by_query.content.startswith(b"llama-")
        copies = Counter(_invoke(http, world.platform, "llama").headers["bc-invoked-copy"] for _ in range(6))
        assert copies == {"llama:0": 3, "llama:1": 3}  # idle copies take turns
        assert "authorization" not in str(servers[0].seen)  # only the body and its type go on
        # The admin may invoke too; another tenant is told the endpoint does not exist.
        assert _invoke(http, world.admin, "mistral").status_code == 200
        acme = bearer(tenant_token(store, "acme"))
        hidden = _invoke(http, acme, "mistral")
        assert hidden.status_code == 404 and hidden.json()["error"]["message"] == "endpoint chat not found"
        assert len(servers[2].seen) == 2  # the refused call reached no model server


def test_refusals_name_what_is_wrong(store: Store, tmp_path: Path, servers: list[ModelServer]) -> None:
    world = _world(store, tmp_path, {"llama": 1})
    servers.append(ModelServer("llama-0").start())
    _report(store, "llama", 0, "ready", servers[0].address)
    with TestClient(world.http.app) as http:
        unnamed = http.post("/v1/endpoints/chat/invoke", content=b"x", headers=world.platform)
        assert unnamed.status_code == 400 and unnamed.json()["error"]["code"] == "INVALID_INPUT"
        assert "X-Amzn-SageMaker-Inference-Component" in unnamed.json()["error"]["message"]
        unknown = _invoke(http, world.platform, "nope")
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "NOT_FOUND"
        no_endpoint = http.post(
            "/v1/endpoints/other/invoke", content=b"x", headers={**world.platform, HEADER: "llama"}
        )
        assert no_endpoint.status_code == 404
        big = _invoke(http, world.platform, "llama", b"x" * (6 * 1024 * 1024 + 1))
        assert big.status_code == 413 and big.json()["error"]["details"]["limit"] == 6 * 1024 * 1024
        fits = _invoke(http, world.platform, "llama", b"x" * (2 * 1024 * 1024))  # over the API's 1 MiB
        assert fits.status_code == 200 and len(servers[0].seen[-1]) == 2 * 1024 * 1024


def test_copies_not_ready_get_no_traffic_and_none_ready_is_503(
    store: Store, tmp_path: Path, servers: list[ModelServer]
) -> None:
    world = _world(store, tmp_path, {"llama": 3})
    servers.extend(ModelServer(f"llama-{copy}").start() for copy in range(3))
    _report(store, "llama", 0, "ready", servers[0].address)
    _report(store, "llama", 1, "not-ready", servers[1].address)
    _report(store, "llama", 2, "created", servers[2].address)
    with TestClient(world.http.app) as http:
        answered = {_invoke(http, world.platform, "llama").headers["bc-invoked-copy"] for _ in range(5)}
        assert answered == {"llama:0"}
        assert servers[1].seen == [] and servers[2].seen == []
        _report(store, "llama", 2, "ready", servers[2].address)
        answered = {_invoke(http, world.platform, "llama").headers["bc-invoked-copy"] for _ in range(4)}
        assert answered == {"llama:0", "llama:2"}
        # Copy 0 goes not-ready: from the next request on it gets nothing.
        _report(store, "llama", 0, "not-ready", servers[0].address)
        before = len(servers[0].seen)
        answered = {_invoke(http, world.platform, "llama").headers["bc-invoked-copy"] for _ in range(4)}
        assert answered == {"llama:2"} and len(servers[0].seen) == before
        _report(store, "llama", 2, "exited", servers[2].address)
        none = _invoke(http, world.platform, "llama")
        assert none.status_code == 503 and none.json()["error"]["code"] == "UNAVAILABLE"
        assert none.json()["error"]["message"] == "component llama of endpoint chat has no ready copy"


def test_a_copy_refusing_connections_is_passed_over_once(
    store: Store, tmp_path: Path, servers: list[ModelServer]
) -> None:
    world = _world(store, tmp_path, {"llama": 2})
    servers.append(ModelServer("llama-1").start())
    dead = ModelServer("llama-0").start()
    address = dead.address
    dead.stop()  # its port refuses connections from now on
    _report(store, "llama", 0, "ready", address)
    _report(store, "llama", 1, "ready", servers[0].address)
    with TestClient(world.http.app) as http:
        for _ in range(4):
            answer = _invoke(http, world.platform, "llama")
            assert answer.status_code == 200 and answer.headers["bc-invoked-copy"] == "llama:1"
        _report(store, "llama", 1, "ready", address)  # both refuse now
        refused = _invoke(http, world.platform, "llama")
        assert refused.status_code == 503 and "refused" in refused.json()["error"]["message"]


@SERIAL
def test_least_outstanding_spreads_concurrent_requests(
    store: Store, tmp_path: Path, servers: list[ModelServer]
) -> None:
    world = _world(store, tmp_path, {"llama": 2})
    servers.append(ModelServer("llama-0", delay=1.0).start())
    servers.append(ModelServer("llama-1").start())
    _report(store, "llama", 0, "ready", servers[0].address)
    _report(store, "llama", 1, "ready", servers[1].address)
    with TestClient(world.http.app) as http:

        def call(_: int) -> str:
            answer = _invoke(http, world.platform, "llama")
            assert answer.status_code == 200
            return str(answer.headers["bc-invoked-copy"])

        with ThreadPoolExecutor(8) as pool:
            slow = pool.submit(call, 0)  # the first in turn: copy 0, which takes a second to answer
            time.sleep(0.3)
            # While it is outstanding, every request goes to the idle copy rather than taking turns.
            assert [call(i) for i in range(5)] == ["llama:1"] * 5
            assert slow.result() == "llama:0"
            servers[0].delay = servers[1].delay = 0.4
            spread = Counter(pool.map(call, range(6)))  # six at once over two equally slow copies
        assert spread["llama:0"] >= 2 and spread["llama:1"] >= 2, spread


def test_the_client_returns_the_model_servers_answer_and_raises_the_servers_refusals(
    store: Store, tmp_path: Path, servers: list[ModelServer]
) -> None:
    world = _world(store, tmp_path, {"llama": 1})
    servers.append(ModelServer("llama-0").start())
    _report(store, "llama", 0, "ready", servers[0].address)
    token = world.platform["Authorization"].removeprefix("Bearer ")
    with Compute("http://testserver", token, transport=world.transport()) as compute:
        status, headers, body = compute.endpoints.invoke(
            "chat", "llama", b"{}", content_type="application/json"
        )
        assert (status, headers["bc-invoked-copy"], body) == (200, "llama:0", b"llama-0:application/json:{}")
        with pytest.raises(NotFoundError, match="component nope not found on endpoint chat"):
            compute.endpoints.invoke("chat", "nope", b"{}")
        _report(store, "llama", 0, "not-ready", servers[0].address)
        with pytest.raises(ComputeError) as refused:
            compute.endpoints.invoke("chat", "llama", b"{}")
        assert refused.value.code == "UNAVAILABLE"


def test_invoke_passes_on_only_the_content_type_and_accept_it_was_given(
    store: Store, tmp_path: Path, servers: list[ModelServer]
) -> None:
    """The model server gets the caller's Content-Type and Accept, never the caller's token, and no
    Content-Type the caller did not send; a body over a MiB arrives whole."""
    world = _world(store, tmp_path, {"llama": 1})
    llama = ModelServer("llama").start()
    servers.append(llama)
    _report(store, "llama", 0, "ready", llama.address)
    big = bytes(range(256)) * (6 * 1024 * 3)  # 4.5 MiB, under the 6 MiB limit
    with world.http as http:
        bare = http.post(
            "/v1/endpoints/chat/invoke", content=b"plain", headers={**world.platform, HEADER: "llama"}
        )
        typed = http.post(
            "/v1/endpoints/chat/invoke",
            content=big,
            headers={
                **world.platform,
                HEADER: "llama",
                "Content-Type": "application/x-npy",
                "Accept": "text/csv",
            },
        )
    assert bare.status_code == 200 and bare.content == b"llama:None:plain"
    assert typed.status_code == 200 and typed.content == b"llama:application/x-npy:" + big
    first, second = llama.heads
    assert "authorization" not in first and "authorization" not in second
    assert "content-type" not in first
    assert second["content-type"] == "application/x-npy" and second["accept"] == "text/csv"
    assert second["content-length"] == str(len(big))


def test_a_model_servers_cookies_never_reach_the_next_caller_or_another_model_server(
    store: Store, tmp_path: Path, servers: list[ModelServer]
) -> None:
    """No cookie jar: a `Set-Cookie` a model server answers with (at a host name, where a jar would
    keep it) is relayed to nobody and sent to no model server later."""
    world = _world(store, tmp_path, {"llama": 1, "mistral": 1})
    setting = ModelServer("llama", extra_headers=[("Set-Cookie", b"session=tenant-a; Path=/")]).start()
    other = ModelServer("mistral").start()
    servers.extend([setting, other])
    _report(store, "llama", 0, "ready", setting.address.replace("127.0.0.1", "localhost"))
    _report(store, "mistral", 0, "ready", other.address.replace("127.0.0.1", "localhost"))
    with TestClient(world.http.app) as http:
        for component in ("llama", "llama", "mistral"):
            answer = _invoke(http, world.platform, component)
            assert answer.status_code == 200 and "set-cookie" not in answer.headers
    assert [h.get("cookie") for h in setting.heads + other.heads] == [None, None, None]


def test_a_model_servers_content_type_that_is_not_latin_1_is_relayed_as_sent(
    store: Store, tmp_path: Path, servers: list[ModelServer]
) -> None:
    world = _world(store, tmp_path, {"llama": 1})
    odd = "text/plain; note=日本".encode()
    llama = ModelServer("llama", extra_headers=[("Content-Type", odd)]).start()
    servers.append(llama)
    _report(store, "llama", 0, "ready", llama.address)

    async def invoke() -> httpx.Response:
        # httpx over ASGI keeps header bytes as the app sent them (the TestClient makes them text).
        transport = httpx.ASGITransport(app=world.http.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bc") as client:
            return await client.post(
                "/v1/endpoints/chat/invoke", content=b"hi", headers={**world.platform, HEADER: "llama"}
            )

    answer = asyncio.run(invoke())
    assert answer.status_code == 200
    assert odd in [v for k, v in answer.headers.raw if k.lower() == b"content-type"]


@SERIAL
def test_a_copy_whose_connections_are_all_busy_does_not_hold_up_another_copys_requests(
    store: Store, tmp_path: Path, servers: list[ModelServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connections are bounded per copy: requests to a slow copy that holds all of its own wait (and
    go elsewhere or get 503 after `POOL_WAIT_S`), while another component's copy answers at once."""
    monkeypatch.setattr(invocations_route, "UPSTREAM_PER_COPY", 1)
    monkeypatch.setattr(invocations_route, "POOL_WAIT_S", 0.5)
    world = _world(store, tmp_path, {"llama": 1, "mistral": 1})
    slow = ModelServer("llama", delay=3.0).start()
    fast = ModelServer("mistral").start()
    servers.extend([slow, fast])
    _report(store, "llama", 0, "ready", slow.address)
    _report(store, "mistral", 0, "ready", fast.address)
    with TestClient(world.http.app) as http, ThreadPoolExecutor(2) as pool:
        held = pool.submit(_invoke, http, world.platform, "llama")
        while not slow.seen:
            time.sleep(0.01)
        started = time.monotonic()
        answer = _invoke(http, world.platform, "mistral")
        assert answer.status_code == 200 and time.monotonic() - started < 2.0
        waited = _invoke(http, world.platform, "llama")  # its one connection is busy
        assert waited.status_code == 503 and "none free within" in waited.json()["error"]["message"]
        assert held.result().status_code == 200
