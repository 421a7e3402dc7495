"""What the play button writes: the output text of a stream as (offset, piece) pairs.

Each stored event is read by its API's rules (the ones the analyzer uses), and what it added
to the output text is paired with the event's offset, so the page writes the text at the pace
it came. The answer is bounded: past :data:`MAX_PIECES` pieces or :data:`MAX_CHARS`
characters it stops and says so.
"""

from __future__ import annotations

from typing import Any

import orjson

from ssetape.analysis.apis import APIS
from ssetape.analysis.tally import Tally
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries

__all__ = ["MAX_CHARS", "MAX_PIECES", "pieces"]

MAX_PIECES = 100_000
MAX_CHARS = 2 * 1024 * 1024


def pieces(x: Exchange, queries: Queries) -> dict[str, Any]:
    """``{"pieces": [[offset_us, text], ...], "cut": bool}`` for the exchange's stream."""
    rules = APIS.get(x.api or "")
    out: list[list[object]] = []
    if rules is None or not x.is_stream:
        return {"pieces": out, "cut": False}
    tally, chars = Tally(rules.name), 0
    for t in queries.timings(x.id):
        if t.data is None or t.data == "[DONE]":
            continue
        try:
            obj = orjson.loads(t.data)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        named = t.event if t.event and t.event != "message" else None
        kind = named if not rules.typed_events else named or obj.get("type")
        if rules.typed_events and not isinstance(kind, str):
            continue
        before = len(tally.text)
        try:
            rules.event(tally, t.seq, kind, obj)
        except Exception:  # a rule that trips on odd input skips the event, as the analyzer does
            continue
        piece = "".join(tally.text[before:])
        del tally.text[:]  # only the pieces are kept, not the whole text twice
        if not piece:
            continue
        if len(out) >= MAX_PIECES or chars + len(piece) > MAX_CHARS:
            return {"pieces": out, "cut": True}
        chars += len(piece)
        out.append([t.offset_us, piece])
    return {"pieces": out, "cut": False}
