"""The running state of one exchange's analysis, which the API rule modules update.

:class:`Tally` is what the modules of :mod:`ssetape.analysis.rules` write into and
:class:`~ssetape.analysis.analyzer.Analyzer` reads its
:class:`~ssetape.analysis.analyzer.Analysis` from.
"""

from __future__ import annotations

from ssetape.analysis.findings import Finding, FindingCode
from ssetape.analysis.profiles import DEFAULT_PROFILE, PROFILES, Profile
from ssetape.analysis.tool_calls import ToolCall, ToolCalls

__all__ = ["MAX_FINDINGS", "Tally", "ToolCall", "as_count"]

MAX_FINDINGS = 100
# How many unknown event names are remembered for de-duplication; past that the findings cap
# has long been reached, so remembering more would only cost memory.
_MAX_UNKNOWN_NAMES = 1000


class Tally:
    """Running state of one exchange, updated by the rule modules."""

    def __init__(self, api: str, profile: Profile | None = None) -> None:
        self.api = api
        # What the exchange's provider sends (see ssetape.analysis.profiles).
        self.profile = profile or PROFILES[DEFAULT_PROFILE]
        self.model: str | None = None
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.reasoning: list[str] = []
        # The first MAX_TOOL_CALLS calls (ssetape.analysis.tool_calls); the rest counted.
        self.tools = ToolCalls()
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.total_tokens: int | None = None
        # Parts of the counts above that providers report apart: input served from the prompt
        # cache, input written to it, and output spent on reasoning.
        self.cache_read_tokens: int | None = None
        self.web_searches: int | None = None
        self.cache_write_tokens: int | None = None
        self.reasoning_tokens: int | None = None
        self.usage_seen = False
        # The request option that asked for usage in the stream, if one did.
        self.usage_requested: str | None = None
        self.refusal_seen = False
        # The outcome the exchange itself announced (finish_reason, terminal event, body).
        self.outcome: str | None = None
        self.reason: str | None = None
        # Anthropic's stop_reason arrives in message_delta but only counts at message_stop.
        self.stop_reason: str | None = None
        # closed: nothing may follow, except one ``[DONE]`` while done_ok (after an images
        # completed event, or after an error chunk). finished: the stream's terminal arrived.
        self.closed = False
        self.done_ok = False
        self.finished = False
        # Event types one of which may still follow the terminal, once (OpenAI's
        # response.failed after error); their data is read as any event's.
        self.follow: frozenset[str] = frozenset()
        # Content blocks the provider runs itself (Anthropic's server tools): their input is
        # the model's output, but no call for the client.
        self.server_blocks: set[object] = set()
        self.findings: list[Finding] = []
        self.dropped = 0
        self.unknown_names: set[str] = set()

    def add(self, code: str, seq: int | None, detail: str) -> None:
        if len(self.findings) < MAX_FINDINGS:
            self.findings.append(Finding(code, seq, detail))
        else:
            self.dropped += 1

    def unknown(self, seq: int, name: str) -> None:
        """An event name outside the vocabulary: reported once per name, then ignored."""
        if name in self.unknown_names:
            return
        if len(self.unknown_names) < _MAX_UNKNOWN_NAMES:
            self.unknown_names.add(name)
        detail = f"Event type {name[:80]!r} is not in the {self.api} API."
        self.add(FindingCode.UNKNOWN_EVENT, seq, detail)

    def tool(self, key: object) -> ToolCall:
        return self.tools.call(key)

    def usage(self, inp: object, out: object, total: object) -> None:
        """Record reported token counts; values that are not counts are ignored, never guessed."""
        self.usage_seen = True
        self.input_tokens = as_count(inp, self.input_tokens)
        self.output_tokens = as_count(out, self.output_tokens)
        self.total_tokens = as_count(total, self.total_tokens)

    def usage_details(
        self,
        *,
        cache_read: object = None,
        cache_write: object = None,
        reasoning: object = None,
        web_searches: object = None,
    ) -> None:
        """Record the cache and reasoning parts of the counts, and the billed server tool calls
        (Anthropic's web searches); non-counts are ignored."""
        self.cache_read_tokens = as_count(cache_read, self.cache_read_tokens)
        self.cache_write_tokens = as_count(cache_write, self.cache_write_tokens)
        self.reasoning_tokens = as_count(reasoning, self.reasoning_tokens)
        self.web_searches = as_count(web_searches, self.web_searches)

    def set_model(self, value: object) -> None:
        if self.model is None and isinstance(value, str) and value:
            self.model = value

    def end(
        self, outcome: str, reason: str | None, *, finished: bool = True, done_ok: bool = False
    ) -> None:
        self.outcome, self.reason = outcome, reason
        self.closed, self.finished, self.done_ok = True, finished, done_ok

    @staticmethod
    def error_reason(err: object) -> str | None:
        """The most specific label of an error object: code, else type, else message."""
        if isinstance(err, str):
            return err or None
        if not isinstance(err, dict):
            return None
        for key in ("code", "type", "message"):
            value = err.get(key)
            if isinstance(value, str) and value:
                return value
            if isinstance(value, int) and not isinstance(value, bool):
                return str(value)  # OpenRouter puts HTTP-like numbers in error.code
        return None


def as_count(value: object, otherwise: int | None = None) -> int | None:
    """``value`` if it is a token count (a non-negative int, not a bool), else ``otherwise``."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return otherwise
