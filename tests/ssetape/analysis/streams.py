"""Streams for the analyzer's tests: the simulator's, parsed as the recorder stores them, or
written by hand."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ssetape.analysis.analyzer import Analysis, Analyzer
from ssetape.framing.sse import SseParser
from ssetape.simulator import scenario as scenarios
from ssetape.simulator.routes import plan
from ssetape.simulator.scenario import (
    Plan,
    parse_request,
    tool_arguments,
)

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
IMAGES = "/v1/images/generations"
PROMPT = "Tell me about tapes"
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
}
ARGS = orjson.dumps(tool_arguments(WEATHER, PROMPT)).decode()
_API = {CHAT: "chat", RESPONSES: "responses", MESSAGES: "messages", IMAGES: "images"}


@dataclass(frozen=True)
class Stored:
    """One event as the recorder stores it."""

    seq: int
    offset_us: int
    event: str | None
    data: str | None

    @property
    def json(self) -> Any:
        assert self.data is not None
        return orjson.loads(self.data)


@dataclass
class Sim:
    plan: Plan
    events: list[Stored]
    request: bytes
    sc: scenarios.Scenario
    path: str

    def analyze(
        self,
        *,
        upto: int | None = None,
        state: str = "completed",
        path: str | None = None,
    ) -> Analysis:
        """Feed the first ``upto`` stored events (all by default) and finish."""
        an = Analyzer(method="POST", path=path or self.path, request_body=self.request)
        for e in self.events[:upto]:
            an.feed(e.seq, e.offset_us, e.event, e.data)
        content_type = dict(self.plan.headers)["content-type"]
        body = None if self.plan.stream else b"".join(c.data for c in self.plan.chunks)
        return an.finish(
            status=self.plan.status,
            state=state,
            response_body=body,
            response_content_type=content_type,
        )


def simulate(path: str, **request: Any) -> Sim:
    """Run the simulator: parse its chunks as the recorder does, each event stamped with the
    time of the chunk that completed it."""
    request.setdefault("stream", True)
    if path == RESPONSES:
        request.setdefault("input", PROMPT)
    elif path == IMAGES:
        request.setdefault("prompt", PROMPT)
    else:
        request.setdefault("messages", [{"role": "user", "content": PROMPT}])
    raw = orjson.dumps(request)
    p = plan("POST", path, {}, raw)
    parser = SseParser()
    events: list[Stored] = []
    if p.stream:
        for chunk in p.chunks:
            for ev in parser.feed(chunk.data):
                events.append(Stored(len(events), round(chunk.at * 1e6), ev.event, ev.data))
        last = round(p.chunks[-1].at * 1e6) if p.chunks else 0
        for ev in parser.close():
            events.append(Stored(len(events), last, ev.event, ev.data))
    sc = parse_request(_API[path], {}, raw)  # type: ignore[arg-type]
    return Sim(p, events, raw, sc, path)


def run(
    path: str,
    events: list[tuple[str | None, Any]],
    *,
    request: dict[str, Any] | None = None,
    state: str = "completed",
    status: int | None = 200,
    offsets: list[int] | None = None,
    profile: str | None = None,
) -> Analysis:
    """Analyse hand-written events: data given as str is sent as is, anything else as JSON."""
    body = orjson.dumps(request or {})
    an = Analyzer(method="POST", path=path, request_body=body, profile=profile)
    for seq, (event, data) in enumerate(events):
        text = data if data is None or isinstance(data, str) else orjson.dumps(data).decode()
        an.feed(seq, offsets[seq] if offsets else 1000 * seq, event, text)
    return an.finish(status=status, state=state, response_content_type="text/event-stream")


def codes(a: Analysis) -> list[str]:
    return [f.code for f in a.findings]


def content_offsets(sim: Sim, is_content: Any) -> list[int]:
    return [e.offset_us for e in sim.events if e.data is not None and is_content(e)]


def claude(**extra: Any) -> Sim:
    return simulate(MESSAGES, **{"model": "claude-sonnet-4", "max_tokens": 12, **extra})
