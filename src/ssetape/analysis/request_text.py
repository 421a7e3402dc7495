"""A request's prompt as text: what `list --grep`, the viewer's ``q=`` and MCP search besides
the output.

Read from the request body as the store holds it (redacted already; a body over
``vocabulary.MAX_BODY`` is not stored, and has no text here). Each API names the top-level
fields its prompt is in (:data:`PROMPT_FIELDS`); in them, strings are taken, and of objects
only their ``text``, ``content``, ``parts`` and ``message``: the text parts of every message,
system prompt and instruction, and never an image's base64, a file, a tool's schema or a
call's arguments (none of which those keys hold). An API not listed has no prompt text.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_PROMPT_BYTES", "PROMPT_FIELDS", "SESSION_PROMPTS", "request_text", "session_text"]

# Where each API's prompt is (ssetape.analysis.apis names the APIs), system prompt first.
PROMPT_FIELDS: dict[str, tuple[str, ...]] = {
    # messages[].content: a string, or parts ({"type": "text", "text": ...}).
    "chat_completions": ("messages",),
    # instructions; input: a string, or items whose content is a string or input_text parts.
    "responses": ("instructions", "input"),
    # system: a string or text blocks; messages[].content: a string or blocks (a tool_result
    # block's content too).
    "messages": ("system", "messages"),
    # systemInstruction and contents[]: Content objects, {"parts": [{"text": ...}]}.
    "gemini": ("systemInstruction", "system_instruction", "contents"),
    # system_instruction: a string; input: a string, content parts, or turns of them.
    "interactions": ("system_instruction", "input"),
    # v2: messages[].content; v1: preamble, message, chat_history[].message.
    "cohere_chat": ("preamble", "message", "chat_history", "messages"),
    # /api/generate: system, prompt; /api/chat: messages[].content (images apart, unread).
    "ollama": ("system", "prompt", "messages"),
    # system: [{"text": ...}]; messages[].content: [{"text": ...}, {"image": ...}].
    "bedrock_converse": ("system", "messages"),
    # The model's own body: Anthropic's, Nova's, Titan's inputText, Llama's or Mistral's
    # prompt, Cohere's message.
    "bedrock_invoke": ("system", "messages", "prompt", "inputText", "message", "chat_history"),
    "images": ("prompt",),
}
# A WebSocket session's prompt is in its client frames: by API (ssetape.analysis.sessions),
# by client event, the paths to read (each read as a request's fields are).
SESSION_PROMPTS: dict[str, dict[str, tuple[tuple[str, ...], ...]]] = {
    # session.instructions; an item's content parts (input_text); a response's own
    # instructions and input items.
    "openai_realtime": {
        "session.update": (("session", "instructions"),),
        "conversation.item.create": (("item",),),
        "response.create": (("response", "instructions"), ("response", "input")),
    },
    # Responses WebSocket mode: response.create carries the create body's fields.
    "responses": {
        "response.create": (
            ("instructions",),
            ("input",),
            ("response", "instructions"),
            ("response", "input"),
        ),
    },
    # setup.systemInstruction (a Content); clientContent.turns (Contents); realtimeInput.text.
    "gemini_live": {
        "setup": (("setup", "systemInstruction"), ("setup", "system_instruction")),
        "clientContent": (("clientContent", "turns"),),
        "client_content": (("client_content", "turns"),),
        "realtimeInput": (("realtimeInput", "text"),),
        "realtime_input": (("realtime_input", "text"),),
    },
}
# What is read of an object inside those fields.
_TEXT_KEYS = ("text", "content", "parts", "message")
# Nesting read: messages > content > a tool_result block > its content > text is five.
_DEPTH = 8
# Bytes (UTF-8) of a request's text kept. Every byte costs the text index (a trigram entry
# for each) and each list row that shows a match reads around it; 64 KiB holds a long prompt
# whole. Past it, the start and the end are kept: an agent's call sends its whole history
# again, so what names the task (system prompt, first turns) is at the start and what is new
# in this call (the latest turn) at the end.
MAX_PROMPT_BYTES = 64 << 10
_HEAD = 16 << 10
_CUT = "\n…\n"
_TAIL = MAX_PROMPT_BYTES - _HEAD - len(_CUT.encode())


def request_text(api: str, request: object) -> str | None:
    """The prompt text of a request of ``api`` (its body, parsed JSON), its pieces one a
    line, at most MAX_PROMPT_BYTES; None when it has none."""
    fields = PROMPT_FIELDS.get(api)
    if fields is None or not isinstance(request, dict):
        return None
    pieces: list[str] = []
    for name in fields:
        _collect(request.get(name), pieces, _DEPTH)
    text = "\n".join(p for p in pieces if p)
    return _bounded(text) if text else None


def session_text(api: str, kind: str, message: dict[str, Any], out: list[str]) -> None:
    """Appends to ``out`` the prompt text of one client frame of a session of ``api``
    (its event ``kind``, its payload parsed); the session's text is :func:`bounded` of
    them, one a line."""
    for path in SESSION_PROMPTS.get(api, {}).get(kind, ()):
        value: Any = message
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        _collect(value, out, _DEPTH)


def bounded(text: str) -> str | None:
    """``text`` as stored: at most MAX_PROMPT_BYTES (its start and end); None if empty."""
    return _bounded(text) if text else None


def _collect(value: Any, out: list[str], depth: int) -> None:
    if isinstance(value, str):
        out.append(value)
    elif depth <= 0:
        return
    elif isinstance(value, list):
        for item in value:
            _collect(item, out, depth - 1)
    elif isinstance(value, dict):
        for key in _TEXT_KEYS:
            if key in value:
                _collect(value[key], out, depth - 1)


def _bounded(text: str) -> str:
    """``text`` cut to MAX_PROMPT_BYTES as its start and end, each cut between characters
    (a byte cut inside one is dropped by the decode)."""
    if len(text) <= MAX_PROMPT_BYTES // 4:  # 4 bytes a character at most: no need to look
        return text
    raw = text.encode()
    if len(raw) <= MAX_PROMPT_BYTES:
        return text
    head = raw[:_HEAD].decode("utf-8", "ignore")
    tail = raw[-_TAIL:].decode("utf-8", "ignore")
    return f"{head}{_CUT}{tail}"
