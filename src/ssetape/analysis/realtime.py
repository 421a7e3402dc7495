"""OpenAI's Realtime API and the Responses API's WebSocket mode, read one message at a time.

Realtime (``/v1/realtime?model=M``): the GA event names (openai's
``types/realtime/realtime_server_event.py``), or the beta names when the client sent
``OpenAI-Beta: realtime=v1``. A turn runs from ``response.created`` to ``response.done``,
whose ``response.usage`` is summed over the session and whose ``response.status`` says how
the response went. Text and transcript deltas are the output text; audio deltas are counted
and timed, never decoded.

Responses WebSocket mode (``/v1/responses``): every server message is a Responses SSE event,
so each response is read by the HTTP Responses rules (:mod:`ssetape.analysis.rules.responses`)
into a tally of its own, summed into the session's at its terminal. A ``response.create`` with
a ``stream_id`` runs in that lane, whose events echo it, and lanes run at once: their events
interleave on the socket. Each lane keeps its own response state (the frame that asked, the
turn so far, its last content), so a response's text, TTFT and gaps are its own: a response's
text joins the session's transcript whole at its terminal, and until then the session
analysis reads it from :func:`unfinished` (a session cut mid-response keeps every lane's).
"""

from __future__ import annotations

import weakref

from ssetape.analysis.rules import responses
from ssetape.analysis.rules.payload import as_dict, as_str
from ssetape.analysis.session_rules import Payload, Session, SessionRules
from ssetape.analysis.tally import Tally
from ssetape.vocabulary import Outcome

__all__ = ["RESPONSES_WS", "RULES", "unfinished"]

_ASKS = frozenset({"response.create"})
_TEXT = frozenset({"response.output_text.delta", "response.output_audio_transcript.delta"})
_BETA_TEXT = frozenset({"response.text.delta", "response.audio_transcript.delta"})
_AUDIO, _BETA_AUDIO = "response.output_audio.delta", "response.audio.delta"
_ARGUMENTS = "response.function_call_arguments.delta"  # a tool call's arguments: content
# The GA server events that say nothing the analysis keeps.
_OTHER = frozenset(
    {
        "conversation.created", "conversation.item.added", "conversation.item.created",
        "conversation.item.deleted", "conversation.item.done", "conversation.item.retrieved",
        "conversation.item.truncated", "conversation.item.input_audio_transcription.completed",
        "conversation.item.input_audio_transcription.delta",
        "conversation.item.input_audio_transcription.failed",
        "conversation.item.input_audio_transcription.segment", "input_audio_buffer.cleared",
        "input_audio_buffer.committed", "input_audio_buffer.dtmf_event_received",
        "input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
        "input_audio_buffer.timeout_triggered", "mcp_list_tools.completed",
        "mcp_list_tools.failed", "mcp_list_tools.in_progress", "output_audio_buffer.cleared",
        "output_audio_buffer.started", "output_audio_buffer.stopped", "rate_limits.updated",
        "response.content_part.added", "response.content_part.done",
        "response.function_call_arguments.done", "response.mcp_call.completed",
        "response.mcp_call.failed", "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta", "response.mcp_call_arguments.done",
        "response.output_audio.done", "response.output_audio_transcript.done",
        "response.output_item.added", "response.output_item.done", "response.output_text.done",
    }
)  # fmt: skip
# The beta's renames (and its events the GA dropped).
_BETA_OTHER = (
    _OTHER
    - {"response.output_audio.done", "response.output_audio_transcript.done",
       "response.output_text.done", "conversation.item.added", "conversation.item.done"}
) | {
    "response.audio.done", "response.audio_transcript.done", "response.text.done",
    "transcription_session.updated",
}  # fmt: skip


def _kind(obj: Payload) -> str | None:
    kind = obj.get("type")
    return kind if isinstance(kind, str) and kind else None


def _client(s: Session, kind: str, obj: Payload) -> None:
    if kind in _ASKS:
        s.ask()


def _server(s: Session, kind: str, obj: Payload) -> None:
    t = s.tally
    text, audio = (_BETA_TEXT, _BETA_AUDIO) if s.beta else (_TEXT, _AUDIO)
    if kind in text:
        delta = obj.get("delta")
        if isinstance(delta, str):
            t.text.append(delta)
        s.content()
    elif kind == audio:
        s.audio(obj.get("delta"))
        s.content()
    elif kind == _ARGUMENTS:
        s.content()
    elif kind in ("session.created", "session.updated"):
        t.set_model(as_dict(obj.get("session")).get("model"))
    elif kind == "response.created":
        s.begin_turn()
    elif kind == "response.done":
        _done(s, as_dict(obj.get("response")))
    elif kind == "error":
        s.server_error(Tally.error_reason(obj.get("error")))
    elif kind not in (_BETA_OTHER if s.beta else _OTHER):
        t.unknown(s.seq, kind)


def _done(s: Session, response: Payload) -> None:
    usage = as_dict(response.get("usage"))
    if usage:
        details = as_dict(usage.get("input_token_details"))
        s.add_usage(
            usage.get("input_tokens"), usage.get("output_tokens"), usage.get("total_tokens"),
            cached=details.get("cached_tokens"),
        )  # fmt: skip
    if response.get("status") == "failed":
        status = as_dict(response.get("status_details"))
        s.server_error(Tally.error_reason(status.get("error")) or "failed")
    s.end_turn()


def _beta(headers: dict[str, str]) -> bool:
    return "realtime=v1" in headers.get("openai-beta", "").replace(" ", "")


RULES = SessionRules(
    name="openai_realtime",
    paths=("/realtime",),
    client=_client,
    server=_server,
    kind=_kind,
    claims=lambda kind: kind == "session.created",
    beta=_beta,
)


# A lane's response state, while another lane's is the session's: (asked, in_turn, last, turn).
_LaneState = tuple[int | None, bool, int | None, Tally | None]


class _Lanes:
    """The lanes of one session: which one the session's response state is, the others',
    and the responses begun and not ended yet, in the order they began."""

    def __init__(self) -> None:
        self.current: str | None = None
        self.parked: dict[str | None, _LaneState] = {}
        self.open: dict[int, Tally] = {}  # by id()


# Every Responses WebSocket session gets an entry as its first message is read; it goes with
# its session (the rules' only state is the Session, which keeps no lanes).
_LANES: weakref.WeakKeyDictionary[Session, _Lanes] = weakref.WeakKeyDictionary()


def _lanes(s: Session) -> _Lanes:
    lanes = _LANES.get(s)
    if lanes is None:
        lanes = _LANES[s] = _Lanes()
    return lanes


def unfinished(s: Session) -> list[Tally]:
    """The responses of a Responses WebSocket session begun and not ended, lane by lane in
    the order they began (none for any other API): their text is the session's so far."""
    lanes = _LANES.get(s)
    return [] if lanes is None else list(lanes.open.values())


def _enter_lane(s: Session, obj: Payload) -> _Lanes:
    """Make the lane of message ``obj`` (its ``stream_id``; none: the default lane) the one
    the session's response state is."""
    lane = obj.get("stream_id")
    key = lane if isinstance(lane, str) else None
    lanes = _lanes(s)
    if key == lanes.current:
        return lanes
    lanes.parked[lanes.current] = (s.asked, s.in_turn, s.last, s.turn)
    s.asked, s.in_turn, s.last, s.turn = lanes.parked.pop(key, (None, False, None, None))
    lanes.current = key
    return lanes


def _responses_client(s: Session, kind: str, obj: Payload) -> None:
    if kind in _ASKS:
        _enter_lane(s, obj)
        s.ask()
        if s.model_asked is None:
            s.model_asked = as_str(obj.get("model")) or None


def _responses_server(s: Session, kind: str, obj: Payload) -> None:
    lanes = _enter_lane(s, obj)
    turn = s.turn
    if turn is None:
        s.turn = turn = Tally(responses.RULES.name, s.tally.profile)
        lanes.open[id(turn)] = turn
        s.begin_turn()
    if responses.RULES.event(turn, s.seq, kind, obj):
        s.content()
    t = s.tally
    t.set_model(turn.model)  # response.created names it: a session cut mid-response has it
    if turn.closed:  # its terminal: its knowledge joins the session's
        lanes.open.pop(id(turn), None)
        t.text += turn.text
        t.reasoning += turn.reasoning
        for f in turn.findings:
            t.add(f.code, f.event_seq, f.detail)
        if turn.usage_seen:
            s.add_usage(
                turn.input_tokens, turn.output_tokens, turn.total_tokens,
                cached=turn.cache_read_tokens, reasoning=turn.reasoning_tokens,
            )  # fmt: skip
        if turn.outcome in (Outcome.ERROR, Outcome.UNRESOLVED):
            s.server_error(turn.reason)
        s.turn = None
        s.end_turn()


RESPONSES_WS = SessionRules(
    name=responses.RULES.name,
    paths=responses.RULES.paths,
    client=_responses_client,
    server=_responses_server,
    kind=_kind,
    claims=lambda kind: kind == "response.created",
)
