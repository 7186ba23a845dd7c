"""A container request as the domain reads it: the wire's validated model back to the camelCase
document `domain.kernel.containers.parse_container` checks (workloads and endpoint components alike)."""

from __future__ import annotations

from typing import Any

from better_compute.wire.containers import Container


def container_document(container: Container) -> dict[str, Any]:
    """The request's fields as sent (camelCase, fields left out dropped): a command holds what was
    asked; `parse_container` says what it may be."""
    return container.model_dump(by_alias=True, exclude_none=True)
