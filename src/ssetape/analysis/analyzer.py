"""What a recorded LLM API exchange said: outcome, usage, timing, text and protocol findings.

:class:`Analyzer` is fed one stored SSE event at a time and keeps only running totals, so it can
follow streams of a million events; :meth:`Analyzer.finish` has no side effects, so it can be
called on a recording in progress and again once it ends. What each API's events mean is in
its rules module (:mod:`ssetape.analysis.apis` lists them); they update a
:class:`~ssetape.analysis.tally.Tally`.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from array import array
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from ssetape.analysis.api_rules import ApiRules
from ssetape.analysis.apis import APIS, UNKNOWN, api_of_body, api_of_event, detect_api
from ssetape.analysis.ending import fallback_outcome, outcome_of
from ssetape.analysis.fault import fault_of
from ssetape.analysis.findings import UNMODELLED, Finding, FindingCode
from ssetape.analysis.profiles import DEFAULT_PROFILE, PROFILES, Profile
from ssetape.analysis.request_text import request_text
from ssetape.analysis.tally import Tally
from ssetape.framing.json_array import JsonArrayParser
from ssetape.vocabulary import ExchangeState, Outcome

__all__ = ["MAX_ERROR_BODY", "Analysis", "Analyzer"]

MAX_ERROR_BODY = 64 << 10  # bytes of a streamed HTTP error kept to read its label from

_STATES = frozenset(ExchangeState)
# Stands for "data was not JSON", distinct from any value orjson can return.
_BAD_JSON = object()


@dataclass(slots=True)
class Analysis:
    api: str
    model: str | None
    outcome: str
    reason: str | None
    # Who made it fail (vocabulary.Fault; analysis.fault), None if it did not.
    fault: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    # As each provider reports them (Anthropic's input_tokens leave cache reads and writes
    # out; OpenAI's include cached_tokens; reasoning is part of output_tokens).
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    # Billed per call beside the tokens: Anthropic's server_tool_use.web_search_requests.
    web_searches: int | None = None
    # The provider profile the stream was read under (ssetape.analysis.profiles).
    profile: str = DEFAULT_PROFILE
    ttft_us: int | None = None
    gap_median_us: int | None = None
    gap_p95_us: int | None = None
    gap_max_us: int | None = None
    tokens_per_s: float | None = None
    output_text: str = ""
    refusal_text: str = ""
    reasoning_text: str = ""
    # The request's prompt (ssetape.analysis.request_text), searched beside the output.
    request_text: str | None = None
    # The first MAX_TOOL_CALLS (ssetape.analysis.tool_calls), and how many the stream opened.
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    tool_calls_total: int = 0
    findings: list[Finding] = field(default_factory=list)
    session: dict[str, object] | None = None  # a WebSocket session's (analysis.sessions)

    def to_json(self) -> dict[str, object]:
        return asdict(self)


class Analyzer:
    """Analyse one exchange: construct, :meth:`feed` every stored event, then :meth:`finish`."""

    def __init__(
        self,
        *,
        method: str,
        path: str,
        request_body: bytes | None,
        profile: Profile | str | None = None,
    ) -> None:
        self._request: dict[str, Any] = {}
        self._request_model: str | None = None
        self.content_offsets = array("q")  # of the content events: TTFT and gaps (FIGURES.md)
        self._data_events = 0
        if isinstance(profile, str):
            profile = PROFILES[profile]
        self.profile = profile or PROFILES[DEFAULT_PROFILE]
        self._tally = Tally(UNKNOWN, self.profile)
        self._array: JsonArrayParser | None = None  # a stream that is one JSON array
        # An HTTP error's body, whatever its content type claims: read whole, not as a stream.
        self._error_body: bytearray | None = None
        try:
            req = orjson.loads(request_body) if request_body else None
            if isinstance(req, dict):
                self._request = req
                model = req.get("model")
                self._request_model = model if isinstance(model, str) and model else None
        except Exception:
            pass  # a request body that is not JSON tells nothing; the response still can
        self._set_api(self._tally, detect_api(path))
        rules = APIS.get(self._tally.api)
        if rules is not None and rules.model_of_path is not None:
            # The model the path names is the one asked for and billed (Bedrock's modelId),
            # even when the wrapped stream names its own version.
            self._tally.set_model(rules.model_of_path(path))

    def _set_api(self, tally: Tally, api: str) -> None:
        tally.api = api
        rules = APIS.get(api)
        if rules is not None and rules.request is not None and self._request:
            try:
                rules.request(tally, self._request)
            except Exception as exc:
                tally.add(FindingCode.ANALYZER_ERROR, None, _describe(exc))

    def answered(self, status: object) -> None:
        """The response status, once known (before its body's rows): an HTTP error is an
        outcome, not a stream; its rows are the body its error is read from."""
        error = isinstance(status, int) and not isinstance(status, bool) and status >= 400
        self._error_body = bytearray() if error else None

    def feed_row(
        self, seq: int, offset_us: int, event: str | None, data: str | None, raw: bytes
    ) -> None:
        """Take one stored row of a streamed body, as the recorder stored it."""
        if self._error_body is not None:
            self._error_body += raw[: MAX_ERROR_BODY - len(self._error_body)]
        elif data is None and event is None:
            self.feed_raw(seq, offset_us, raw)  # a chunk of a stream no framing cut
        else:
            self.feed(seq, offset_us, event, data)

    def feed(self, seq: int, offset_us: int, event: str | None, data: str | None) -> None:
        """Take one stored SSE event (``data`` None for comments and non-SSE chunks)."""
        try:
            if data is not None and self._feed(seq, event, data):
                self.content_offsets.append(offset_us)
        except Exception as exc:
            self._tally.add(FindingCode.ANALYZER_ERROR, seq, _describe(exc))

    def feed_raw(self, seq: int, offset_us: int, raw: bytes) -> None:
        """Take one stored chunk of a stream that is not SSE: for an API whose streams are a
        JSON array (Gemini without alt=sse), each element completed is read as an event."""
        rules = APIS.get(self._tally.api)
        if rules is None or not rules.array_paths or (self._array is None and self._data_events):
            return
        if self._array is None:
            self._array = JsonArrayParser()
        for element in self._array.feed(raw):
            self.feed(seq, offset_us, None, element.decode("utf-8", "replace"))

    def _feed(self, seq: int, event: str | None, data: str) -> bool:
        """Apply one data event; True when it carries content."""
        tally = self._tally
        self._data_events += 1
        if tally.closed:
            if data == "[DONE]" and tally.done_ok:
                tally.done_ok, tally.finished = False, True
                return False
            name = _name(event, data)
            if name not in tally.follow:
                detail = f"{name[:80]} arrived after the terminal."
                tally.add(FindingCode.EVENT_AFTER_TERMINAL, seq, detail)
                return False
            tally.follow, tally.closed = frozenset(), False  # once; read it as any event
        done = data == "[DONE]"
        obj = _BAD_JSON if done else _loads(data)
        if tally.api == UNKNOWN and self._data_events == 1:
            # The first event names the API: no rules read a stream none claimed at its start.
            self._set_api(tally, api_of_event(event, obj))
        rules = APIS.get(tally.api)
        if rules is None:
            return False
        if done and rules.done is not None:
            rules.done(tally)
            return False
        if obj is _BAD_JSON or not isinstance(obj, dict):
            what = "is not valid JSON" if obj is _BAD_JSON else "is JSON but not an object"
            tally.add(FindingCode.INVALID_JSON, seq, f"The event's data {what}.")
            obj = {}
        named = event if event and event != "message" else None
        if not rules.typed_events:
            return rules.event(tally, seq, named, obj)
        kind = named or obj.get("type")
        if not isinstance(kind, str) or not kind:
            tally.add(FindingCode.UNKNOWN_EVENT, seq, "The event has neither a name nor a type.")
            return False
        return rules.event(tally, seq, kind, obj)

    def finish(
        self,
        *,
        status: int | None,
        state: str,
        response_body: bytes | None = None,
        response_content_type: str | None = None,
        error: str | None = None,
        gap_seq: int | None = None,
    ) -> Analysis:
        """The analysis so far; ``state`` is the transport state the recorder stored, ``error``
        and ``gap_seq`` what it stored of what went wrong and of what it did not record."""
        try:
            a = self._finish(status, state, response_body, response_content_type, gap_seq)
        except Exception as exc:
            a = self._fallback(status, state, exc)
        known = status if isinstance(status, int) and not isinstance(status, bool) else None
        a.fault = fault_of(a.outcome, state, known, error)
        a.request_text = request_text(a.api, self._request)
        return a

    def _finish(
        self, status: int | None, state: str, body: bytes | None, content_type: str | None,
        gap_seq: int | None,
    ) -> Analysis:  # fmt: skip
        tally = self._tally
        extra: list[Finding] = []
        if body is None and self._error_body:
            body = bytes(self._error_body)
        # An HTTP error's body was never read as a stream: nothing to say of its form.
        elements = self._array if self._error_body is None else None
        if elements is not None and elements.invalid:
            detail = "The stream is not the JSON array this API streams."
            extra.append(Finding(FindingCode.INVALID_JSON, None, detail))
        elif elements is not None and elements.dropped:
            detail = f"{elements.dropped} array elements over the size bound were not read."
            extra.append(Finding(FindingCode.INVALID_JSON, None, detail))
        status = status if isinstance(status, int) and not isinstance(status, bool) else None
        http_error = status is not None and status >= 400
        streamed = self._data_events > 0 or "event-stream" in (content_type or "").lower()
        body_read = False
        http_reason = None
        if body and http_error:
            # The error body labels the failure whatever the content type claimed.
            http_reason = _error_body_reason(body, APIS.get(tally.api))
        elif body and not streamed:
            # A non-streamed answer: read it into a fresh tally so finish() stays repeatable.
            tally, body_read = Tally(tally.api, self.profile), True
            self._read_body(tally, body, extra)
        model = tally.model or self._request_model
        rules = APIS.get(tally.api)
        if state not in _STATES:
            detail = f"Unknown transport state {state!r}."
            extra.append(Finding(FindingCode.ANALYZER_ERROR, None, detail))
        outcome, reason = outcome_of(tally, status, state, body_read, gap_seq)
        if outcome == Outcome.HTTP_ERROR:
            # Without a JSON error body, an error event in the stream is the next best label.
            reason = http_reason or tally.reason or str(status)
        if rules is None and streamed and not http_error:
            extra.append(Finding(FindingCode.UNKNOWN_API, None, UNMODELLED))
        # With a gap in the recording, the terminal may be in what was not recorded.
        over = state in (ExchangeState.COMPLETED, ExchangeState.TRUNCATED) and gap_seq is None
        if rules is not None and over and not (http_error or body_read or tally.finished):
            extra.append(Finding(FindingCode.NO_TERMINAL_EVENT, None, rules.no_terminal))
        if (
            tally.usage_requested
            and not (http_error or body_read or tally.usage_seen)
            and state == ExchangeState.COMPLETED
            and outcome != Outcome.ERROR  # a failed stream owes no usage
        ):
            detail = f"{tally.usage_requested} was requested but no usage chunk arrived."
            extra.append(Finding(FindingCode.USAGE_MISSING, None, detail))
        findings = list(tally.findings)
        if tally.dropped:
            detail = f"{tally.dropped} more findings were not stored."
            findings.append(Finding(FindingCode.FINDINGS_TRUNCATED, None, detail))
        inp, out, total = tally.input_tokens, tally.output_tokens, tally.total_tokens
        if total is None and inp is not None and out is not None:
            total = inp + out
        offsets = self.content_offsets if not body_read else array("q")
        ttft, median, p95, top, rate = _timing(offsets, out)
        return Analysis(
            api=tally.api,
            model=model,
            outcome=outcome,
            reason=reason,
            input_tokens=inp,
            output_tokens=out,
            total_tokens=total,
            cache_read_tokens=tally.cache_read_tokens,
            cache_write_tokens=tally.cache_write_tokens,
            reasoning_tokens=tally.reasoning_tokens,
            web_searches=tally.web_searches,
            profile=self.profile.name,
            ttft_us=ttft,
            gap_median_us=median,
            gap_p95_us=p95,
            gap_max_us=top,
            tokens_per_s=rate,
            output_text="".join(tally.text),
            refusal_text="".join(tally.refusal),
            reasoning_text="".join(tally.reasoning),
            tool_calls=tally.tools.listed(),
            tool_calls_total=len(tally.tools),
            findings=findings + extra,
        )

    def _read_body(self, tally: Tally, body: bytes, extra: list[Finding]) -> None:
        obj = _loads(body)
        if tally.api == UNKNOWN and isinstance(obj, dict):
            tally.api = api_of_body(obj)
        rules = APIS.get(tally.api)
        if rules is None:
            return  # an API not modelled: nothing is said of its body's form
        if obj is _BAD_JSON:
            detail = "The response body is not valid JSON."
            extra.append(Finding(FindingCode.INVALID_JSON, None, detail))
        elif isinstance(obj, list) and rules.body_array is not None:
            rules.body_array(tally, obj)
        elif not isinstance(obj, dict):
            detail = "The response body is not a JSON object."
            extra.append(Finding(FindingCode.INVALID_JSON, None, detail))
        else:
            rules.body(tally, obj)

    def _fallback(self, status: int | None, state: str, exc: Exception) -> Analysis:
        """A minimal analysis for when finishing itself failed: the transport still tells."""
        return Analysis(
            api=self._tally.api,
            model=self._request_model,
            outcome=fallback_outcome(status, state),
            reason=None,
            profile=self.profile.name,
            findings=[Finding(FindingCode.ANALYZER_ERROR, None, _describe(exc))],
        )


def _error_body_reason(body: bytes, rules: ApiRules | None) -> str | None:
    """The label of an HTTP error body, by the API's own reading of an error object."""
    obj = _loads(body)
    if obj is _BAD_JSON:
        obj = _first_data(body)  # an error sent as a stream: its first event says it
    if isinstance(obj, list) and len(obj) == 1:
        obj = obj[0]  # an error answered on a path that streams a JSON array
    if not isinstance(obj, dict):
        return None
    read = rules.error_reason if rules is not None else Tally.error_reason
    return read(obj.get("error")) or Tally.error_reason(obj.get("detail"))


def _first_data(body: bytes) -> Any:  # the first JSON object of an SSE or NDJSON body
    for line in body.splitlines()[:100]:
        line = line.strip()
        obj = _loads(line[5:].strip() if line.startswith(b"data:") else line)
        if isinstance(obj, dict):
            return obj
    return None


def _name(event: str | None, data: str) -> str:
    """An event's type for a message: its name, else its payload's type (data-only streams)."""
    if data == "[DONE]":
        return data
    if event and event != "message":
        return event
    obj = _loads(data) if len(data) < 1 << 16 else None  # only for a finding: stay cheap
    kind = obj.get("type") if isinstance(obj, dict) else None
    return kind if isinstance(kind, str) and kind else "message"


def _loads(data: str | bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        wide = _WIDE_BYTES.search(data) if isinstance(data, bytes) else _WIDE.search(data)
        return _BAD_JSON if wide is None else _loads_wide(data)


# Valid JSON orjson refuses: a number past a double's range (or, in some versions, an integer
# past 64 bits). Only failed data is searched for one, so valid JSON costs nothing more.
_WIDE = re.compile(r"\d{20}|[eE][+-]?\d{3}")
_WIDE_BYTES = re.compile(_WIDE.pattern.encode())


def _loads_wide(data: str | bytes) -> Any:
    """The standard library's reading, with numbers as orjson gives them (an integer past
    64 bits as a float, so no column gets one it cannot hold); NaN and Infinity stay invalid."""
    try:
        return json.loads(data, parse_int=_int, parse_constant=_not_json)
    except (ValueError, RecursionError):
        return _BAD_JSON


def _int(text: str) -> int | float:
    if len(text) <= 20 and -(2**63) <= (n := int(text)) < 2**64:
        return n
    return float(text)


def _not_json(text: str) -> Any:
    raise ValueError(text)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def _timing(
    offsets: array[int], output_tokens: int | None
) -> tuple[int | None, int | None, int | None, int | None, float | None]:
    """(ttft, gap median, gap p95, gap max, tokens/s) from the content events' offsets."""
    if not offsets:
        return None, None, None, None, None
    ttft = offsets[0]
    span = offsets[-1] - ttft
    rate = output_tokens / (span / 1e6) if output_tokens is not None and span > 0 else None
    median, p95, top = gap_figures([b - a for a, b in itertools.pairwise(offsets)])
    return ttft, median, p95, top, rate


def gap_figures(gaps: Iterable[int]) -> tuple[int | None, int | None, int | None]:
    """(median, p95, max) of gaps: the one rule of docs/FIGURES.md, for a stream's gaps and
    a session's turn by turn. The median of an even count is the mean of the two middle
    gaps (rounded down); p95 is the nearest-rank percentile, so it is a gap that occurred."""
    ordered = sorted(gaps)
    n = len(ordered)
    if not n:
        return None, None, None
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) // 2
    return median, ordered[max(0, math.ceil(0.95 * n) - 1)], ordered[-1]
