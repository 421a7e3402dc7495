"""What a recorded LLM API exchange said: outcome, usage, timing, text and contract findings.

The stream formats are the seed contract (``seeds/000`` sequences, ``seeds/001`` Responses
vocabulary). :class:`Analyzer` is fed one stored SSE event at a time and keeps only running
totals, so it can follow streams of a million events; :meth:`Analyzer.finish` has no side
effects, so it can be called on a recording in progress and again once it ends.

The API-specific rules live in :mod:`ssetape.analysis.rules_openai` and :mod:`ssetape.analysis.rules_anthropic`;
they update a :class:`~ssetape.analysis.tally.Tally`.
"""

from __future__ import annotations

import itertools
import math
from array import array
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from ssetape.analysis import rules_anthropic, rules_openai
from ssetape.analysis.tally import MAX_FINDINGS as MAX_FINDINGS
from ssetape.analysis.tally import Finding, Tally

__all__ = ["ERROR_OUTCOMES", "Analysis", "Analyzer", "Finding", "Tally", "detect_api"]

ERROR_OUTCOMES: frozenset[str] = frozenset(
    {"error", "unresolved", "http_error", "cut", "no_response", "interrupted"}
)
_STATES = frozenset({"recording", "completed", "aborted", "failed", "truncated", "interrupted"})
_TRANSPORT_OUTCOMES = {
    "aborted": "aborted",
    "failed": "no_response",
    "interrupted": "interrupted",
    "recording": "recording",
}
_PATH_SUFFIXES = (
    ("/chat/completions", "chat_completions"),
    ("/responses", "responses"),
    ("/messages", "messages"),
    ("/images/generations", "images"),
    ("/images/edits", "images"),
    ("/images", "images"),
)
# Stands for "data was not JSON", distinct from any value orjson can return.
_BAD_JSON = object()


@dataclass(slots=True)
class Analysis:
    api: str
    model: str | None
    outcome: str
    reason: str | None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    ttft_us: int | None = None
    gap_median_us: int | None = None
    gap_p95_us: int | None = None
    gap_max_us: int | None = None
    tokens_per_s: float | None = None
    output_text: str = ""
    refusal_text: str = ""
    reasoning_text: str = ""
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def detect_api(path: str) -> str:
    """The API of a request path, by suffix so that gateway prefixes such as /api/v1 work."""
    path = path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
    return next((api for suffix, api in _PATH_SUFFIXES if path.endswith(suffix)), "unknown")


def _api_of_event(event: str | None, obj: object) -> str:
    """Guess the API from one event when the path did not tell."""
    kind = event if event and event != "message" else None
    if kind is None and isinstance(obj, dict) and isinstance(obj.get("type"), str):
        kind = obj["type"]
    if kind:
        if kind.startswith("response."):
            return "responses"
        if kind == "message_start":
            return "messages"
        if kind.startswith("image_generation."):
            return "images"
    if isinstance(obj, dict) and "choices" in obj:
        return "chat_completions"
    return "unknown"


def _api_of_body(obj: dict[str, Any]) -> str:
    if "choices" in obj:
        return "chat_completions"
    if obj.get("object") == "response":
        return "responses"
    if obj.get("type") == "message":
        return "messages"
    if isinstance(obj.get("data"), list):
        return "images"
    return "unknown"


class Analyzer:
    """Analyse one exchange: construct, :meth:`feed` every stored event, then :meth:`finish`."""

    def __init__(self, *, method: str, path: str, request_body: bytes | None) -> None:
        self._request_model: str | None = None
        self._include_usage = False
        self._offsets = array("q")  # offsets of the content-bearing events
        self._data_events = 0
        try:
            self._tally = Tally(detect_api(path))
            req = orjson.loads(request_body) if request_body else None
            if isinstance(req, dict):
                model = req.get("model")
                self._request_model = model if isinstance(model, str) and model else None
                options = req.get("stream_options")
                self._include_usage = (
                    isinstance(options, dict) and options.get("include_usage") is True
                )
        except Exception:
            # A request body that is not JSON tells nothing; the response can still be read.
            if not hasattr(self, "_tally"):
                self._tally = Tally("unknown")

    def feed(self, seq: int, offset_us: int, event: str | None, data: str | None) -> None:
        """Take one stored SSE event (``data`` None for comments and non-SSE chunks)."""
        try:
            if data is not None and self._feed(seq, event, data):
                self._offsets.append(offset_us)
        except Exception as exc:
            self._tally.add("analyzer_error", seq, _describe(exc))

    def _feed(self, seq: int, event: str | None, data: str) -> bool:
        """Apply one data event; True when it carries content."""
        tally = self._tally
        self._data_events += 1
        if tally.closed:
            if data == "[DONE]" and tally.done_ok:
                tally.done_ok, tally.finished = False, True
            else:
                name = event or ("[DONE]" if data == "[DONE]" else "message")
                tally.add("event_after_terminal", seq, f"{name[:80]} arrived after the terminal.")
            return False
        done = data == "[DONE]"
        obj = _BAD_JSON if done else _loads(data)
        if tally.api == "unknown":
            tally.api = _api_of_event(event, obj)
            if tally.api == "unknown":
                return False
        api = tally.api
        if done and api == "chat_completions":
            rules_openai.chat_done(tally)
            return False
        if done and api == "images":
            rules_openai.images_done(tally)
            return False
        if obj is _BAD_JSON or not isinstance(obj, dict):
            what = "is not valid JSON" if obj is _BAD_JSON else "is JSON but not an object"
            tally.add("invalid_json", seq, f"The event's data {what}.")
            obj = {}
        if api == "chat_completions":
            if event and event != "message":
                tally.unknown(seq, event)
            return rules_openai.chat_chunk(tally, seq, obj) if obj else False
        kind = event if event and event != "message" else obj.get("type")
        if not isinstance(kind, str) or not kind:
            tally.add("unknown_event", seq, "The event has neither an event name nor a type.")
            return False
        if api == "responses":
            return rules_openai.responses_event(tally, seq, kind, obj)
        if api == "messages":
            return rules_anthropic.messages_event(tally, seq, kind, obj)
        return rules_openai.images_event(tally, seq, kind, obj)

    def finish(
        self,
        *,
        status: int | None,
        state: str,
        response_body: bytes | None = None,
        response_content_type: str | None = None,
    ) -> Analysis:
        """The analysis so far; ``state`` is the transport state the recorder stored."""
        try:
            return self._finish(status, state, response_body, response_content_type)
        except Exception as exc:
            return self._fallback(status, state, exc)

    def _finish(
        self, status: int | None, state: str, body: bytes | None, content_type: str | None
    ) -> Analysis:
        tally = self._tally
        extra: list[Finding] = []
        status = status if isinstance(status, int) and not isinstance(status, bool) else None
        http_error = status is not None and status >= 400
        streamed = self._data_events > 0 or "event-stream" in (content_type or "").lower()
        body_read = False
        http_reason = None
        if body and http_error:
            # The error body labels the failure whatever the content type claimed.
            http_reason = _error_body_reason(body)
        elif body and not streamed:
            # A non-streamed answer: read it into a fresh tally so finish() stays repeatable.
            tally, body_read = Tally(tally.api), True
            self._read_body(tally, body, extra)
        model = tally.model or self._request_model
        api = tally.api
        if state not in _STATES:
            extra.append(Finding("analyzer_error", None, f"Unknown transport state {state!r}."))
        outcome, reason = _outcome(tally, status, state, body_read)
        if outcome == "http_error":
            # Without a JSON error body, an error event in the stream is the next best label.
            reason = http_reason or tally.reason or str(status)
        if (
            not (http_error or body_read or tally.finished)
            and state in ("completed", "truncated")
            and api in _NO_TERMINAL
        ):
            extra.append(Finding("no_terminal_event", None, _NO_TERMINAL[api]))
        if (
            self._include_usage
            and api == "chat_completions"
            and not (http_error or body_read or tally.usage_seen)
            and state == "completed"
        ):
            detail = "stream_options.include_usage was requested but no usage chunk arrived."
            extra.append(Finding("usage_missing", None, detail))
        findings = list(tally.findings)
        if tally.dropped:
            detail = f"{tally.dropped} more findings were not stored."
            findings.append(Finding("findings_truncated", None, detail))
        inp, out, total = tally.input_tokens, tally.output_tokens, tally.total_tokens
        if total is None and inp is not None and out is not None:
            total = inp + out
        offsets = self._offsets if not body_read else array("q")
        ttft, median, p95, top, rate = _timing(offsets, out)
        return Analysis(
            api=api,
            model=model,
            outcome=outcome,
            reason=reason,
            input_tokens=inp,
            output_tokens=out,
            total_tokens=total,
            ttft_us=ttft,
            gap_median_us=median,
            gap_p95_us=p95,
            gap_max_us=top,
            tokens_per_s=rate,
            output_text="".join(tally.text),
            refusal_text="".join(tally.refusal),
            reasoning_text="".join(tally.reasoning),
            tool_calls=[
                {
                    "id": c.id,
                    "name": c.name,
                    "arguments": "".join(c.parts) if c.final is None else c.final,
                }
                for c in tally.tools.values()
            ],
            findings=findings + extra,
        )

    def _read_body(self, tally: Tally, body: bytes, extra: list[Finding]) -> None:
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            extra.append(Finding("invalid_json", None, "The response body is not valid JSON."))
            return
        if not isinstance(obj, dict):
            extra.append(Finding("invalid_json", None, "The response body is not a JSON object."))
            return
        if tally.api == "unknown":
            tally.api = _api_of_body(obj)
        if tally.api == "messages":
            rules_anthropic.message_body(tally, obj)
        elif tally.api != "unknown":
            rules_openai.body(tally, obj)

    def _fallback(self, status: int | None, state: str, exc: Exception) -> Analysis:
        """A minimal analysis for when finishing itself failed: the transport still tells."""
        outcome = "http_error" if isinstance(status, int) and status >= 400 else None
        outcome = outcome or _TRANSPORT_OUTCOMES.get(str(state))
        outcome = outcome or ("cut" if state == "truncated" else "interrupted")
        if outcome == "interrupted" and state == "completed":
            outcome = "completed"
        return Analysis(
            api=self._tally.api,
            model=self._request_model,
            outcome=outcome,
            reason=None,
            findings=[Finding("analyzer_error", None, _describe(exc))],
        )


def _error_body_reason(body: bytes) -> str | None:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    return Tally.error_reason(obj.get("error")) or Tally.error_reason(obj.get("detail"))


_NO_TERMINAL = {
    "chat_completions": "The stream ended without data: [DONE].",
    "responses": "The stream ended without response.completed, .incomplete, .failed or error.",
    "messages": "The stream ended without message_stop or error.",
    "images": "The stream ended without image_generation.completed and data: [DONE].",
}


def _outcome(
    tally: Tally, status: int | None, state: str, body_read: bool
) -> tuple[str, str | None]:
    if status is not None and status >= 400:
        return "http_error", None
    if state == "recording":
        return "recording", None
    # The exchange's own terminal wins over how the connection ended.
    if tally.outcome is not None:
        return tally.outcome, tally.reason
    if state in _TRANSPORT_OUTCOMES:
        return _TRANSPORT_OUTCOMES[state], None
    if state == "truncated":
        return "cut", "truncated"
    if state != "completed":
        return "interrupted", None
    if tally.api == "unknown":
        return "completed", None
    return "cut", "invalid JSON body" if body_read else "no terminal event"


def _loads(data: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return _BAD_JSON


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def _timing(
    offsets: array[int], output_tokens: int | None
) -> tuple[int | None, int | None, int | None, int | None, float | None]:
    """(ttft, gap median, gap p95, gap max, tokens/s) from the content events' offsets.

    The median of an even count is the mean of the two middle gaps (rounded down); p95 is
    the nearest-rank percentile, so it is always a gap that occurred."""
    if not offsets:
        return None, None, None, None, None
    ttft = offsets[0]
    span = offsets[-1] - ttft
    rate = output_tokens / (span / 1e6) if output_tokens is not None and span > 0 else None
    if len(offsets) < 2:
        return ttft, None, None, None, rate
    gaps = sorted(b - a for a, b in itertools.pairwise(offsets))
    n = len(gaps)
    median = gaps[n // 2] if n % 2 else (gaps[n // 2 - 1] + gaps[n // 2]) // 2
    p95 = gaps[max(0, math.ceil(0.95 * n) - 1)]
    return ttft, median, p95, gaps[-1], rate
