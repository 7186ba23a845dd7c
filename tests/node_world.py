"""A fleet whose nodes join and sign like `bcd` does, against the real app in-process (no sockets).

Nodes sign with `bcd`'s own code (`bcd.joining`, `bcd.signing.ReportSigner`) through the typed client,
whose transport hands each request, bytes unchanged, to a TestClient of the app.
"""

from __future__ import annotations

import io
import warnings
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from better_compute.bcd.daemon import Daemon, LoggingRunner
from better_compute.bcd.fake import FakeNode
from better_compute.bcd.identity import Identity
from better_compute.bcd.joining import join, node_client
from better_compute.bcd.logs import Log
from better_compute.client import Compute
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from tests.builders import T0, admin_token, bearer, fleet_spec, real_app, tenant_token

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

SERVER = "http://testserver"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class NodeWorld:
    """The app over a two-node pool (`n-1`, `n-2`, two GPUs each) of `mode`, an admin and the
    pool's owner `platform`."""

    def __init__(
        self,
        store: Store,
        tmp_path: Path,
        mode: str = "mig",
        layout: str = "all-1g.10gb",
        model: str | None = None,
        gpus: int = 2,
        host: dict[str, int] | None = None,
    ) -> None:
        self.fleet: dict[str, Any] = {
            "mode": mode,
            "layout": layout,
            "model": model,
            "gpus": gpus,
            "host": host,
        }
        load_fleet(store, fleet_spec(nodes=2, **self.fleet), T0)
        self.store = store
        self.tmp_path = tmp_path
        self.clock = Clock()
        self.http = TestClient(real_app(store, clock=self.clock))
        self.admin = bearer(admin_token(store))
        self.platform = bearer(tenant_token(store, "platform"))
        for cls in ("gpu", "gpu.mig", "gpu.slot"):
            quota = {"tenantId": "platform", "poolId": "p1", "class": cls, "limit": 64}
            r = self.http.put("/v1/quotas", json=quota, headers=self.admin)
            assert r.status_code == 200, r.text

    def forward(self, request: httpx.Request) -> httpx.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        answer = self.http.request(
            request.method, request.url.raw_path.decode("ascii"), headers=headers, content=request.content
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.forward)

    def join_token(self, node: str, **body: Any) -> str:
        r = self.http.post(f"/v1/nodes/{node}/join-tokens", json={"node": node, **body}, headers=self.admin)
        assert r.status_code == 201, r.text
        return str(r.json()["token"])

    def join(self, node: str) -> Identity:
        return join(SERVER, self.join_token(node), node, self.tmp_path / node, transport=self.transport())

    def node(self, identity: Identity, skew: float = 0.0) -> Compute:
        """A client signing as `identity`, its clock `skew` seconds off the server's."""
        return node_client(
            identity, transport=self.transport(), clock=lambda: self.clock.now.timestamp() + skew
        )

    def daemon(
        self, node: str, mode: str | None = None, layout: str | None = None
    ) -> tuple[Daemon, FakeNode]:
        """`bcd run`'s loop for `node`, joined, over a fake of the fleet's node (`mode`, `layout`:
        the world's unless given), logging to memory, its first inventory queued."""
        identity = self.join(node)
        given = {k: v for k, v in (("mode", mode), ("layout", layout)) if v is not None}
        spec = fleet_spec(nodes=2, **{**self.fleet, **given})
        fake = FakeNode.from_fleet(spec, node)
        log = Log(io.StringIO(), node=node)
        daemon = Daemon(
            identity,
            fake,
            self.node(identity),
            cdi_root=self.tmp_path / node / "cdi",
            log=log,
            mps_runner=LoggingRunner(log),
            wait=0,
        )
        daemon.enqueue(daemon.inventory())
        return daemon, fake

    def reserve(self, devices: list[dict[str, Any]], **extra: Any) -> Any:
        body = {"poolId": "p1", "devices": devices, "duration": extra.pop("duration", "4h"), **extra}
        r = self.http.post("/v1/reservations", json=body, headers=self.platform)
        assert r.status_code == 201, r.text
        return r.json()
