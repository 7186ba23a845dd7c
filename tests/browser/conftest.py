"""Browser tests: Debian's Chromium, headless, driven by Selenium through chromedriver, against a real
`better-compute serve` on loopback. Without Chromium they skip, saying so; under CI (`CI=true`,
where `.ci/run` installs it) they fail instead."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.conftest import mark_serial
from tests.e2e.conftest import Server, start_server

_BROWSER_DIR = Path(__file__).resolve().parent
CHROMIUM = os.environ.get("BC_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("BC_CHROMEDRIVER", "/usr/bin/chromedriver")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/browser starts a server and a browser: mark it `browser`, in the serial
    group."""
    for item in items:
        if _BROWSER_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.browser)
    mark_serial(items, _BROWSER_DIR)


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server loaded with examples/demo-fleet.yaml, as `make run` starts it."""
    with start_server(tmp_path_factory.mktemp("console-server")) as running:
        yield running


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    """A fresh headless Chromium (its own profile), logging the page's console."""
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        message = f"Chromium ({CHROMIUM}) and chromedriver ({CHROMEDRIVER}) are needed: apt install chromium chromium-driver"
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
