"""The committed `openapi.json` is the app's document, and it covers every method of the method table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from better_compute.entrypoints import openapi
from better_compute.wire.methods import METHODS
from tests import openapi_document

SNAPSHOT = Path(__file__).resolve().parents[2] / "openapi.json"


@pytest.fixture(scope="module")
def generated() -> dict[str, Any]:
    return openapi_document.document()


def test_committed_openapi_json_equals_the_generated_document(generated: dict[str, Any]) -> None:
    assert SNAPSHOT.exists(), "openapi.json is missing at the repository root: run `make openapi`"
    committed = SNAPSHOT.read_text(encoding="utf-8")
    assert committed == openapi.render(generated), (
        "openapi.json differs from the app's OpenAPI document: run `make openapi` and commit the result"
    )


def test_rendering_is_stable(generated: dict[str, Any]) -> None:
    assert openapi.render(generated) == openapi.render(openapi.document())
    assert json.loads(openapi.render(generated)) == generated


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_has_its_path_and_verb(generated: dict[str, Any], name: str) -> None:
    method = METHODS[name]
    operations = generated["paths"].get(method.path)
    assert operations is not None, f"{name}: {method.path} is not in the OpenAPI document"
    assert method.verb.lower() in operations, (
        f"{name}: {method.verb} {method.path} is not in the OpenAPI document "
        f"(it has {', '.join(sorted(operations)).upper()})"
    )


def test_operation_ids_are_the_method_names(generated: dict[str, Any]) -> None:
    ids = {
        (verb.upper(), path): operation["operationId"]
        for path, operations in generated["paths"].items()
        for verb, operation in operations.items()
    }
    assert {name: ids[(m.verb, m.path)] for name, m in METHODS.items()} == {name: name for name in METHODS}
