"""Device and priority classes, pure: what a definition may be, and which atoms belong to a class."""

from __future__ import annotations

import pytest

from better_compute.domain.kernel import selectors
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.placement.device_classes import belongs_to, count_of, parse_spec
from better_compute.domain.placement.priority_classes import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    check_priority,
    priority_class,
)
from better_compute.domain.tenancy.tenancy import MAX_CLASS_NAME, check_class_name
from better_compute.wire import device_classes as wire_dc
from better_compute.wire import priority_classes as wire_pc
from tests.builders import T0, atom

H100 = {"gpuModel": "H100-80GB", "gpuProduct": "NVIDIA H100 80GB HBM3"}
WHOLE_H100 = parse_spec(
    "h100-80gb-sxm", "gpu", {"matchExpressions": [{"key": "gpuModel", "op": "In", "values": ["H100-80GB"]}]}
)
H100_3G = parse_spec(
    "h100-3g.40gb",
    "gpu.mig",
    {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]},
)


def test_an_atom_belongs_to_a_class_of_its_atom_class_whose_selector_it_matches() -> None:
    whole = atom("g1", "gpu", attributes=H100)
    mig_3g = atom("g2", "mig:1.0", attributes={**H100, "migProfile": "3g.40gb"})
    mig_1g = atom("g2", "mig:2.0", attributes={**H100, "migProfile": "1g.10gb"})
    a100 = atom("g3", "gpu", attributes={"gpuModel": "A100-80GB"})
    assert belongs_to(whole, WHOLE_H100.created(T0))
    assert not belongs_to(a100, WHOLE_H100.created(T0))
    # An H100's MIG instance matches the model, but is not of the class `gpu`.
    assert not belongs_to(atom("g2", "mig:1.0", attributes=H100), WHOLE_H100.created(T0))
    assert belongs_to(mig_3g, H100_3G.created(T0)) and not belongs_to(mig_1g, H100_3G.created(T0))
    assert count_of([whole, mig_3g, mig_1g, a100], H100_3G.created(T0)) == 1


def test_a_class_without_a_selector_holds_every_atom_of_its_class() -> None:
    slots = parse_spec("any-slot", "gpu.slot", None).created(T0)
    assert count_of([atom("g", "slot:0"), atom("g", "slot:1"), atom("g", "gpu")], slots) == 2


def test_a_selector_is_stored_in_a_form_that_reads_back_the_same() -> None:
    raw = {
        "matchExpressions": [
            {"key": "giId", "op": "In", "values": [1, "2"]},
            {"key": "numaNode", "op": "Exists"},
            {"key": "vramGiB", "op": "Gt", "values": ["+40"]},
        ]
    }
    parsed = selectors.parse_selector(raw)
    assert selectors.document(parsed) == {
        "matchExpressions": [
            {"key": "giId", "op": "In", "values": ["1", "2"]},
            {"key": "numaNode", "op": "Exists"},
            {"key": "vramGiB", "op": "Gt", "values": ["40"]},
        ]
    }
    assert selectors.parse_selector(selectors.document(parsed)) == parsed


@pytest.mark.parametrize(
    ("name", "cls", "selector", "field"),
    [
        ("H100", "gpu", None, "name"),
        ("-h100", "gpu", None, "name"),
        ("h100.", "gpu", None, "name"),
        ("x" * (MAX_CLASS_NAME + 1), "gpu", None, "name"),
        ("h100", "gpu.fraction", None, "class"),
        (
            "h100",
            "gpu",
            {"matchExpressions": [{"key": "gpuModel", "op": "Like", "values": ["H"]}]},
            "selector.matchExpressions[0].op",
        ),
        ("h100", "gpu", {"matchExpression": []}, "selector.matchExpression"),
    ],
)
def test_a_bad_definition_is_refused_naming_its_field(
    name: str, cls: str, selector: object, field: str
) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_spec(name, cls, selector)
    assert err.value.details["field"] == field


def test_a_fleet_file_definition_names_its_place() -> None:
    with pytest.raises(InvalidInput) as err:
        parse_spec("ok", "gpu", {"matchExpressions": [{"key": "k", "op": "In"}]}, "deviceClasses[3]")
    assert err.value.details["field"] == "deviceClasses[3].selector.matchExpressions[0].values"


def test_a_selector_holds_at_most_the_selector_limits() -> None:
    many = [{"key": f"k{i}", "op": "Exists"} for i in range(selectors.MAX_EXPRESSIONS + 1)]
    with pytest.raises(InvalidInput) as err:
        parse_spec("many", "gpu", {"matchExpressions": many})
    assert err.value.details == {"field": "selector.matchExpressions", "max": selectors.MAX_EXPRESSIONS}


def test_class_names_take_dots_for_profiles() -> None:
    assert check_class_name("h100-3g.40gb") == "h100-3g.40gb"
    assert check_class_name("x" * MAX_CLASS_NAME) == "x" * MAX_CLASS_NAME


@pytest.mark.parametrize("value", [MIN_PRIORITY - 1, MAX_PRIORITY + 1, True, 1.5, "3"])
def test_a_priority_outside_its_range_or_not_an_integer_is_refused(value: object) -> None:
    with pytest.raises(InvalidInput) as err:
        check_priority(value)
    assert err.value.details["field"] == "priority"


def test_a_priority_class_takes_the_ends_of_the_range() -> None:
    assert priority_class("low", MIN_PRIORITY, True, T0).priority == MIN_PRIORITY
    assert priority_class("high", MAX_PRIORITY, False, T0).preemptible is False


def test_the_wire_declares_the_domain_limits() -> None:
    assert wire_dc.MAX_CLASS_NAME == MAX_CLASS_NAME
    assert (wire_pc.MIN_PRIORITY, wire_pc.MAX_PRIORITY) == (MIN_PRIORITY, MAX_PRIORITY)
