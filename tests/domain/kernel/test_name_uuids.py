"""Fast name-based uuids are exactly `uuid.uuid5`'s: atom ids and simulated GPU uuids are stored,
booked and matched by."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from better_compute.domain.kernel.name_uuids import uuid5_hex, uuid5_text

NAMESPACE = uuid.UUID("6f1d8e52-3c1b-4b8e-9a55-0c5b3f1e2a77")


@given(st.uuids(), st.text(max_size=80))
def test_a_name_uuid_is_uuid5s(namespace: uuid.UUID, name: str) -> None:
    assert uuid5_hex(namespace, name) == uuid.uuid5(namespace, name).hex
    assert uuid5_text(namespace, name) == str(uuid.uuid5(namespace, name))


def test_the_version_and_variant_bits_are_set() -> None:
    made = uuid.UUID(uuid5_text(NAMESPACE, "GPU-0/mig:1.0"))
    assert (made.version, made.variant) == (5, uuid.RFC_4122)
