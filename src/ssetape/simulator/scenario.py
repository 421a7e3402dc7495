"""Scenarios of the simulated upstream LLM API (``ssetape simulate`` / ``ssetape demo``).

Endpoints, matched by path suffix so that prefixes such as ``/api/v1`` work too:
``POST .../chat/completions`` (OpenAI Chat Completions), ``.../responses`` (OpenAI
Responses), ``.../messages`` (Anthropic Messages), ``.../images/generations`` and
``.../images`` (OpenAI image generation), ``.../models/{model}:streamGenerateContent`` and
``:generateContent`` (Google Gemini, whose path names the model and whether it streams). A
body with ``"stream": true`` gets Server-Sent Events, otherwise the API's JSON object; any
other path gets a 404 OpenAI-shaped error.

Everything is a deterministic function of the request. The answer's words are a seeded
choice keyed on the last user message, with some non-ASCII ("café", emoji); ids and
timing jitter are keyed on the whole body. The answer has ``max_output_tokens`` /
``max_completion_tokens`` / ``max_tokens`` tokens (12 when unset, at most 1000); a limit
below 12 cuts it short: finish_reason "length", stop_reason "max_tokens",
``response.incomplete`` with reason "max_output_tokens".

By default: a text answer; a tool call when the request has tools (not after a tool
result, nor with tool_choice "none"); a thinking block when Anthropic ``thinking`` is
enabled; a reasoning item on Responses for o1/o3/o4/gpt-5 or a ``reasoning`` field. Chat
and Responses send a ``: OPENROUTER PROCESSING`` comment first and another one glued to a
later event; Anthropic sends ``ping`` events. Chunk boundaries vary on purpose: an event
split mid-line, one split inside a UTF-8 character, two events in one chunk. At speed 1
the first byte comes after ~120 ms, then a token every ~20 ms (deterministic jitter);
``--speed`` divides every delay.

Keywords in the model name after a ``sim`` word choose the scenario; they combine, as in
``gpt-4o-sim-pause-error``, ``claude-sim-reasoning`` or ``sim-refusal-silent``:

  error       failure after the stream started, with HTTP 200: a chat chunk with a
              top-level ``error`` and finish_reason "error", ``response.failed`` on
              Responses, an ``error`` event on Messages and instead of the final image
  early       with error, on images: the error replaces the first partial image
  failed      ``response.failed`` with error.code "server_error" (elsewhere as error)
  unresolved  Responses ``error`` event, code ``response_unresolved`` (elsewhere as error)
  cut         the connection closes mid-stream, inside an event
  pause       a 1.5 s pause mid-answer with ``: keep-alive`` comments every 0.5 s
  refusal     a refusal: Responses refusal part after a little text, chat
              ``delta.refusal``, Anthropic stop_reason "refusal"
  silent      with refusal: no explanation (``response.refusal.done`` with "")
  incomplete  the answer stops early, as when it hits the token limit
  reasoning   reasoning first (Responses reasoning_text, Anthropic thinking)
  gzip, br, zstd  that ``content-encoding`` if accepted, flushed after every chunk
  plain       one event per chunk: no splits, no shared chunks
  400..599    that HTTP status and an API-shaped JSON error instead of the answer
              (``sim-429`` and ``sim-529`` add ``retry-after``)

Without streaming, error/failed/unresolved answer HTTP 500 (529 on Messages; a failed
response object on Responses), pause delays the JSON and cut closes mid-body.

WebSocket sessions, on the same port (``Upgrade: websocket``; wss:// when it serves TLS):
``.../realtime?model=M`` (OpenAI Realtime), ``.../responses`` (the Responses API's WebSocket
mode, ``stream_id`` lanes at once) and ``...BidiGenerateContent`` (Gemini Live, JSON in
binary frames). Each answer streams a few text deltas 80 ms apart (``--speed`` divides it)
and its usage. Keywords after ``sim`` in the model: ``close`` (a close code and reason after
two deltas; Gemini refuses the setup so), ``cut`` (TCP closed with no close frame), ``error``
(Realtime: an ``error`` event), ``fail`` (Responses: ``response.failed``).
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import orjson

from ssetape.simulator.encodings import chosen, encode_whole

Api: TypeAlias = Literal["chat", "responses", "messages", "images", "gemini"]
Split: TypeAlias = Literal["line", "utf8"]
Failure: TypeAlias = Literal["cut", "unresolved", "failed", "error"]

TTFB = 0.12
TOKEN_GAP = 0.020
SPLIT_GAP = 0.004
PAUSE = 1.5
KEEPALIVE_EVERY = 0.5
DEFAULT_TOKENS = 12
MAX_TOKENS = 1000

# fmt: off
_WORDS = (
    "streams", "arrive", "token", "by", "events", "replay", "with", "timing", "the", "proxy",
    "records", "every", "byte", "and", "keeps", "order", "tape", "rolls", "on", "quietly",
    "bright", "signal", "fast", "model", "answers",
)
_NON_ASCII = ("café", "naïve", "déjà", "Zürich", "façade", "crème", "🚀", "✨", "日本", "señor")
# fmt: on
_FAILURES: tuple[Failure, ...] = ("cut", "unresolved", "failed", "error")


@dataclass(frozen=True, slots=True)
class PlannedChunk:
    """One socket write (one HTTP chunk), ``at`` seconds after the whole request arrived."""

    at: float
    data: bytes


@dataclass(frozen=True, slots=True)
class Plan:
    """What the simulator sends. Non-streamed plans carry ``content-length``; streams
    carry no framing header (the server adds ``transfer-encoding: chunked``)."""

    status: int
    headers: list[tuple[str, str]]
    chunks: list[PlannedChunk]
    cut: bool
    stream: bool


@dataclass(frozen=True, slots=True)
class Scenario:
    """What the builders need to know about one request."""

    api: Api
    body: dict[str, Any]
    model: str
    keywords: frozenset[str]
    stream: bool
    encoding: str  # content encoding of the answer ("" for none)
    seed: int
    prompt: str  # the last user message
    tokens: tuple[str, ...]  # the answer
    truncated: bool  # the answer stopped at the token limit
    prompt_tokens: int
    after_tool: bool  # the last turn is a tool result, so answer instead of calling again
    digest: str = field(repr=False)
    query: str = ""  # the request's query string (Gemini's alt=sse picks the framing)

    def has(self, keyword: str) -> bool:
        return keyword in self.keywords

    @property
    def text(self) -> str:
        return "".join(self.tokens)

    @property
    def created(self) -> int:
        # A fixed clock keeps the bytes identical for identical requests.
        return 1_750_000_000 + self.seed % 1_000_000

    def ident(self, prefix: str, length: int = 24) -> str:
        return prefix + self.digest[:length]

    @property
    def status_error(self) -> int | None:
        codes = [int(w) for w in self.keywords if w.isdigit() and 400 <= int(w) <= 599]
        return min(codes, default=None)

    @property
    def failure(self) -> Failure | None:
        """How the stream breaks after it started, if it does."""
        return next((f for f in _FAILURES if f in self.keywords), None)


def keywords_of(model: str) -> frozenset[str]:
    """The scenario keywords of a model name: the words after a ``sim`` word."""
    words = re.split(r"[^a-z0-9]+", model.lower())
    if "sim" not in words:
        return frozenset()
    return frozenset(w for w in words[words.index("sim") + 1 :] if w)


def _text_of(content: Any) -> str:
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return " ".join(p for p in parts if isinstance(p, str))
    return content if isinstance(content, str) else ""


def _conversation(api: Api, body: Mapping[str, Any]) -> tuple[list[Any], str, bool]:
    """(all messages, the last user message, whether the last turn is a tool result)."""
    if api == "images":
        return [], _text_of(body.get("prompt")), False
    if api == "gemini":
        return _gemini_conversation(body)
    raw = body.get("input") if api == "responses" else body.get("messages")
    if isinstance(raw, str):
        return [raw], raw, False
    items = [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []
    users = [m for m in items if m.get("role") == "user"]
    last = items[-1] if items else {}
    after_tool = last.get("role") == "tool" or last.get("type") == "function_call_output"
    if api == "messages" and isinstance(last.get("content"), list):
        after_tool = any(
            b.get("type") == "tool_result" for b in last["content"] if isinstance(b, dict)
        )
    return items, _text_of(users[-1].get("content")) if users else "", after_tool


def _gemini_conversation(body: Mapping[str, Any]) -> tuple[list[Any], str, bool]:
    """Gemini's ``contents``: turns of ``parts``; a turn without a role is the user's."""
    raw = body.get("contents")
    items = [c for c in raw if isinstance(c, dict)] if isinstance(raw, list) else []
    users = [c for c in items if c.get("role", "user") == "user"]
    parts = items[-1].get("parts") if items else None
    after_tool = isinstance(parts, list) and any(
        isinstance(p, dict) and "functionResponse" in p for p in parts
    )
    return items, _text_of(users[-1].get("parts")) if users else "", after_tool


def _gemini_model(path: str) -> str:
    """The model of a Gemini path, ``.../models/{model}:streamGenerateContent``."""
    name = path.split("?", 1)[0].rsplit("/", 1)[-1]
    return name.rsplit(":", 1)[0] if ":" in name else ""


def _limit(body: Mapping[str, Any]) -> int | None:
    for name in ("max_output_tokens", "max_completion_tokens", "max_tokens", "maxOutputTokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def answer_tokens(prompt: str, count: int) -> list[str]:
    """The seeded answer to ``prompt``: ``count`` tokens, the first without a leading space."""
    rng = random.Random(hashlib.sha256(prompt.encode()).digest())
    words = [rng.choice(_WORDS) for _ in range(count)]
    if words:
        words[min(2, count - 1)] = rng.choice(_NON_ASCII)
        words[0] = words[0][:1].upper() + words[0][1:]
        words[-1] += "."
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


def parse_request(api: Api, headers: Mapping[str, str], body: bytes, path: str = "") -> Scenario:
    """Read a request body that must be a JSON object (ValueError otherwise); ``path`` (with
    its query) holds Gemini's model, whether it streams and its framing."""
    data = orjson.loads(body)
    if not isinstance(data, dict):
        raise ValueError("the request body must be a JSON object")
    model = data.get("model") if isinstance(data.get("model"), str) else ""
    stream = data.get("stream") is True
    config = data
    if api == "gemini":
        model = _gemini_model(path)
        stream = path.split("?", 1)[0].rstrip("/").endswith(":streamGenerateContent")
        generation = data.get("generationConfig")
        config = generation if isinstance(generation, dict) else {}
    keywords = keywords_of(str(model))
    messages, prompt, after_tool = _conversation(api, data)
    limit = _limit(config)
    natural = DEFAULT_TOKENS if limit is None or limit < DEFAULT_TOKENS else min(limit, MAX_TOKENS)
    tokens = answer_tokens(prompt, natural)
    truncated = limit is not None and limit < DEFAULT_TOKENS
    if truncated:
        tokens = tokens[:limit]
    elif "incomplete" in keywords:
        tokens[-1], truncated = tokens[-1].removesuffix("."), True
    text_size = len(orjson.dumps(messages)) if messages else len(prompt)
    # Keyed on the content, not the bytes: key order and spacing differ between clients.
    digest = hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return Scenario(
        api=api,
        body=data,
        model=str(model),
        keywords=keywords,
        stream=stream,
        encoding=chosen(keywords, headers.get("accept-encoding", "")),
        seed=int(digest[:12], 16),
        prompt=prompt,
        tokens=tuple(tokens),
        truncated=truncated,
        prompt_tokens=max(1, text_size // 4) + 3 * len(messages),
        after_tool=after_tool,
        digest=digest,
        query=path.partition("?")[2],
    )


def word_tokens(text: str) -> list[str]:
    """``text`` as one token per word, spaces leading."""
    return re.findall(r"\s*\S+", text)


def pieces(text: str) -> list[str]:
    """``text`` in the 3 to 8 character pieces that argument deltas come in."""
    rng, out = random.Random(text), []
    while text:
        size = rng.randint(3, 8)
        out.append(text[:size])
        text = text[size:]
    return out


def tool_arguments(schema: Any, prompt: str) -> dict[str, Any]:
    """Plausible arguments for a JSON schema, chosen deterministically."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    args: dict[str, Any] = {}
    for name, spec in (props if isinstance(props, dict) else {}).items():
        spec = spec if isinstance(spec, dict) else {}
        kind = spec.get("type")
        if isinstance(spec.get("enum"), list) and spec["enum"]:
            args[name] = spec["enum"][0]
        elif kind in ("integer", "number", "boolean"):
            args[name] = {"integer": 3, "number": 21.5, "boolean": True}[kind]
        elif kind in ("array", "object"):
            args[name] = [answer_tokens(prompt + name, 1)[0][:-1]] if kind == "array" else {}
        else:
            args[name] = "Zürich" if "city" in name or "location" in name else "café crème"
    return args


def plan_headers(sc: Scenario | None, content_type: str) -> list[tuple[str, str]]:
    headers = [("content-type", content_type)]
    if sc is not None:
        headers.append(("request-id" if sc.api == "messages" else "x-request-id", sc.ident("req_")))
        if sc.encoding:
            headers.append(("content-encoding", sc.encoding))
    return headers


def json_plan(
    sc: Scenario | None,
    obj: Any,
    speed: float,
    after: float = TTFB,
    status: int = 200,
    extra: Sequence[tuple[str, str]] = (),
) -> Plan:
    """A JSON body in one write, ``after`` seconds (at speed 1) after the request."""
    data = orjson.dumps(obj)
    if sc is not None and sc.encoding:
        data = encode_whole(sc.encoding, data)
    headers = [*plan_headers(sc, "application/json"), *extra, ("content-length", str(len(data)))]
    cut = sc is not None and sc.has("cut") and status < 400
    after += PAUSE if sc is not None and sc.has("pause") else 0.0
    chunk = PlannedChunk(after / speed, data[: len(data) // 2] if cut else data)
    return Plan(status, headers, [chunk], cut, False)


def error_response(sc: Scenario | None, status: int, body: Any, speed: float) -> Plan:
    """An HTTP error status with its JSON body, and retry hints where they belong."""
    extra = []
    if status in (429, 503, 529):
        extra = [("retry-after", "1"), ("retry-after-ms", str(round(1000 / speed)))]
    return json_plan(sc, body, speed, TTFB / 4, status, extra)
