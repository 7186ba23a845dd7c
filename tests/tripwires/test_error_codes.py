"""Every code and reason the server can answer is known to the client, the mapping and the docs.

The domain spells its codes for the server (it imports nothing of ours), `wire/codes.py` spells them
for everything on the other side of the wire; a new error whose code or reason one side lacks would
reach a deployed client as a bare `ComputeError`, or as a 400 from the mapping's default. It fails
here first.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from better_compute import client
from better_compute.api.errors import STATUS
from better_compute.client._errors import ERRORS_BY_CODE, ComputeError
from better_compute.domain.kernel import errors
from better_compute.wire import codes

SRC = Path(errors.__file__).resolve().parents[2]  # src/better_compute
DOCS = SRC.parents[1] / "docs" / "api.md"


def domain_errors() -> list[type[errors.DomainError]]:
    found: list[type[errors.DomainError]] = [errors.DomainError]
    for cls in found:
        found.extend(sorted(cls.__subclasses__(), key=lambda c: c.__name__))
    return found


DOMAIN_ERRORS = domain_errors()


@pytest.mark.parametrize("error", DOMAIN_ERRORS, ids=lambda e: e.__name__)
def test_every_domain_error_has_a_wire_code_a_status_and_a_client_exception(
    error: type[errors.DomainError],
) -> None:
    assert error.code in codes.SERVER_CODES
    assert error.code in STATUS
    exception = ERRORS_BY_CODE[error.code]
    assert exception.code_name == error.code
    assert exception.__name__ in client.__all__ and getattr(client, exception.__name__) is exception


@pytest.mark.parametrize("error", [e for e in DOMAIN_ERRORS if e.reason], ids=lambda e: e.__name__)
def test_every_reason_a_domain_error_gives_is_a_wire_reason_of_its_code(
    error: type[errors.DomainError],
) -> None:
    assert error.reason in codes.REASONS.get(error.code, ())


def test_every_conflict_says_which_one_it_is() -> None:
    conflicts = [e for e in DOMAIN_ERRORS if issubclass(e, errors.Conflict) and e is not errors.Conflict]
    assert {e.reason for e in conflicts} == set(codes.REASONS[codes.CONFLICT])
    bare = [
        f"{path.relative_to(SRC)}:{node.lineno}"
        for path in sorted(SRC.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) == "Conflict" or getattr(node.func, "attr", None) == "Conflict")
    ]
    assert bare == [], f"raise a Conflict subclass (it gives details.reason), not Conflict itself: {bare}"


def test_the_server_codes_are_the_mapping_and_the_client_exceptions() -> None:
    assert set(STATUS) == set(codes.SERVER_CODES)
    assert set(ERRORS_BY_CODE) == set(codes.SERVER_CODES)
    assert len(set(codes.SERVER_CODES)) == len(codes.SERVER_CODES)
    assert all(issubclass(cls, ComputeError) for cls in ERRORS_BY_CODE.values())


@pytest.mark.parametrize("code", codes.SERVER_CODES)
def test_the_api_documentation_lists_every_code(code: str) -> None:
    exception = ERRORS_BY_CODE[code]
    assert f"| `{code}` | {STATUS[code]} | `{exception.__name__}` |" in DOCS.read_text(encoding="utf-8")


@pytest.mark.parametrize("reason", sorted({r for rs in codes.REASONS.values() for r in rs}))
def test_the_api_documentation_lists_every_reason(reason: str) -> None:
    assert f"`{reason}`" in DOCS.read_text(encoding="utf-8")
