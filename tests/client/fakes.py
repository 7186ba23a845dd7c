"""A fake server for client tests: canned answers by (verb, path), and every request it saw."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

Handler = Callable[[httpx.Request], httpx.Response]


def reservation_json(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "rsv-1",
        "tenantId": "acme",
        "poolId": "h100-a",
        "status": "scheduled",
        "start": "2030-01-01T10:00:00Z",
        "end": "2030-01-01T14:00:00Z",
        "devices": [{"class": "gpu", "count": 2}],
        "atoms": [
            {"id": "atom-1", "class": "gpu", "gpuId": "GPU-1", "node": "n1", "attributes": {"numaNode": 0}},
            {"id": "atom-2", "class": "gpu", "gpuId": "GPU-2", "node": "n1", "attributes": {"numaNode": 0}},
        ],
        "gpuCount": 2,
        "gpuSlices": 0,
        "idempotencyKey": "k-1",
        "createdAt": "2029-12-31T09:00:00Z",
    }
    body.update(overrides)
    return body


def error_json(code: str, message: str = "refused", **details: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details}}


@dataclass
class FakeServer:
    """Answers from `routes[(verb, path)]`: a JSON value (200), a (status, JSON) pair, or a handler."""

    routes: dict[tuple[str, str], Any] = field(default_factory=dict)
    requests: list[httpx.Request] = field(default_factory=list)
    fail_first: int = 0
    """How many requests fail with a connection error before any is answered."""

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.fail_first > 0:
            self.fail_first -= 1
            raise httpx.ConnectError("connection refused", request=request)
        answer = self.routes.get((request.method, request.url.path))
        if answer is None:
            return httpx.Response(404, json=error_json("NOT_FOUND", f"no route {request.url.path}"))
        if callable(answer):
            response: httpx.Response = answer(request)
            return response
        if isinstance(answer, tuple):
            status, payload = answer
            return httpx.Response(status, json=payload)
        return httpx.Response(200, json=answer)

    def bodies(self) -> list[Any]:
        return [json.loads(r.content) if r.content else None for r in self.requests]
