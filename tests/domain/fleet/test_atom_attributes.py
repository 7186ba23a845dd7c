"""An atom's compact attributes read and compare as the dict they were made from, share their keys'
positions with every mapping of the same shape, and intern the values many atoms share."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from better_compute.domain.fleet.atoms import Attributes, compact

VALUES = st.one_of(st.text(max_size=8), st.integers(), st.booleans(), st.floats(allow_nan=False))


@given(st.dictionaries(st.text(min_size=1, max_size=6), VALUES, max_size=8))
def test_compact_attributes_read_and_compare_as_their_dict(items: dict[str, object]) -> None:
    attrs = compact(items)  # type: ignore[arg-type]
    assert dict(attrs) == items and attrs == items and items == attrs
    assert list(attrs) == list(items) and len(attrs) == len(items)
    for key, value in items.items():
        assert key in attrs and attrs[key] == value and attrs.get(key) == value
    assert "not-a-key" not in attrs or "not-a-key" in items
    assert repr(attrs) == repr(items)
    assert compact(attrs) is attrs


def test_mappings_of_one_shape_share_its_keys_and_their_common_values() -> None:
    one = Attributes({"gpuProduct": "NVIDIA H100", "migProfile": "1g.10gb", "migUuid": "MIG-1"})
    two = Attributes(
        {"gpuProduct": "".join(["NVIDIA ", "H100"]), "migProfile": "1g.10gb", "migUuid": "MIG-2"}
    )
    assert one._at is two._at
    assert one["gpuProduct"] is two["gpuProduct"]
    assert one != two and one["migUuid"] == "MIG-1"
    with pytest.raises(KeyError):
        one["giId"]
    with pytest.raises(TypeError):
        one["migUuid"] = "MIG-3"  # type: ignore[index]
