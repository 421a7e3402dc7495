"""The analyzer on image generation streams: the rules of ``ssetape.analysis.rules.images``."""

from __future__ import annotations

import pytest

from tests.ssetape.analysis.streams import IMAGES, codes, run, simulate

# Images ------------------------------------------------------------------------------------


def test_images_partial_images_completed_and_usage() -> None:
    sim = simulate(IMAGES, model="gpt-image-1", partial_images=2)
    a = sim.analyze()
    assert a.api == "images"
    assert a.model == "gpt-image-1"  # events carry no model: from the request
    assert (a.outcome, a.reason) == ("completed", "completed")
    assert (a.input_tokens, a.output_tokens) == (sim.sc.prompt_tokens, 272)
    assert a.total_tokens == sim.sc.prompt_tokens + 272
    partial = [e for e in sim.events if e.event == "image_generation.partial_image"]
    assert len(partial) == 2
    assert a.ttft_us == partial[0].offset_us
    assert a.gap_max_us == partial[1].offset_us - partial[0].offset_us
    assert a.findings == []


def test_images_done_after_error_is_tolerated() -> None:
    error = ("error", {"type": "error", "error": {"message": "no"}})
    a = run(IMAGES, [error, (None, "[DONE]")])
    assert (a.outcome, a.reason, a.findings) == ("error", "no", [])
    b = run(IMAGES, [error, (None, "[DONE]"), ("image_generation.partial_image", {})])
    assert [(f.code, f.event_seq) for f in b.findings] == [("event_after_terminal", 2)]


def test_images_without_done_and_done_without_completed() -> None:
    completed = ("image_generation.completed", {"usage": {"input_tokens": 1}})
    a = run(IMAGES, [completed])
    assert a.outcome == "completed"
    assert codes(a) == ["no_terminal_event"]
    b = run(IMAGES, [("image_generation.partial_image", {}), (None, "[DONE]")])
    assert (b.outcome, b.reason) == ("cut", "no terminal event")
    assert codes(b) == ["no_terminal_event"]


@pytest.mark.parametrize("model", ["gpt-image-1-sim-error", "gpt-image-1-sim-error-early"])
def test_images_error(model: str) -> None:
    sim = simulate(IMAGES, model=model, partial_images=2)
    a = sim.analyze()
    assert (a.outcome, a.reason) == ("error", "server_error")
    assert a.findings == []
