"""Every console page passes axe-core's accessibility rules (WCAG 2.x A and AA: contrast, names,
landmarks, keyboard focus) with no serious or critical violation, run in the page itself in
headless Chromium; and the pages can be used from the keyboard alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from tests.browser.test_console import log_in
from tests.e2e.conftest import Server

AXE = (Path(__file__).resolve().parent / "vendor" / "axe.min.js").read_text(encoding="utf-8")
PAGES = (
    "login",
    "fleet",
    "bookings?pool=h100-mig&busy=1",
    "usage?days=1",
    "reserve",
    "placement?project=platform&class=a100-80gb&devices=1&replicas=2",
    "endpoints",
    "events",
)


def violations(browser: webdriver.Chrome) -> list[dict[str, object]]:
    browser.execute_script(AXE)
    found = browser.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        axe.run(document, {runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}})
          .then(r => done(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                                                 nodes: v.nodes.slice(0, 3).map(n => n.target)}))));
        """
    )
    return [v for v in found if v["impact"] in ("serious", "critical")]


@pytest.mark.parametrize("path", PAGES)
def test_no_serious_accessibility_violation(
    console_server: Server, browser: webdriver.Chrome, path: str
) -> None:
    browser.set_script_timeout(60)
    if path != "login":
        log_in(browser, console_server, console_server.admin_token)
    browser.get(f"{console_server.url}/console/{path}")
    found = violations(browser)
    assert found == [], json.dumps(found, indent=1)


def test_the_console_is_usable_from_the_keyboard(console_server: Server, browser: webdriver.Chrome) -> None:
    browser.get(f"{console_server.url}/console/login")
    focused = browser.switch_to.active_element
    assert focused.get_attribute("id") == "token"  # the form's field has the focus
    focused.send_keys(console_server.admin_token, Keys.ENTER)
    assert browser.current_url.endswith("/console/fleet")
    body = browser.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.TAB)
    assert browser.switch_to.active_element.text == "Skip to content"
    seen = set()
    for _ in range(12):  # the navigation, log-out, then the GPUs' pieces, each reachable by Tab
        browser.switch_to.active_element.send_keys(Keys.TAB)
        el = browser.switch_to.active_element
        seen.add(el.get_attribute("class") or el.tag_name)
    assert any("cell" in s for s in seen), seen
