"""Rule sets per provider: what each one sends, so findings are as true as the outcome.

The same API is spoken differently by different hosts. The gateway ssetape was first built
for documents a narrow Responses vocabulary and lists events it never sends; OpenAI itself
sends all of those (background mode, web-search citations, reasoning summaries), follows an
``error`` event with ``response.failed``, and OpenRouter ends Responses streams with
``data: [DONE]``. A finding that is false for a provider teaches its reader to ignore findings,
so each exchange is read under the profile of its host (:func:`profile_for`), which a user can
override per host (``--profile HOST=NAME``, ``ssetape_profile``, the pytest marker).

Adding a provider is one :class:`Profile` in :data:`PROFILES` (and its hosts); the rule modules
read only the profile's fields, never its name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "DEFAULT_PROFILE",
    "PROFILES",
    "Profile",
    "override_for",
    "parse_profile_overrides",
    "profile_for",
    "profile_names",
    "profile_or_none",
]

# The Responses stream events of the official openai SDK's ``ResponseStreamEvent`` union
# (openai-python ``types/responses/response_stream_event.py``): OpenAI's documented vocabulary.
# fmt: off
OPENAI_RESPONSES_EVENTS = frozenset({
    "error", "response.audio.delta", "response.audio.done", "response.audio.transcript.delta",
    "response.audio.transcript.done", "response.code_interpreter_call.completed",
    "response.code_interpreter_call.in_progress", "response.code_interpreter_call.interpreting",
    "response.code_interpreter_call_code.delta", "response.code_interpreter_call_code.done",
    "response.completed", "response.content_part.added", "response.content_part.done",
    "response.created", "response.custom_tool_call_input.delta",
    "response.custom_tool_call_input.done", "response.failed",
    "response.file_search_call.completed", "response.file_search_call.in_progress",
    "response.file_search_call.searching", "response.function_call_arguments.delta",
    "response.function_call_arguments.done", "response.image_generation_call.completed",
    "response.image_generation_call.generating", "response.image_generation_call.in_progress",
    "response.image_generation_call.partial_image", "response.in_progress",
    "response.incomplete", "response.mcp_call.completed", "response.mcp_call.failed",
    "response.mcp_call.in_progress", "response.mcp_call_arguments.delta",
    "response.mcp_call_arguments.done", "response.mcp_list_tools.completed",
    "response.mcp_list_tools.failed", "response.mcp_list_tools.in_progress",
    "response.output_item.added", "response.output_item.done",
    "response.output_text.annotation.added", "response.output_text.delta",
    "response.output_text.done", "response.queued", "response.reasoning_summary_part.added",
    "response.reasoning_summary_part.done", "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done", "response.reasoning_text.delta",
    "response.reasoning_text.done", "response.refusal.delta", "response.refusal.done",
    "response.web_search_call.completed", "response.web_search_call.in_progress",
    "response.web_search_call.searching",
})
# The seed gateway's "Stream events" document, as written.
SEED_RESPONSES_EVENTS = frozenset({
    "response.created", "response.in_progress", "response.output_item.added",
    "response.content_part.added", "response.output_text.delta", "response.output_text.done",
    "response.refusal.delta", "response.refusal.done", "response.function_call_arguments.delta",
    "response.function_call_arguments.done", "response.reasoning_text.delta",
    "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
    "response.completed", "response.failed", "response.incomplete", "error",
})
# fmt: on
# The seed gateway's "Events that never arrive": what to read instead.
SEED_NEVER_SENT = MappingProxyType(
    {
        "response.queued": "Streams open with response.created and response.in_progress; "
        "read response.created as the start.",
        "response.output_text.annotation.added": "Output text is not annotated here; "
        "annotations on a text part is always empty.",
        "response.reasoning_summary_part.added": "Reasoning is not summarized; "
        "the reasoning item opens with response.output_item.added.",
        "response.reasoning_summary_part.done": "Reasoning is not summarized; "
        "the reasoning item closes with response.output_item.done.",
        "response.reasoning_summary_text.delta": "Reasoning is not summarized; "
        "the reasoning streams on response.reasoning_text.delta.",
        "response.reasoning_summary_text.done": "Reasoning is not summarized; "
        "the complete reasoning arrives on response.reasoning_text.done.",
    }
)
# Anthropic's content_block_delta types (the anthropic SDK's ``RawContentBlockDelta``) and the
# seed gateway's subset.
ANTHROPIC_DELTAS = frozenset(
    {
        "text_delta",
        "input_json_delta",
        "citations_delta",
        "thinking_delta",
        "signature_delta",
        "compaction_delta",
    }
)
SEED_DELTAS = frozenset({"text_delta", "input_json_delta", "thinking_delta", "signature_delta"})
# Gemini enums sent as numbers (proto3 JSON with ``enum-encoding=int``, as Google's GAPIC REST
# clients ask for): the values both Google protos share, Vertex AI's and the Gemini API's.
GEMINI_FINISH_CODES = MappingProxyType(
    dict(
        enumerate(
            ("FINISH_REASON_UNSPECIFIED", "STOP", "MAX_TOKENS", "SAFETY", "RECITATION", "OTHER")
        )
    )
)
GEMINI_BLOCK_CODES = MappingProxyType(
    dict(enumerate(("BLOCKED_REASON_UNSPECIFIED", "SAFETY", "OTHER")))
)
# Vertex AI's own numbering past those (google/cloud/aiplatform/v1/content.proto
# Candidate.FinishReason, prediction_service.proto PromptFeedback.BlockedReason); the Gemini
# API's proto numbers the same names differently, so these are read under Vertex's profile only.
VERTEX_FINISH_CODES = MappingProxyType(
    {
        **GEMINI_FINISH_CODES,
        6: "BLOCKLIST",
        7: "PROHIBITED_CONTENT",
        8: "SPII",
        9: "MALFORMED_FUNCTION_CALL",
        10: "MODEL_ARMOR",
        11: "IMAGE_SAFETY",
        12: "IMAGE_PROHIBITED_CONTENT",
        13: "IMAGE_RECITATION",
        14: "IMAGE_OTHER",
        15: "UNEXPECTED_TOOL_CALL",
        16: "NO_IMAGE",
    }
)
VERTEX_BLOCK_CODES = MappingProxyType(
    {**GEMINI_BLOCK_CODES, 3: "BLOCKLIST", 4: "PROHIBITED_CONTENT"}
)


@dataclass(frozen=True, slots=True)
class Profile:
    """What one provider sends; the rule modules read these fields."""

    # Who each is for is the README's table ("Providers and their profiles").
    name: str
    # Hosts chosen by default: an exact name, or a suffix starting with "." (a whole domain).
    hosts: tuple[str, ...] = ()
    responses_events: frozenset[str] = OPENAI_RESPONSES_EVENTS
    # Events the provider declares but never sends: a finding with what to read instead.
    never_sent: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # An ``error`` event is followed by ``response.failed`` (OpenAI); else it is the terminal.
    error_then_failed: bool = True
    # ``data: [DONE]`` may close a Responses stream after its terminal (OpenRouter).
    responses_done: bool = False
    # ``event: error`` carries a chat stream's failure (Groq; the openai SDK raises on it).
    chat_error_event: bool = True
    messages_deltas: frozenset[str] = ANTHROPIC_DELTAS
    # Names of Gemini's finishReason and blockReason when sent as numbers.
    # (factories: Python 3.11's dataclasses refuse a mappingproxy as a plain default)
    gemini_finish_codes: Mapping[int, str] = field(default_factory=lambda: GEMINI_FINISH_CODES)
    gemini_block_codes: Mapping[int, str] = field(default_factory=lambda: GEMINI_BLOCK_CODES)


PROFILES: Mapping[str, Profile] = MappingProxyType(
    {
        p.name: p
        for p in (
            Profile(
                "openai",
                hosts=("api.openai.com", ".openai.azure.com", ".cognitiveservices.azure.com"),
            ),
            Profile("anthropic", hosts=("api.anthropic.com",)),
            # Vertex AI: regional hosts (us-central1-aiplatform...) and the global one.
            Profile(
                "vertex",
                hosts=("aiplatform.googleapis.com", "*-aiplatform.googleapis.com"),
                gemini_finish_codes=VERTEX_FINISH_CODES,
                gemini_block_codes=VERTEX_BLOCK_CODES,
            ),
            Profile("openrouter", hosts=("openrouter.ai",), responses_done=True),
            # Groq, DeepSeek, Together, Fireworks by name; vLLM, Ollama and any gateway as
            # the default (DEFAULT_PROFILE).
            Profile(
                "compatible",
                hosts=("api.groq.com", "api.deepseek.com", "api.together.xyz", "api.fireworks.ai"),
                responses_done=True,
            ),
            Profile(
                "seed",
                responses_events=SEED_RESPONSES_EVENTS,
                never_sent=SEED_NEVER_SENT,
                error_then_failed=False,
                chat_error_event=False,
                messages_deltas=SEED_DELTAS,
            ),
        )
    }
)
# A host nothing names is read leniently: the vendors' whole vocabularies, their framing quirks
# tolerated, so an unknown gateway gets findings only for what no provider does.
DEFAULT_PROFILE = "compatible"


def profile_names() -> list[str]:
    return list(PROFILES)


def profile_for(
    host: str | None, overrides: Mapping[str, str] | None = None, port: int | None = None
) -> Profile:
    """The profile of a host: the user's override, else the profile naming it, else the default."""
    found = override_for(host, overrides or {}, port)
    if found is not None:
        return found
    name = _match(_host(host), None, ((h, p.name) for p in PROFILES.values() for h in p.hosts))
    return PROFILES[name or DEFAULT_PROFILE]


def override_for(
    host: str | None, overrides: Mapping[str, str], port: int | None = None
) -> Profile | None:
    """The profile the user named for a host (and ``port``), if any. Keys are as
    :func:`parse_profile_overrides` leaves them; the most specific match wins."""
    name = _match(_host(host), port, overrides.items()) if overrides else None
    return None if name is None else PROFILES[name]


def _host(host: str | None) -> str:
    return (host or "").lower().rstrip(".")


def profile_or_none(name: object) -> Profile | None:
    """A stored or sent profile name, if this version knows it (a newer one may not)."""
    return PROFILES.get(name) if isinstance(name, str) else None


def _match(host: str, port: int | None, pairs: Iterable[tuple[str, str]]) -> str | None:
    """The name of the most specific pattern matching: one with a port beats one without, a
    longer host a shorter one. A pattern is ``name``, ``.domain`` (its hosts and itself),
    either with ``:port``."""
    best: tuple[bool, int, str] | None = None
    for key, name in pairs:
        pattern, wanted = _split(key.lower())
        if wanted is not None and wanted != port:
            continue
        hit = host == pattern.lstrip(".") or (pattern.startswith(".") and host.endswith(pattern))
        # A profile's own "*-name" host: any host ending so (regional endpoints); user
        # patterns never hold a "*" (_pattern refuses it), so this is for built-in hosts only.
        hit = hit or (pattern.startswith("*") and host.endswith(pattern[1:]))
        if hit and (best is None or (wanted is not None, len(pattern)) > best[:2]):
            best = (wanted is not None, len(pattern), name)
    return None if best is None else best[2]


def _split(key: str) -> tuple[str, int | None]:
    """``host[:port]`` (``[v6]:port``, a bare IPv6 address) as host and port; a port that is
    not a number is -1, which no request has."""
    if key.startswith("["):
        host, _, rest = key[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else None
    elif key.count(":") > 1:
        return key, None
    else:
        host, colon, port = key.partition(":")
        port = port if colon else None
    if port is None:
        return host, None
    return host, int(port) if port.isdigit() and len(port) < 6 else -1


_FORMS = "HOST, .DOMAIN or *.DOMAIN, each optionally with :PORT"


def _pattern(value: str, key: str) -> str:
    """A ``HOST=NAME`` key as :func:`_match` reads it: ``*.`` written as ``.``, no trailing
    dot, a port checked; anything else that could never match is refused."""
    name, port = _split(key)
    if port is not None and not 0 < port <= 65535:
        raise ValueError(f"profile {value!r}: {key!r} has no valid port (expected {_FORMS})")
    name = "." + name[2:] if name.startswith("*.") else name
    name = name.rstrip(".") if name not in (".", "") else name
    bare = name.lstrip(".")
    if not bare or name.startswith("..") or any(c in bare for c in "*/?#@[] \t"):
        raise ValueError(f"profile {value!r}: {key!r} names no host (expected {_FORMS})")
    if port is None:
        return name
    return f"[{name}]:{port}" if ":" in name else f"{name}:{port}"


def parse_profile_overrides(values: Iterable[str]) -> dict[str, str]:
    """``HOST=NAME`` strings into a mapping; raises ValueError naming what is wrong."""
    out: dict[str, str] = {}
    for value in values:
        host, sep, name = value.partition("=")
        host, name = host.strip().lower(), name.strip()
        if not sep or not host or not name:
            raise ValueError(f"profile {value!r}: expected HOST=NAME")
        if name not in PROFILES:
            raise ValueError(
                f"profile {value!r}: unknown profile {name!r} (one of {', '.join(PROFILES)})"
            )
        out[_pattern(value, host)] = name
    return out
