"""What the play button writes: the output text of a stream as (offset, piece) pairs.

Each stored event is read by its API's rules (the ones the analyzer uses), and what it added
to the output text is paired with the event's offset, so the page writes the text at the pace
it came. The answer is bounded: past :data:`MAX_PIECES` pieces or :data:`MAX_CHARS`
characters it stops and says so. A live exchange page grows its output the same way, event
by event (:class:`Playback`), until the analyzer's text replaces it at the end.
"""

from __future__ import annotations

from typing import Any

import orjson

from ssetape.analysis.apis import APIS, detect_api
from ssetape.analysis.tally import Tally
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries

__all__ = ["MAX_CHARS", "MAX_PIECES", "Playback", "pieces"]

MAX_PIECES = 100_000
MAX_CHARS = 2 * 1024 * 1024


class Playback:
    """The output text of one stream, read an event at a time by its API's rules."""

    def __init__(self, x: Exchange) -> None:
        # In flight, the analyzer has not named the API yet: the path does, as it will.
        rules = APIS.get(x.api or detect_api(x.path))
        self.rules = rules if x.is_stream else None
        self.tally = Tally(rules.name) if rules is not None else None

    def piece(self, seq: int, event: str | None, data: str | None) -> str:
        """What this event added to the output text ('' for none, or an event not read)."""
        rules, tally = self.rules, self.tally
        if rules is None or tally is None or data is None or data == "[DONE]":
            return ""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return ""
        if not isinstance(obj, dict):
            return ""
        named = event if event and event != "message" else None
        kind = named if not rules.typed_events else named or obj.get("type")
        if rules.typed_events and not isinstance(kind, str):
            return ""
        before = len(tally.text)
        try:
            rules.event(tally, seq, kind, obj)
        except Exception:  # a rule that trips on odd input skips the event, as the analyzer does
            return ""
        piece = "".join(tally.text[before:])
        del tally.text[:]  # only the pieces are kept, not the whole text twice
        return piece


def pieces(x: Exchange, queries: Queries) -> dict[str, Any]:
    """``{"pieces": [[offset_us, text], ...], "cut": bool}`` for the exchange's stream."""
    out: list[list[object]] = []
    reader = Playback(x)
    if reader.rules is None:
        return {"pieces": out, "cut": False}
    chars = 0
    for t in queries.timings(x.id):
        piece = reader.piece(t.seq, t.event, t.data)
        if not piece:
            continue
        if len(out) >= MAX_PIECES or chars + len(piece) > MAX_CHARS:
            return {"pieces": out, "cut": True}
        chars += len(piece)
        out.append([t.offset_us, piece])
    return {"pieces": out, "cut": False}
