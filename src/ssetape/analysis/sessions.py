"""What a recorded WebSocket session said and how it ended: the analysis of one session.

:class:`SessionAnalyzer` is fed every stored message of a session (``events`` rows with a
direction) and gives the same :class:`~ssetape.analysis.analyzer.Analysis` an HTTP exchange's
analysis gives, so every surface reads sessions as it reads streams. What each API's
messages mean is in its module, listed in :data:`SESSION_APIS` (picked by the upgrade path,
else by the first server message). The output (text, TTFT, gaps) is read from server
messages only; client messages only ask (TTFT counts from the one that asked) and name the
model. The recording process runs it as the session goes by (``LiveAnalysis``);
`ssetape reindex` runs it on the stored rows.

How a session ended: a connection cut without a close frame is ``cut`` (by the server) or
``aborted`` (by the client); a server close other than 1000/1001 is ``error`` with its code
and reason; else an ``error`` the server sent (event, failed response) makes it ``error``;
else it ``completed``, whoever closed.

The transcript (output and reasoning text) is one response a line (:data:`TURN_SEPARATOR`),
in the order they ended, then what the responses still open said so far: the current one's,
and each Responses WebSocket lane's (:func:`~ssetape.analysis.realtime.unfinished`), so a
session cut or still going keeps every lane's text.
"""

from __future__ import annotations

from array import array
from typing import Any
from urllib.parse import parse_qs

import orjson

from ssetape.analysis import gemini_live, realtime
from ssetape.analysis.analyzer import Analysis, gap_figures
from ssetape.analysis.apis import UNKNOWN
from ssetape.analysis.ending import TRANSPORT_OUTCOMES
from ssetape.analysis.fault import fault_of
from ssetape.analysis.findings import UNMODELLED, Finding, FindingCode
from ssetape.analysis.profiles import DEFAULT_PROFILE, PROFILES, Profile
from ssetape.analysis.request_text import MAX_PROMPT_BYTES, bounded, session_text
from ssetape.analysis.session_rules import Session, SessionRules, close_of
from ssetape.vocabulary import Direction, ExchangeState, Outcome

__all__ = ["SESSION_APIS", "TURN_SEPARATOR", "SessionAnalyzer", "TextSession", "session_rules"]

SESSION_APIS: dict[str, SessionRules] = {
    r.name: r for r in (realtime.RULES, realtime.RESPONSES_WS, gemini_live.RULES)
}
CUT = "connection closed without a WebSocket close frame"
# Between two responses' texts in a session's transcript, and two asks in its prompt text: two
# answers "Hello there!" read as two lines, not as one "Hello there!Hello there!".
TURN_SEPARATOR = "\n"
_TTFTS = 1000  # per-response TTFTs kept in details, at most


def session_rules(path: str) -> SessionRules | None:
    """The API of an upgrade request path, by suffix (gateway prefixes work)."""
    bare = path.split("?", 1)[0].rstrip("/")
    return next((r for r in SESSION_APIS.values() if bare.endswith(r.paths)), None)


class TextSession(Session):
    """A session's running state that keeps its transcript response by response: the rules
    write a response's text into ``tally.text`` (and ``reasoning``) as it streams, and each
    response that ends moves its text here, whole (a response with no text adds nothing)."""

    def __init__(self, api: str, profile: Profile, *, beta: bool = False) -> None:
        super().__init__(api, profile, beta=beta)
        self.said: list[str] = []  # the texts of the responses ended
        self.reasoned: list[str] = []

    def end_turn(self) -> None:
        super().end_turn()
        t = self.tally
        for pieces, ended in ((t.text, self.said), (t.reasoning, self.reasoned)):
            if pieces:
                ended.append("".join(pieces))
                pieces.clear()


class SessionAnalyzer:
    """Analyse one session: construct, :meth:`message` each stored message, :meth:`finish`.

    It stands in for an HTTP exchange's ``Analyzer`` in ``LiveAnalysis`` (``answered``,
    ``feed_row``, ``finish``, ``content_offsets``)."""

    def __init__(
        self,
        *,
        path: str,
        query: str | None,
        request_headers: list[list[str]] | None,
        profile: Profile | str | None = None,
    ) -> None:
        if isinstance(profile, str):
            profile = PROFILES[profile]
        self.profile = profile or PROFILES[DEFAULT_PROFILE]
        self._headers = {str(k).lower(): str(v) for k, v in request_headers or ()}
        self._rules = session_rules(path)
        self._session = self._begin(self._rules)
        asked = parse_qs(query or "").get("model")
        self._session.model_asked = asked[0] if asked else None
        # The metrics' gaps are taken between consecutive offsets, which would span the
        # silence between turns: a session gives them none (its figures hold its gaps).
        self.content_offsets = array("q")
        # What the client frames asked (search by prompt), kept bounded as it grows: a
        # session of hours sends its instructions and turns again and again.
        self._prompt: list[str] = []
        self._prompt_chars = 0

    def _begin(self, rules: SessionRules | None) -> TextSession:
        beta = rules is not None and rules.beta(self._headers)
        return TextSession(rules.name if rules else UNKNOWN, self.profile, beta=beta)

    def answered(self, status: object) -> None:
        """A session's only status is its 101."""

    def feed_row(self, *row: Any) -> None:
        """A session's messages come through :meth:`message`, never as a stream's rows."""

    def message(self, seq: int, offset_us: int, direction: str | None, data: str | None) -> None:
        """One stored message: ``data`` its payload as text (None: binary, not UTF-8)."""
        try:
            self._message(seq, offset_us, direction, data)
        except Exception as exc:  # a bug of ours on one message costs only that one
            detail = f"{type(exc).__name__}: {exc}"[:300]
            self._session.tally.add(FindingCode.ANALYZER_ERROR, seq, detail)

    def _message(self, seq: int, offset_us: int, direction: str | None, data: str | None) -> None:
        s = self._session
        s.seq, s.now = seq, offset_us
        if data is None:
            return  # binary that is not text: audio, say; timed as stored, never read
        server = direction != Direction.CLIENT
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict):
            if server and self._rules is not None:
                s.tally.add(FindingCode.INVALID_JSON, seq, "The message is not a JSON object.")
            return
        if self._rules is None and server:  # the path did not tell: the first answer does
            claimed = next((r for r in SESSION_APIS.values() if r.claims(r.kind(obj) or "")), None)
            if claimed is None:
                return
            self._rules, asked = claimed, s.model_asked
            self._session = s = self._begin(claimed)
            s.seq, s.now, s.model_asked = seq, offset_us, asked
        rules = self._rules
        if rules is None:
            return
        kind = rules.kind(obj)
        if kind is None:
            if server:
                s.tally.add(FindingCode.UNKNOWN_EVENT, seq, "The message names no event.")
        elif server:
            rules.server(s, kind, obj)
        else:
            rules.client(s, kind, obj)
            self._asked(rules.name, kind, obj)

    def _asked(self, api: str, kind: str, obj: dict[str, Any]) -> None:
        before = len(self._prompt)
        session_text(api, kind, obj, self._prompt)
        self._prompt_chars += sum(len(p) + 1 for p in self._prompt[before:])
        if self._prompt_chars > 2 * MAX_PROMPT_BYTES:  # its start and its end are kept
            kept = bounded(TURN_SEPARATOR.join(self._prompt)) or ""
            self._prompt, self._prompt_chars = [kept], len(kept)

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
        """The analysis so far (no side effects: callable while the session goes on)."""
        s = self._session
        t = s.tally
        open_lanes = realtime.unfinished(s)
        outcome, reason = _outcome(s, state, error)
        findings = list(t.findings)
        if self._rules is None:
            findings.append(Finding(FindingCode.UNKNOWN_API, None, UNMODELLED))
        if t.dropped:
            detail = f"{t.dropped} more findings were not stored."
            findings.append(Finding(FindingCode.FINDINGS_TRUNCATED, None, detail))
        inp, out, total = t.input_tokens, t.output_tokens, t.total_tokens
        if total is None and inp is not None and out is not None:
            total = inp + out
        median, p95, top = gap_figures(s.gaps)
        streaming = sum(s.gaps)  # µs spent streaming, turn by turn: no silence between
        ttft = next((x for x in s.ttfts if x is not None), None)
        a = Analysis(
            api=t.api,
            model=t.model or s.model_asked,
            outcome=outcome,
            reason=reason,
            input_tokens=inp,
            output_tokens=out,
            total_tokens=total,
            cache_read_tokens=t.cache_read_tokens,
            reasoning_tokens=t.reasoning_tokens,
            profile=self.profile.name,
            ttft_us=ttft,
            gap_median_us=median,
            gap_p95_us=p95,
            gap_max_us=top,
            tokens_per_s=out / (streaming / 1e6) if out is not None and streaming > 0 else None,
            output_text=_transcript(s.said, t.text, [u.text for u in open_lanes]),
            reasoning_text=_transcript(s.reasoned, t.reasoning, [u.reasoning for u in open_lanes]),
            findings=findings,
            request_text=bounded(TURN_SEPARATOR.join(p for p in self._prompt if p)),
            session={
                "responses": s.responses,
                "ttft_us": s.ttfts[:_TTFTS],
                "audio_deltas": s.audio_deltas,
                "audio_base64_chars": s.audio_chars,
            },
        )
        known = status if isinstance(status, int) and not isinstance(status, bool) else None
        a.fault = fault_of(a.outcome, state, known, error)
        return a


def _transcript(ended: list[str], current: list[str], lanes: list[list[str]]) -> str:
    """The responses ended, then the open ones' text so far (nothing changed: the analysis is
    read again and again while a session goes on)."""
    so_far = ["".join(pieces) for pieces in (current, *lanes)]
    return TURN_SEPARATOR.join([*ended, *(text for text in so_far if text)])


def _outcome(s: Session, state: str, error: str | None) -> tuple[str, str | None]:
    if state == ExchangeState.RECORDING:
        return Outcome.RECORDING, None
    if state == ExchangeState.TRUNCATED:
        return Outcome.CUT, CUT
    if state in TRANSPORT_OUTCOMES:
        return TRANSPORT_OUTCOMES[state], None
    closed = close_of(error)
    if closed is not None:
        return Outcome.ERROR, closed
    if s.error is not None:
        return Outcome.ERROR, s.error
    return Outcome.COMPLETED, None
