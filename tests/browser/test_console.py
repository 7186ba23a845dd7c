"""The console in real headless Chromium, on the demo fleet (`make run`'s): log in, see every GPU
drawn with the right number of pieces at the widths the placement table gives, book a 3g.40gb
through the form and see it on the timeline and on its GPU, see the usage charts, see a tenant refused another tenant's pool, and no error
in the browser's console. A screenshot of each page is written under the test's temp dir (and to
$BC_SCREENSHOTS when set, as docs/img's were made)."""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.wait import WebDriverWait

from better_compute.domain.catalog.layouts import validate
from tests.e2e.conftest import Server


def log_in(browser: webdriver.Chrome, server: Server, token: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"{server.url}/console")
    assert browser.current_url.endswith("/console/login")
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "form.login button").click()
    WebDriverWait(browser, 10).until(
        lambda b: b.current_url.endswith("/console/fleet") or b.find_elements(By.CSS_SELECTOR, ".error")
    )
    assert browser.current_url.endswith("/console/fleet"), browser.find_element(By.TAG_NAME, "main").text


def screenshot(browser: webdriver.Chrome, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    browser.save_screenshot(str(path))
    wanted = os.environ.get("BC_SCREENSHOTS")
    if wanted:
        Path(wanted).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(wanted) / path.name)


def month_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m")


def errors_in_console(browser: webdriver.Chrome) -> list[str]:
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def drawn(browser: webdriver.Chrome, node: str) -> list[list[dict[str, float | str]]]:
    """Each GPU of `node` as its cells: label, start and size as placed, left and width as drawn,
    over the bar's width."""
    script = """
    const node = document.querySelector(`article.node[data-node="${arguments[0]}"]`);
    return [...node.querySelectorAll("div.gpu")].map(gpu => {
      const bar = gpu.getBoundingClientRect();
      return [...gpu.querySelectorAll("div.cell")].map(cell => {
        const r = cell.getBoundingClientRect();
        return {label: cell.innerText.trim(), start: +cell.dataset.start, size: +cell.dataset.size,
                units: +gpu.dataset.units, left: (r.left - bar.left - gpu.clientLeft) / gpu.clientWidth,
                width: r.width / gpu.clientWidth, state: cell.className, title: cell.title};
      });
    });
    """
    return browser.execute_script(script, node)  # type: ignore[no-any-return]


def test_the_console_draws_the_fleet_to_scale_shows_a_booking_and_keeps_tenants_apart(
    console_server: Server, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    server = console_server
    log_in(browser, server, server.admin_token)
    screenshot(browser, tmp_path, "fleet")
    for node, layout, model in (
        ("euw-h100-b", "mixed:3g.40gb+2x2g.20gb", "H100-80GB"),
        ("euw-h100-a-1", "all-1g.10gb", "H100-80GB"),
    ):
        table = sorted((i.profile, i.start, i.size) for i in validate(layout, model).instances)
        gpus = drawn(browser, node)
        assert len(gpus) == 8, node
        for cells in gpus:
            assert sorted((str(c["label"]), c["start"], c["size"]) for c in cells) == table
            for c in cells:  # drawn where placed: the width less the 2 px gap between pieces
                assert abs(float(c["left"]) - float(c["start"]) / float(c["units"])) < 0.005, c
                assert abs(float(c["width"]) - float(c["size"]) / float(c["units"])) < 0.01, c

    browser.get(f"{server.url}/console/reserve")  # book a 3g.40gb through the form
    Select(browser.find_element(By.ID, "tenant")).select_by_value("platform")
    Select(browser.find_element(By.ID, "pool")).select_by_value("h100-mig")
    Select(browser.find_element(By.ID, "class")).select_by_value("gpu.mig")
    Select(browser.find_element(By.ID, "profile")).select_by_value("3g.40gb")  # the pool's profiles
    browser.find_element(By.CSS_SELECTOR, "form.reserve button").click()
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.CSS_SELECTOR, ".answer"))
    answer = browser.find_element(By.CSS_SELECTOR, ".answer h2").text
    assert answer.startswith("Reserved rsv-"), browser.find_element(By.CSS_SELECTOR, ".answer").text
    rid = answer.removeprefix("Reserved ")
    screenshot(browser, tmp_path, "reserve")
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.admin_token}"}) as api:
        acme = api.post("/v1/credentials", json={"tenantId": "acme", "name": "console"})
        assert acme.status_code == 201, acme.text
    browser.get(f"{server.url}/console/bookings?pool=h100-mig&days=1&busy=1")
    bars = browser.find_elements(By.CSS_SELECTOR, f'.tbar[data-allocation="{rid}"]')
    assert len(bars) == 1 and "(platform)" in bars[0].get_attribute("title")  # type: ignore[operator]
    screenshot(browser, tmp_path, "bookings")
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.admin_token}"}) as api:
        selector = {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["2g.20gb"]}]}
        body = {
            "tenantId": "platform",
            "poolId": "h100-mig",
            "duration": "1h",
            "devices": [{"class": "gpu.mig", "count": 1, "selector": selector}],
        }
        later = api.post("/v1/reservations", json=body)
        assert later.status_code == 201, later.text
    WebDriverWait(browser, 15).until(  # the open page shows it, with no reload
        lambda b: b.find_elements(By.CSS_SELECTOR, f'.tbar[data-allocation="{later.json()["id"]}"]')
    )
    browser.get(f"{server.url}/console/fleet")
    held = [
        c
        for node in ("euw-h100-b", "euw-h100-a-1", "euw-h100-a-2")
        for cells in drawn(browser, node)
        for c in cells
        if rid in str(c["title"])
    ]
    assert [(c["label"], "state-booked" in str(c["state"])) for c in held] == [("3g.40gb", True)]
    browser.get(f"{server.url}/console/usage?days=1&tenant=platform")
    charts = browser.find_elements(By.CSS_SELECTOR, "figure.chart svg")
    assert len(charts) == 3  # GPU-hours, capacity by state, fragmentation by pool
    assert charts[0].find_elements(By.CSS_SELECTOR, "rect")  # platform's booking, by tenant and meter
    assert (
        "platform · gpu.h100.hours" in browser.find_element(By.CSS_SELECTOR, "figure.chart figcaption").text
    )
    link = browser.find_element(By.LINK_TEXT, "Download CSV").get_attribute("href")
    assert link is not None and link.endswith("/console/usage/bill.csv?tenant=platform&month=" + month_now())
    screenshot(browser, tmp_path, "usage")
    assert errors_in_console(browser) == []

    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.admin_token}"}) as api:
        variant = {
            "name": "AllTraffic",
            "poolId": "h100-mig",
            "instanceCount": 1,
            "acceleratorPartitionLayouts": [
                {"acceleratorPartitionTypes": ["mig-3g.40gb", "mig-2g.20gb", "mig-2g.20gb"]}
            ],
        }
        made_endpoint = api.post(
            "/v1/endpoints", json={"name": "chat", "tenantId": "platform", "variants": [variant]}
        )
        assert made_endpoint.status_code == 201, made_endpoint.text
        deadline = time.monotonic() + 60
        while api.get("/v1/endpoints/chat").json()["status"] != "InService":
            assert time.monotonic() < deadline, api.get("/v1/endpoints/chat").text
            time.sleep(0.2)
        body = {
            "name": "llama",
            "endpointName": "chat",
            "variantName": "AllTraffic",
            "model": "llama-3-8b",
            "partitionType": "mig-2g.20gb",
            "devicesRequired": 1,
            "copies": 5,
        }
        assert api.post("/v1/components", json=body).status_code == 201
    browser.get(f"{server.url}/console/endpoints")
    labels = [
        c.text for c in browser.find_elements(By.CSS_SELECTOR, '[data-endpoint="chat"] .cell.state-booked')
    ]
    assert sorted(labels) == [f"llama copy {k}" for k in range(5)]
    screenshot(browser, tmp_path, "endpoints")
    browser.get(f"{server.url}/console/placement")
    Select(browser.find_element(By.ID, "project")).select_by_value("platform")
    Select(browser.find_element(By.ID, "device-class")).select_by_value("a100-80gb")
    replicas = browser.find_element(By.ID, "replicas")
    replicas.clear()
    replicas.send_keys("20")  # the verdicts follow the form, with no click
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.CSS_SELECTOR, "table.verdicts"))
    verdicts = {
        r.get_attribute("data-cluster"): r.find_elements(By.TAG_NAME, "td")[0].text
        for r in browser.find_elements(By.CSS_SELECTOR, "table.verdicts tbody tr")
    }
    assert verdicts == {"eu-west": "insufficient_capacity", "us-east": "admitted"}
    assert "4 replicas would wait" in browser.find_element(By.ID, "verdict-title").text  # 16 A100s
    screenshot(browser, tmp_path, "placement")
    browser.get(f"{server.url}/console/events?type=endpoint.created")
    assert browser.find_elements(By.XPATH, "//td/code[text()='endpoint.created']")
    screenshot(browser, tmp_path, "events")
    assert errors_in_console(browser) == []

    log_in(browser, server, acme.json()["token"])
    browser.get(f"{server.url}/console/bookings?pool=h100-mig")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Not here"
    assert "pool h100-mig not found" in browser.find_element(By.CSS_SELECTOR, ".error").text
    screenshot(browser, tmp_path, "tenant-refused")
    browser.get(f"{server.url}/console/fleet")
    assert rid not in browser.page_source
    errors = [e for e in errors_in_console(browser) if "404" not in e]  # the refused page itself
    assert errors == [], json.dumps(errors)


def test_the_usage_page_charts_each_pools_fragmentation_as_metrics_exports_it(
    console_server: Server, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    """Seven reservations of 3 slots on one GPU each in l40s-timeslice (8 L40S of 4 slots, a pool no
    other test books): 7 GPUs with 1 slot (250 milli) free, one wholly free. The only size held, 3
    slots (750), cannot use the 7 x 250: 1750 of 2750 free milli, 63.64 %."""
    server = console_server
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.admin_token}"}) as api:
        gpus = set()
        for _ in range(7):
            body = {
                "tenantId": "platform",
                "poolId": "l40s-timeslice",
                "duration": "2h",
                "devices": [{"class": "gpu.slot", "count": 3, "sameGpu": True}],
            }
            made = api.post("/v1/reservations", json=body)
            assert made.status_code == 201, made.text
            assert made.json()["devices"][0]["sameGpu"] is True
            gpus |= {a["gpuId"] for a in made.json()["atoms"]}
        assert len(gpus) == 7
        exported = {
            s.labels["pool"]: s.value
            for family in text_string_to_metric_families(api.get("/metrics").text)
            for s in family.samples
            if s.name == "better_compute_pool_fragmentation_ratio"
        }
    assert exported["l40s-timeslice"] == pytest.approx(1750 / 2750)
    assert exported["h100-timeslice"] == 0.0  # nothing held there: every free slot fits a slot

    log_in(browser, server, server.admin_token)
    browser.get(f"{server.url}/console/usage?days=1")
    figure = browser.find_element(By.CSS_SELECTOR, "figure.chart:has(svg title#fragmented-title)")
    rows = {
        row.find_element(By.TAG_NAME, "th").get_attribute("textContent"): float(
            str(row.find_element(By.TAG_NAME, "td").get_attribute("textContent"))
        )
        for row in figure.find_elements(By.CSS_SELECTOR, "details tbody tr")
    }
    assert rows == {pool: pytest.approx(ratio * 100, abs=0.0005) for pool, ratio in exported.items()}
    assert rows["l40s-timeslice"] == pytest.approx(63.636, abs=0.0005)
    bars = {
        str(rect.find_element(By.TAG_NAME, "title").get_attribute("textContent")): float(
            str(rect.get_attribute("height"))
        )
        for rect in figure.find_elements(By.CSS_SELECTOR, "svg rect")
    }
    drawn_l40s = bars["l40s-timeslice · free capacity fragmented: 63.64%"]
    assert drawn_l40s == pytest.approx(0.63636 * 224, abs=0.01)  # of the 224 px plot, to 100 %
    assert not any(title.startswith("h100-timeslice") for title in bars)  # 0: no bar
    screenshot(browser, tmp_path, "usage-fragmentation")
    assert errors_in_console(browser) == []
