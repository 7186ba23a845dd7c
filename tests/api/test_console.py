"""The web console's pages and session, over the app (the browser tests drive the same pages in
Chromium): log in with a token kept in an HttpOnly, SameSite=Strict cookie; CSRF-safe logout; each
GPU drawn on its placement units; a tenant sees only its own; bad tokens and unknown pools answer
with a page, never a traceback."""

from __future__ import annotations

import re
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from better_compute.api.console import COOKIE, csrf_for
from better_compute.domain.catalog.layouts import validate
from better_compute.storage.store import Store
from tests.builders import tenant_token
from tests.node_world import NodeWorld


def logged_in(world: NodeWorld, token: str) -> None:
    answer = world.http.post("/console/login", data={"token": token}, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/console/fleet", answer.text
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie


class _Gpus(HTMLParser):
    """Each drawn GPU (`div.gpu`) with its cells' data attributes, style and label."""

    def __init__(self) -> None:
        super().__init__()
        self.gpus: list[dict[str, Any]] = []
        self._cell: dict[str, Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        classes = (found.get("class") or "").split()
        if "gpu" in classes:
            self.gpus.append({"units": found["data-units"], "mode": found["data-mode"], "cells": []})
        elif "cell" in classes:
            self._cell = {
                "start": found["data-start"],
                "size": found["data-size"],
                "style": found["style"],
                "state": classes[1],
                "title": found["title"],
                "label": "",
            }
            self.gpus[-1]["cells"].append(self._cell)

    def handle_data(self, data: str) -> None:
        if self._cell is not None and data.strip():
            self._cell["label"] = data.strip()
            self._cell = None


def drawn_gpus(html: str) -> list[dict[str, Any]]:
    parser = _Gpus()
    parser.feed(html)
    return parser.gpus


def token_of(headers: dict[str, str]) -> str:
    return headers["Authorization"].removeprefix("Bearer ")


def test_pages_send_a_logged_out_browser_to_the_login_form_and_a_bad_token_is_told_why(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    for path in ("/console", "/console/fleet", "/console/bookings"):
        answer = world.http.get(path, follow_redirects=False)
        assert answer.status_code == 303 and answer.headers["location"] == "/console/login"
    refused = world.http.post("/console/login", data={"token": "bc_" + "x" * 30})
    assert refused.status_code == 401 and "Not logged in: unknown token." in refused.text
    malformed = world.http.post("/console/login", data={"token": "<script>"})
    assert malformed.status_code == 401 and "<script>" not in malformed.text
    empty = world.http.post("/console/login", content=b"token=" + b"a" * 10_000)
    assert empty.status_code == 401
    browser = world.http.get("/", headers={"Accept": "text/html"}, follow_redirects=False)
    assert browser.headers["location"] == "/console"
    assert world.http.get("/", follow_redirects=False).headers["location"] == "/docs"


def test_the_fleet_draws_every_mig_instance_at_its_placement(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path, layout="mixed:3g.40gb+2x2g.20gb")
    daemon, _ = world.daemon("n-1")
    assert daemon.step(True)
    logged_in(world, token_of(world.admin))
    page = world.http.get("/console/fleet")
    assert page.status_code == 200
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"
    placed = {
        (i.profile, i.start, i.size) for i in validate("mixed:3g.40gb+2x2g.20gb", "H100-80GB").instances
    }
    gpus = drawn_gpus(page.text)
    assert len(gpus) == 4 and all(g["units"] == "8" and g["mode"] == "mig" for g in gpus)
    for gpu in gpus:
        shown = {(c["label"], int(c["start"]), int(c["size"])) for c in gpu["cells"]}
        assert shown == placed
        for c in gpu["cells"]:
            assert c["style"] == f"left: {int(c['start']) * 12.5:.4f}%; width: {int(c['size']) * 12.5:.4f}%"


def test_a_tenant_sees_only_its_own_and_another_tenants_pool_is_not_found(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    daemon, _ = world.daemon("n-1")
    assert daemon.step(True)
    reserved = world.http.post(
        "/v1/reservations",
        json={"poolId": "p1", "duration": "2h", "devices": [{"class": "gpu.mig", "count": 1}]},
        headers=world.platform,
    )
    assert reserved.status_code == 201, reserved.text
    rid = reserved.json()["id"]
    logged_in(world, token_of(world.platform))
    mine = world.http.get("/console/bookings?pool=p1&days=2")
    assert mine.status_code == 200 and f"{rid} (platform)" in mine.text
    busy = world.http.get("/console/bookings?pool=p1&busy=1").text
    assert busy.count('class="trow"') == 1 and f"{rid} (platform)" in busy
    part = world.http.get("/console/bookings?pool=p1&busy=1&partial=1").text  # what the page refreshes
    assert "<html" not in part and part.count('class="trow"') == 1 and f"{rid} (platform)" in part
    cells = [c for g in drawn_gpus(world.http.get("/console/fleet").text) for c in g["cells"]]
    assert [c["title"] for c in cells if c["state"] == "state-booked"] == [
        f"1g.10gb · booked · {rid} (platform)"
    ]
    world.http.cookies.clear()
    logged_in(world, tenant_token(store, "acme"))
    theirs = world.http.get("/console/bookings?pool=p1")
    assert theirs.status_code == 404 and "pool p1 not found" in theirs.text
    assert rid not in world.http.get("/console/fleet").text
    assert world.http.get("/console/bookings?days=nonsense").status_code == 200  # acme has no pool


def test_logout_needs_the_pages_form_token_and_a_revoked_token_is_logged_out(
    store: Store, tmp_path: Path
) -> None:
    world = NodeWorld(store, tmp_path)
    token = tenant_token(store, "platform")
    logged_in(world, token)
    forged = world.http.post("/console/logout", data={"csrf": "0" * 64})
    assert forged.status_code == 403
    assert world.http.get("/console/fleet", follow_redirects=False).status_code == 200
    page = world.http.get("/console/fleet").text
    assert f'name="csrf" value="{csrf_for(token)}"' in page
    out = world.http.post("/console/logout", data={"csrf": csrf_for(token)}, follow_redirects=False)
    assert out.status_code == 303 and f'{COOKIE}=""' in out.headers["set-cookie"]
    world.http.cookies.clear()
    logged_in(world, token)
    credential = world.http.get("/v1/credentials", headers=world.admin).json()["items"]
    for c in credential:
        if c.get("tenantId") == "platform":
            world.http.post(f"/v1/credentials/{c['id']}/revoke", headers=world.admin)
    assert world.http.get("/console/fleet", follow_redirects=False).headers["location"] == "/console/login"


def test_usage_charts_what_was_used_and_the_bill_downloads_as_csv(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    daemon, _ = world.daemon("n-1")
    assert daemon.step(True)
    world.http.put(
        "/v1/prices",
        json={"meter": "gpu.hours", "perHour": "7", "currency": "EUR"},
        headers=world.admin,
    )
    start = world.clock.now
    reserved = world.http.post(
        "/v1/reservations",
        json={"poolId": "p1", "duration": "1h", "devices": [{"class": "gpu.mig", "count": 7}]},
        headers=world.platform,
    )
    assert reserved.status_code == 201, reserved.text
    world.clock.now = start + timedelta(hours=2)
    logged_in(world, token_of(world.platform))
    page = world.http.get("/console/usage?days=1")
    assert page.status_code == 200
    # GPU-hours, capacity by state, fragmentation by pool (p1 is all free: nothing stranded)
    assert page.text.count("<figure") == 3 and "platform · " in page.text
    assert re.search(r"<th scope=\"row\">p1</th><td>0.000</td>", page.text)
    assert re.search(r"<th scope=\"row\">[^<]+</th><td>1.000000</td>", page.text)  # 7 x 1/7 for 1 h
    csv_answer = world.http.get(f"/console/usage/bill.csv?month={start:%Y-%m}")
    assert csv_answer.status_code == 200 and csv_answer.headers["content-type"].startswith("text/csv")
    rows = csv_answer.text.splitlines()
    assert rows[0] == "tenant,from,to,meter,gpu_hours,amount,currency"
    assert rows[1].startswith("platform,") and ",1.000000," in rows[1]
    # A tenant asking for another tenant's bill gets its own.
    assert world.http.get("/console/usage/bill.csv?tenant=acme").text.splitlines()[1].startswith("platform,")
    world.http.cookies.clear()
    assert world.http.get("/console/usage/bill.csv", follow_redirects=False).status_code == 303


def test_the_reserve_form_books_through_admission_and_shows_its_answer(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path, layout="mixed:3g.40gb+2x2g.20gb")
    for node in ("n-1", "n-2"):
        daemon, _ = world.daemon(node)
        assert daemon.step(True)
    token = token_of(world.platform)
    logged_in(world, token)
    form = world.http.get("/console/reserve")
    assert form.status_code == 200 and '<option value="p1"' in form.text
    ask = {"csrf": csrf_for(token), "pool": "p1", "class": "gpu.mig", "count": "4", "profile": "3g.40gb"}
    made = world.http.post("/console/reserve", data={**ask, "duration": "4h"})
    assert made.status_code == 201 and "Reserved rsv-" in made.text, made.text
    rid = re.search(r"Reserved (rsv-\w+)", made.text)
    assert rid is not None
    timeline = world.http.get("/console/bookings?pool=p1&busy=1").text
    assert timeline.count(f'data-allocation="{rid[1]}"') == 4  # one bar per 3g.40gb it holds
    short = world.http.post("/console/reserve", data={**ask, "count": "1", "duration": "1h"})
    assert short.status_code == 422 and "Not reserved: INSUFFICIENT_CAPACITY" in short.text
    assert "Earliest start: <strong>" in short.text  # when the four end
    bad = world.http.post("/console/reserve", data={**ask, "duration": "forever"})
    assert bad.status_code == 422 and "Not reserved: INVALID_INPUT" in bad.text
    together = world.http.post("/console/reserve", data={**ask, "sameGpu": "1", "duration": "1h"})
    assert together.status_code == 422 and "Not reserved: INVALID_INPUT" in together.text
    assert "devices[0].sameGpu: only a gpu.slot line can ask for its atoms on one GPU" in together.text
    assert 'name="sameGpu" type="checkbox" value="1" checked' in together.text  # the form as sent
    forged = world.http.post("/console/reserve", data={**ask, "csrf": "x", "duration": "1h"})
    assert forged.status_code == 403


def test_the_fleet_and_the_timeline_show_a_page_of_nodes_at_a_time(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from better_compute.service.ops import console

    monkeypatch.setattr(console, "FLEET_PAGE_NODES", 1)
    monkeypatch.setattr(console, "TIMELINE_PAGE_NODES", 1)
    world = NodeWorld(store, tmp_path)
    for node in ("n-1", "n-2"):
        daemon, _ = world.daemon(node)
        assert daemon.step(True)
    logged_in(world, token_of(world.admin))
    first = world.http.get("/console/fleet").text
    assert 'data-node="n-1"' in first and 'data-node="n-2"' not in first
    assert "Nodes 1–1 of 2" in first and 'href="/console/fleet?after=n-1"' in first
    second = world.http.get("/console/fleet?after=n-1").text
    assert 'data-node="n-2"' in second and 'data-node="n-1"' not in second and "Next nodes" not in second
    rows = world.http.get("/console/bookings?pool=p1").text
    assert "n-1 GPU" in rows and "n-2 GPU" not in rows
    assert 'href="/console/bookings?pool=p1&amp;days=1&amp;after=n-1"' in rows
    assert "n-2 GPU" in world.http.get("/console/bookings?pool=p1&after=n-1").text


def test_the_endpoints_page_draws_each_partition_with_the_copy_on_it(store: Store, tmp_path: Path) -> None:
    from better_compute.service.endpoints import components
    from tests.service.endpoints.test_endpoints import PLATFORM, component, in_service

    world = NodeWorld(store, tmp_path)
    in_service(world)
    components.create(store, PLATFORM, component("small", 3), world.clock.now)
    logged_in(world, token_of(world.platform))
    page = world.http.get("/console/endpoints").text
    cells = [c for g in drawn_gpus(page) for c in g["cells"]]
    assert len(cells) == 6  # n-1's two GPUs, each 3g.40gb + 2 x 2g.20gb
    running = sorted(c["label"] for c in cells if c["state"] == "state-booked")
    assert running == ["small copy 0", "small copy 1", "small copy 2"]
    assert "<td>small</td><td>mig-2g.20gb</td><td>3 of 3</td>" in page
    world.http.cookies.clear()
    logged_in(world, tenant_token(store, "acme"))
    assert "No endpoint yet" in world.http.get("/console/endpoints").text


def test_events_are_listed_and_filtered_and_the_admin_runs_the_doctor(store: Store, tmp_path: Path) -> None:
    world = NodeWorld(store, tmp_path)
    token = token_of(world.admin)
    logged_in(world, token)
    listed = world.http.get("/console/events")
    assert listed.status_code == 200 and "<code>pool.created</code>" in listed.text
    only = world.http.get("/console/events?type=quota.set").text
    assert "<code>quota.set</code>" in only and "<code>pool.created</code>" not in only
    bad = world.http.get("/console/events?type=Not-A-Type")
    assert bad.status_code == 200 and 'role="alert"' in bad.text
    ran = world.http.post("/console/events", data={"csrf": csrf_for(token)})
    assert ran.status_code == 200 and ("<code>node." in ran.text or "Nothing found" in ran.text)
    assert world.http.post("/console/events", data={"csrf": "no"}).status_code == 403
    world.http.cookies.clear()
    tenant = tenant_token(store, "platform")
    logged_in(world, tenant)
    assert "run with a fleet-admin token" in world.http.get("/console/events").text
    refused = world.http.post("/console/events", data={"csrf": csrf_for(tenant)})
    assert refused.status_code == 403 and "needs a fleet-admin token" in refused.text


def test_the_placement_page_shows_each_clusters_verdict_and_refuses_bad_input_on_the_page(
    store: Store,
) -> None:
    import yaml
    from fastapi.testclient import TestClient

    from better_compute.domain.ops.fleet import parse_fleet
    from better_compute.entrypoints.fleet import load_fleet
    from tests.builders import T0, admin_token, real_app

    demo = Path(__file__).resolve().parents[2] / "examples" / "demo-fleet.yaml"
    load_fleet(store, parse_fleet(yaml.safe_load(demo.read_text())), T0)
    http = TestClient(real_app(store))
    answer = http.post("/console/login", data={"token": admin_token(store)}, follow_redirects=False)
    assert answer.status_code == 303
    page = http.get("/console/placement?project=platform&class=a100-80gb&devices=1&replicas=2").text
    rows = dict(re.findall(r'<tr data-cluster="([\w-]+)"><th scope="row">[\w-]+</th><td>(\w+)</td>', page))
    assert rows == {"eu-west": "insufficient_capacity", "us-east": "admitted"}
    assert "Every replica would be placed" in page
    part = http.get(
        "/console/placement?project=platform&class=a100-80gb&devices=1&replicas=20&partial=1"
    ).text
    assert "<html" not in part and "4 replicas would wait" in part
    bad = http.get("/console/placement?project=platform&class=a100-80gb&devices=1&replicas=lots")
    assert bad.status_code == 200 and "No verdict: INVALID_INPUT" in bad.text
    unknown = http.get("/console/placement?project=platform&class=nope&devices=1&replicas=1")
    assert "No verdict: NOT_FOUND" in unknown.text


def test_a_node_under_a_layout_change_shows_its_target_beside_its_layout_and_changing_pieces(
    store: Store, tmp_path: Path
) -> None:
    from better_compute.service.gate.mig_gate import Reconciler
    from tests.service.gate.test_mig_gate import NEW, change_layout

    world = NodeWorld(store, tmp_path)
    daemon, _ = world.daemon("n-1")
    assert daemon.step(True)
    change_layout(world, NEW)
    Reconciler(store, world.clock, "r1").tick()  # an idle node: scheduled and granted at once
    logged_in(world, token_of(world.admin))
    page = world.http.get("/console/fleet").text
    assert f'<span class="pending">changing to {NEW}</span>' in page
    node = page.split('data-node="n-1"')[1].split("</article>")[0]
    assert "all-1g.10gb" in node and 'class="cell state-changing"' in node and "state-free" not in node


def test_odd_input_is_answered_on_the_page_never_with_a_500(store: Store, tmp_path: Path) -> None:
    """Review findings: a non-ASCII form token, Unicode digits, an `after` past the last node, a
    login posted from another site, and a tenant's bookings page never naming another's endpoint."""
    world = NodeWorld(store, tmp_path)
    token = token_of(world.platform)
    logged_in(world, token)
    for path in ("/console/logout", "/console/reserve", "/console/events"):
        answer = world.http.post(path, data={"csrf": "é", "pool": "p1", "count": "²", "duration": "1h"})
        assert answer.status_code == 403, (path, answer.status_code)
    odd = world.http.post(
        "/console/reserve", data={"csrf": csrf_for(token), "pool": "p1", "count": "²", "duration": "1h"}
    )
    assert odd.status_code == 422 and "Not reserved: INVALID_INPUT" in odd.text
    assert world.http.get("/console/placement?class=gpu&devices=%C2%B2").status_code == 200
    assert world.http.get("/console/fleet?after=n-2").status_code == 200  # the last node: page 1
    assert "Nodes 1–2 of 2" in world.http.get("/console/fleet?after=n-2").text
    assert world.http.get("/console/bookings?pool=" + "x" * 500).status_code == 404
    assert "No bill of tenant acme for you to read" in world.http.get("/console/usage?tenant=acme").text
    world.http.cookies.clear()
    forged = world.http.post(
        "/console/login",
        data={"token": token},
        headers={"Sec-Fetch-Site": "cross-site"},
        follow_redirects=False,
    )
    assert forged.status_code == 403 and "set-cookie" not in forged.headers
    other_origin = world.http.post(
        "/console/login",
        data={"token": token},
        headers={"Origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert other_origin.status_code == 403


def test_a_tenants_timeline_does_not_name_another_tenants_endpoint(store: Store, tmp_path: Path) -> None:
    from tests.service.endpoints.test_endpoints import in_service

    world = NodeWorld(store, tmp_path)
    in_service(world)  # platform's endpoint `chat` holds n-1
    quota = {"tenantId": "acme", "poolId": "p1", "class": "gpu.mig", "limit": 8}
    assert world.http.put("/v1/quotas", json=quota, headers=world.admin).status_code == 200
    logged_in(world, tenant_token(store, "acme"))
    page = world.http.get("/console/bookings?pool=p1&busy=1").text
    assert "endpoint hold" in page and "endpoint:chat" not in page and "chat" not in page


def test_the_fleet_page_does_not_say_changing_to_the_layout_a_node_already_has(
    store: Store, tmp_path: Path
) -> None:
    """An endpoint of the pool's own layout changes nothing on its node: the fleet page shows the
    layout, never "changing to" it, and the node is the endpoint's once the gate has its word."""
    from better_compute.service.endpoints import endpoints
    from better_compute.service.gate.mig_gate import Reconciler
    from tests.service.endpoints.test_endpoints import PLATFORM, body
    from tests.service.gate.test_mig_gate import NEW

    world = NodeWorld(store, tmp_path, layout=NEW)
    daemon, _ = world.daemon("n-1")
    assert daemon.step(False)
    endpoints.create(store, PLATFORM, body(), world.clock.now)
    logged_in(world, token_of(world.admin))
    node = world.http.get("/console/fleet").text.split('data-node="n-1"')[1].split("</article>")[0]
    assert NEW in node and "changing to" not in node
    assert daemon.step(True)
    Reconciler(store, world.clock, "r1").tick()
    node = world.http.get("/console/fleet").text.split('data-node="n-1"')[1].split("</article>")[0]
    assert NEW in node and "changing to" not in node and "state-changing" not in node


class _FormChoices(HTMLParser):
    """The reserve form's selected values, and the profiles it offers per pool."""

    def __init__(self) -> None:
        super().__init__()
        self.selected: dict[str, str] = {}
        self.offered: dict[str, list[str]] = {}
        self._select = ""
        self._group = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "select":
            self._select = found.get("name") or ""
        elif tag == "optgroup":
            self._group = found.get("data-pool") or ""
            self.offered[self._group] = []
        elif tag == "option":
            if self._group:
                self.offered[self._group].append(found.get("value") or "")
            if "selected" in found:
                self.selected[self._select] = found.get("value") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "optgroup":
            self._group = ""


def test_the_reserve_form_opens_on_a_combination_admission_takes_with_the_pools_profiles(
    store: Store, tmp_path: Path
) -> None:
    """Regression: the form opened on `gpu.mig` with a free-text profile whatever the pool, so an
    exclusive or shared pool's first submit was refused, and nothing said which profiles a pool has."""
    world = NodeWorld(store, tmp_path, layout="mixed:3g.40gb+2x2g.20gb")
    for node in ("n-1", "n-2"):
        daemon, _ = world.daemon(node)
        assert daemon.step(True)
    token = token_of(world.platform)
    logged_in(world, token)
    page = world.http.get("/console/reserve")
    assert page.status_code == 200
    form = _FormChoices()
    form.feed(page.text)
    assert form.selected == {"pool": "p1", "class": "gpu.mig", "profile": "2g.20gb"}
    assert form.offered == {"p1": ["2g.20gb", "3g.40gb"]}  # the profiles its atoms have, smallest first
    as_opened = {"csrf": csrf_for(token), **form.selected, "count": "1", "duration": "1h"}
    made = world.http.post("/console/reserve", data=as_opened)
    assert made.status_code == 201 and "Reserved rsv-" in made.text, made.text


def test_the_reserve_form_opens_an_exclusive_or_shared_pool_on_its_own_class() -> None:
    from better_compute.api.console.inputs import opening_form
    from better_compute.service.ops.console import PoolChoice

    assert opening_form([PoolChoice("x", "exclusive", "gpu", ())]) == {"pool": "x", "class": "gpu"}
    assert opening_form([PoolChoice("s", "mps", "gpu.slot", ())]) == {"pool": "s", "class": "gpu.slot"}
    assert opening_form([]) == {}


def test_the_fragmentation_chart_shows_a_tenant_only_the_pools_it_may_see(store: Store) -> None:
    from tests.api.test_reservations import World

    world = World(store)  # pools h100, a100 and l40s, all platform's
    world.offer("a100", "acme", gpu=1)
    for who, seen in (("acme", {"a100"}), ("platform", {"a100", "h100", "l40s"})):
        token = tenant_token(store, who)
        answer = world.http.post("/console/login", data={"token": token}, follow_redirects=False)
        assert answer.status_code == 303, answer.text
        page = world.http.get("/console/usage?days=1").text
        start = page.index('id="fragmented-title"')
        chart = page[start : page.index("</figure>", start)]
        rows = set(re.findall(r"<th scope=\"row\">([^<]+)</th><td>[0-9.]+</td>", chart))
        assert rows == seen, who
        world.http.cookies.clear()
