"""The errors each streaming API sends, in its own words: what a replayed fault answers.

A fault (:mod:`ssetape.replay.faults`) that replaces the rest of a stream with an error, or
refuses a request with 429/503, must look like the provider's own: the SDKs raise their real
exception types only for the real shapes. One entry per API of the vocabulary
(:data:`ssetape.analysis.apis.APIS`), keyed by its name; an API without one gets the OpenAI
shape, which most gateways copy.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ssetape.framing.eventstream import encode_frame

__all__ = ["ERRORS", "ProviderErrors", "errors_for"]

OPENAI_FAILURE = "The server had an error while processing your request. Sorry about that!"
GOOGLE_FAILURE = "An internal error has occurred. Please retry or report the problem."
_REASONS = {429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
            503: "Service Unavailable", 504: "Gateway Timeout", 529: "Overloaded"}  # fmt: skip
# google.rpc.Code names that Google's APIs put in error.status.
_GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                  429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE",
                  504: "DEADLINE_EXCEEDED"}  # fmt: skip
_ANTHROPIC_TYPES = {429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error"}
# Bedrock's error codes (botocore reads ``__type``), by status.
_BEDROCK_TYPES = {400: "ValidationException", 403: "AccessDeniedException",
                  404: "ResourceNotFoundException", 408: "ModelTimeoutException",
                  429: "ThrottlingException", 500: "InternalServerException",
                  503: "ServiceUnavailableException"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ProviderErrors:
    """How one API says it failed.

    ``mid_stream(before)``: the event that replaces the rest of a stream, given the recorded
    events played before it (their ids, sequence numbers and line endings are followed);
    ``status_body(status)``: the JSON body of an HTTP error answer."""

    mid_stream: Callable[[Sequence[bytes]], bytes]
    status_body: Callable[[int], dict[str, Any]]


def reason(status: int) -> str:
    return _REASONS.get(status, "Error")


def _sep(before: Sequence[bytes]) -> bytes:
    """The blank line the recorded events end with (CRLF streams exist: Gemini's)."""
    for raw in reversed(before):
        if raw.endswith(b"\r\n\r\n"):
            return b"\r\n\r\n"
        if raw.endswith(b"\n\n"):
            return b"\n\n"
    return b"\n\n"


def _last_data(before: Sequence[bytes]) -> dict[str, Any]:
    """The JSON object of the last recorded event that has one (an empty dict if none)."""
    for raw in reversed(before):
        for line in reversed(raw.splitlines()):
            if line.startswith(b"data:"):
                try:
                    obj = json.loads(line[5:])
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    return obj
    return {}


def _sse(obj: dict[str, Any], event: str | None, before: Sequence[bytes]) -> bytes:
    sep = _sep(before)
    line = sep[: len(sep) // 2]
    head = b"event: " + event.encode() + line if event else b""
    return head + b"data: " + json.dumps(obj, separators=(",", ":")).encode() + sep


def _chat_mid_stream(before: Sequence[bytes]) -> bytes:
    """A chunk with a top-level ``error`` and finish_reason "error", as OpenAI and OpenRouter
    send it (the openai SDK raises APIError on it)."""
    last = _last_data(before)
    chunk: dict[str, Any] = {key: last[key] for key in ("id", "created", "model") if key in last}
    chunk.update(
        object="chat.completion.chunk",
        choices=[{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
        error={"code": "server_error", "message": OPENAI_FAILURE},
    )
    return _sse(chunk, None, before)


def _responses_mid_stream(before: Sequence[bytes]) -> bytes:
    """The Responses API's ``error`` event (the SDK yields it as a ResponseErrorEvent)."""
    seq = _last_data(before).get("sequence_number")
    event: dict[str, Any] = {"type": "error", "code": "server_error", "message": OPENAI_FAILURE}
    event["param"] = None
    event["sequence_number"] = seq + 1 if isinstance(seq, int) else 0
    return _sse(event, "error", before)


def _messages_mid_stream(before: Sequence[bytes]) -> bytes:
    """Anthropic's ``error`` event (the SDK raises APIStatusError / OverloadedError)."""
    obj = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    return _sse(obj, "error", before)


def _images_mid_stream(before: Sequence[bytes]) -> bytes:
    error = {"type": "image_generation_server_error", "code": "server_error",
             "message": OPENAI_FAILURE, "param": None}  # fmt: skip
    return _sse({"type": "error", "error": error}, "error", before)


def _gemini_mid_stream(before: Sequence[bytes]) -> bytes:
    """A Google error object: an SSE event (``alt=sse``) or the JSON array's next element."""
    obj = _google_body(500)
    if before and before[0].lstrip().startswith(b"["):  # the array form: close it after
        return b",\r\n" + json.dumps(obj).encode() + b"\r\n]"
    return _sse(obj, None, before)


def _bedrock_mid_stream(before: Sequence[bytes]) -> bytes:
    """An exception frame of the AWS event stream (boto3 raises EventStreamError on it)."""
    payload = {"message": "The system encountered an unexpected error during processing. "
               "Try your request again.", "originalStatusCode": 500}  # fmt: skip
    headers = {
        ":exception-type": "modelStreamErrorException",
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode_frame(headers, json.dumps(payload, separators=(",", ":")).encode())


def _bedrock_body(status: int) -> dict[str, Any]:
    kind = _BEDROCK_TYPES.get(status, "InternalServerException" if status >= 500 else
                              "ValidationException")  # fmt: skip
    return {"__type": kind, "message": f"{reason(status)} (ssetape fault)"}


def _ollama_mid_stream(before: Sequence[bytes]) -> bytes:
    """Ollama's error line in the NDJSON stream."""
    return json.dumps({"error": "an error was encountered while running the model"}).encode() + (
        b"\r\n" if before and before[-1].endswith(b"\r\n") else b"\n"
    )


def _ollama_body(status: int) -> dict[str, Any]:
    return {"error": f"{reason(status)} (ssetape fault)"}


def _cohere_mid_stream(before: Sequence[bytes]) -> bytes:
    """Cohere v2's ``message-end`` with finish_reason ERROR (the stream's own failure)."""
    obj = {"type": "message-end", "delta": {"finish_reason": "ERROR"}}
    return _sse(obj, "message-end", before)


def _cohere_body(status: int) -> dict[str, Any]:
    return {"message": f"{reason(status)} (ssetape fault)"}


def _interactions_mid_stream(before: Sequence[bytes]) -> bytes:
    """The Interactions API's ``error`` event, with a Google error inside."""
    error = _google_body(500)["error"]
    obj = {"event_type": "error", "error": {"code": error["status"], "message": error["message"]}}
    return _sse(obj, "error", before)


def _openai_body(status: int) -> dict[str, Any]:
    if status == 429:
        message = "Rate limit reached for requests. Please try again later."
        return {"error": {"message": message, "type": "requests", "param": None,
                          "code": "rate_limit_exceeded"}}  # fmt: skip
    message = "The server is overloaded or not ready yet." if status == 503 else OPENAI_FAILURE
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _anthropic_body(status: int) -> dict[str, Any]:
    kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    message = "Overloaded" if kind == "overloaded_error" else f"{reason(status)} (ssetape fault)"
    return {"type": "error", "error": {"type": kind, "message": message}}


def _google_body(status: int) -> dict[str, Any]:
    message = GOOGLE_FAILURE if status == 500 else f"{reason(status)} (ssetape fault)"
    return {"error": {"code": status, "message": message, "status": _GOOGLE_STATUS.get(status,
            "UNKNOWN")}}  # fmt: skip


ERRORS: dict[str, ProviderErrors] = {
    "chat_completions": ProviderErrors(_chat_mid_stream, _openai_body),
    "responses": ProviderErrors(_responses_mid_stream, _openai_body),
    "messages": ProviderErrors(_messages_mid_stream, _anthropic_body),
    "images": ProviderErrors(_images_mid_stream, _openai_body),
    "gemini": ProviderErrors(_gemini_mid_stream, _google_body),
    "bedrock_converse": ProviderErrors(_bedrock_mid_stream, _bedrock_body),
    "bedrock_invoke": ProviderErrors(_bedrock_mid_stream, _bedrock_body),
    "ollama": ProviderErrors(_ollama_mid_stream, _ollama_body),
    "cohere_chat": ProviderErrors(_cohere_mid_stream, _cohere_body),
    "interactions": ProviderErrors(_interactions_mid_stream, _google_body),
}


def errors_for(api: str | None) -> ProviderErrors:
    """The API's errors; OpenAI's for an API the registry does not know."""
    return ERRORS.get(api or "", ERRORS["chat_completions"])
