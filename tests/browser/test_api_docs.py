"""`/docs` in real headless Chromium: Swagger UI renders the API's OpenAPI 3.1 document, every operation
and the node-signing scheme, from assets the server serves itself (regression: Swagger UI 4.15 showed
"Unable to render this definition" for a 3.1 document)."""

from __future__ import annotations

import json
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from tests.e2e.conftest import Server

ROOT = Path(__file__).resolve().parents[2]


def test_swagger_ui_renders_every_operation_of_the_document(
    browser: webdriver.Chrome, console_server: Server
) -> None:
    document = json.loads((ROOT / "openapi.json").read_text(encoding="utf-8"))
    operations = sum(1 for item in document["paths"].values() for op in item.values() if "operationId" in op)
    browser.get(f"{console_server.url}/docs")
    WebDriverWait(browser, 20).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, ".opblock") or "Unable to render" in b.page_source
    )
    page = browser.find_element(By.TAG_NAME, "body").text
    assert "Unable to render this definition" not in page
    assert len(browser.find_elements(By.CSS_SELECTOR, ".opblock")) == operations
    assert "OAS 3.1" in page
    browser.find_element(By.CSS_SELECTOR, ".btn.authorize").click()
    WebDriverWait(browser, 10).until(lambda b: "BC-Signature" in b.find_element(By.TAG_NAME, "body").text)
    assert "nodeSignature" in browser.find_element(By.TAG_NAME, "body").text
    requested = [entry["message"] for entry in browser.get_log("browser") if entry.get("level") == "SEVERE"]
    assert requested == [], requested
