"""Answers ignore fields they do not know; requests refuse them. Every model of `wire/` is one or other.

A server that adds a field to an answer must not break the clients and node daemons already deployed
(before, they failed with UNEXPECTED_RESPONSE); a caller that misspells a request field must hear so
instead of having it dropped. A new model that is neither, or an answer that nests a request model,
fails here.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from better_compute.wire.common import Page, WireAnswer, WireModel, WireRequest
from better_compute.wire.methods import METHODS
from tests.tripwires.wire_samples import sample, wire_models

BASES = {WireModel, WireAnswer, WireRequest}
MODELS = sorted((m for m in wire_models() if m not in BASES), key=lambda m: m.__name__)
REQUESTS = [m for m in MODELS if issubclass(m, WireRequest)]
ANSWERS = [m for m in MODELS if issubclass(m, WireAnswer) and not issubclass(m, WireRequest)]
CONCRETE_ANSWERS = [m for m in ANSWERS if m is not Page] + sorted(
    {m.response_type for m in METHODS.values() if m.paged}, key=repr
)
"""The answers with the generic `Page` as every list method answers it."""
ADDED = {"addedInALaterVersion": {"any": ["json"]}}


def test_every_wire_model_is_a_request_or_an_answer() -> None:
    neither = [m.__name__ for m in MODELS if m not in REQUESTS and m not in ANSWERS]
    assert neither == [], f"derive these from WireRequest or WireAnswer: {neither}"
    assert len(ANSWERS) > 10 and len(REQUESTS) > 10


@pytest.mark.parametrize("model", CONCRETE_ANSWERS, ids=lambda m: m.__name__)
def test_an_answer_accepts_a_field_it_does_not_know_at_every_level(model: type[BaseModel]) -> None:
    plain = model.model_validate(sample(model, {}))
    added = sample(model, ADDED)
    assert model.model_validate(added) == plain
    assert model.model_validate_json(model.model_validate(added).model_dump_json()) == plain


@pytest.mark.parametrize("model", REQUESTS, ids=lambda m: m.__name__)
def test_a_request_refuses_a_field_it_does_not_know(model: type[BaseModel]) -> None:
    model.model_validate(sample(model, {}))
    with pytest.raises(ValidationError) as refused:
        model.model_validate({**sample(model, {}), "surprise": 1})
    assert [(e["type"], e["loc"]) for e in refused.value.errors()] == [("extra_forbidden", ("surprise",))]


RAW_ANSWERS = {"endpoints.invoke"}
"""Methods whose answer is the bytes another program sent (a model server's), not a model of ours."""


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_takes_a_request_model_and_answers_an_answer_model(name: str) -> None:
    method = METHODS[name]
    assert method.request is None or method.request in REQUESTS
    if method.response is None:
        assert name in RAW_ANSWERS, f"{name} answers no model"
        return
    if isinstance(method.response, type) and issubclass(method.response, BaseModel):
        assert method.response in ANSWERS
    assert method.response_type in CONCRETE_ANSWERS or method.response_type in ANSWERS
