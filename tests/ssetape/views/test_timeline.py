"""Timeline: how each stored event is classified and labelled, whatever traffic sends."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssetape.views.timeline import KINDS, Timeline, _classifier
from tests.ssetape.views.timelines import chunk

MS = 1000
S = 1_000_000


# Classification ---------------------------------------------------------------------------------


CASES = [
    (None, None, "messages", "ping"),
    ("ping", '{"type": "ping"}', "messages", "ping"),
    (None, '{"type": "ping"}', None, "ping"),
    ("content_block_delta", "{}", "messages", "content"),
    ("message_start", '{"type": "message_start"}', "messages", "meta"),
    ("message_delta", "{}", "messages", "meta"),
    ("message_stop", "{}", "messages", "terminal"),
    ("error", '{"type": "error"}', "messages", "error"),
    ("response.output_text.delta", "{}", "responses", "content"),
    ("response.function_call_arguments.delta", "{}", "responses", "content"),
    ("response.created", "{}", "responses", "meta"),
    ("response.completed", "{}", "responses", "terminal"),
    ("response.incomplete", "{}", "responses", "terminal"),
    ("response.failed", "{}", "responses", "error"),
    (None, '{"type": "response.output_text.delta"}', "responses", "content"),
    ("image_generation.partial_image", "{}", "images", "content"),
    ("image_generation.completed", "{}", "images", "terminal"),
    (None, "[DONE]", "chat_completions", "terminal"),
    (None, chunk({"content": "hi"}), "chat_completions", "content"),
    (None, chunk({"role": "assistant", "content": ""}), "chat_completions", "meta"),
    (None, chunk({"tool_calls": [{"index": 0}]}), None, "content"),
    (None, chunk({}, "stop"), "chat_completions", "meta"),
    (None, chunk({}, "error"), "chat_completions", "error"),
    (None, '{"error": {"message": "overloaded"}}', "chat_completions", "error"),
    ("message", chunk({"content": "x"}), "chat_completions", "content"),
    (None, "not json {", "chat_completions", "meta"),
    (None, "[1, 2]", None, "meta"),
    (None, '{"choices": "nope"}', None, "meta"),
    (None, '{"choices": [{"delta": "nope"}, 3]}', None, "meta"),
    (None, "[" * 100_000, None, "meta"),
]


@pytest.mark.parametrize(("event", "data", "api", "kind"), CASES)
def test_classify(event: str | None, data: str | None, api: str | None, kind: str) -> None:
    assert Timeline.classify(event, data, api) == kind


@given(
    st.none() | st.text(max_size=30),
    st.none() | st.text(max_size=60),
    st.sampled_from([None, "chat_completions", "responses", "messages", "images", "x"]),
)
def test_classify_never_raises(event: str | None, data: str | None, api: str | None) -> None:
    assert Timeline.classify(event, data, api) in KINDS


@pytest.mark.parametrize(("event", "data", "api", "kind"), CASES)
def test_a_stored_stream_is_classified_as_classify_does(
    event: str | None, data: str | None, api: str | None, kind: str
) -> None:
    """A stored stream's marks are classified by a classifier made for its API (faster per
    event): the same kinds."""
    assert _classifier(api)(event, data) == kind


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["choices", "delta", "content", "error", "finish_reason", "type", "x"]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@given(
    st.none() | st.sampled_from(["message", "ping", "error", "message_stop", "x.delta"]),
    st.none() | st.text(max_size=40) | _JSON.map(lambda v: orjson.dumps(v).decode()),
    st.sampled_from([None, "chat_completions", "responses", "messages", "images", "x"]),
)
def test_the_classifier_of_an_api_agrees_with_classify(
    event: str | None, data: str | None, api: str | None
) -> None:
    assert _classifier(api)(event, data) == Timeline.classify(event, data, api)


def test_label_of() -> None:
    assert Timeline.label_of(None, None) == ":"
    assert Timeline.label_of(None, "[DONE]") == "[DONE]"
    assert Timeline.label_of(None, "{}") == "message"
    assert Timeline.label_of("message", "{}") == "message"
    assert Timeline.label_of("message_stop", "{}") == "message_stop"
