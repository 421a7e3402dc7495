"""Gemini's Live API (``BidiGenerateContent``), read one message at a time.

Every message is a JSON object, sent in a binary or a text frame, named by its one member
(google-genai's ``LiveServerMessage`` and ``LiveClientMessage``). The client's first frame is
``setup`` (its ``model``); ``clientContent`` and ``toolResponse`` (``client_content`` and
``tool_response`` as google-genai sends them) ask for a turn, which the server streams as
``serverContent.modelTurn.parts[]`` and ends with ``turnComplete`` (or ``interrupted``).
``usageMetadata`` is summed over the session. Errors arrive as close codes, read by the
session analysis from how the session ended.
"""

from __future__ import annotations

from ssetape.analysis.rules.payload import as_dict, as_str
from ssetape.analysis.session_rules import Payload, Session, SessionRules

__all__ = ["RULES"]

# google-genai names its client messages by their proto field names (``client_content``,
# ``tool_response``), which the API takes as it takes the JSON names.
_ASKS = frozenset({"clientContent", "toolResponse", "client_content", "tool_response"})
# Server messages that say nothing the analysis keeps (usageMetadata may ride along any).
_OTHER = frozenset(
    {
        "setupComplete", "toolCallCancellation", "goAway", "sessionResumptionUpdate",
        "voiceActivityDetectionSignal", "voiceActivity", "usageMetadata",
    }
)  # fmt: skip


def _kind(obj: Payload) -> str | None:
    return next((k for k in obj if k != "usageMetadata"), "usageMetadata" if obj else None)


def _client(s: Session, kind: str, obj: Payload) -> None:
    if kind == "setup" and s.model_asked is None:
        model = as_str(as_dict(obj.get("setup")).get("model"))
        s.model_asked = model.removeprefix("models/") or None
    elif kind in _ASKS:
        s.ask()


def _server(s: Session, kind: str, obj: Payload) -> None:
    usage = as_dict(obj.get("usageMetadata"))
    if usage:
        s.add_usage(
            usage.get("promptTokenCount"),
            usage.get("responseTokenCount", usage.get("candidatesTokenCount")),
            usage.get("totalTokenCount"),
            cached=usage.get("cachedContentTokenCount"),
            reasoning=usage.get("thoughtsTokenCount"),
        )
    if kind == "serverContent":
        _content(s, as_dict(obj.get("serverContent")))
    elif kind == "toolCall":
        s.content()  # the model's output, as a tool call's arguments are in a stream
    elif kind not in _OTHER:
        s.tally.unknown(s.seq, kind)


def _content(s: Session, content: Payload) -> None:
    carried = False
    parts = as_dict(content.get("modelTurn")).get("parts")
    for part in parts if isinstance(parts, list) else ():
        part = as_dict(part)
        if isinstance(part.get("text"), str) and not part.get("thought"):
            s.tally.text.append(part["text"])
            carried = True
        elif isinstance(part.get("text"), str):
            s.tally.reasoning.append(part["text"])
            carried = True
        elif "inlineData" in part:
            s.audio(as_dict(part["inlineData"]).get("data"))
            carried = True
    transcript = as_dict(content.get("outputTranscription")).get("text")
    if isinstance(transcript, str) and transcript:
        s.tally.text.append(transcript)
        carried = True
    if carried:
        s.content()
    if content.get("turnComplete") is True or content.get("interrupted") is True:
        s.end_turn()


RULES = SessionRules(
    name="gemini_live",
    paths=("BidiGenerateContent", "BidiGenerateContentConstrained"),
    client=_client,
    server=_server,
    kind=_kind,
    claims=lambda kind: kind == "setupComplete",
)
