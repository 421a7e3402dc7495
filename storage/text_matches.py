"""Where a text search found its text in each exchange of a page, and the text around it.

`list --grep`, the viewer's ``q`` and MCP's ``text`` match an exchange whose request text,
output text or path holds the text (``ExchangeFilter.text``). A page of them shows, for each,
the first of those that holds it (``vocabulary.MatchedIn``) and some 60 characters around
the first place it is. Texts can be megabytes (an output) or 64 KiB (a request's text): the
database finds the place and cuts the snippet (``instr``/``strpos`` then ``substr``), so a
row costs its snippet, never its text, in transfer and in the reader's memory. The place is
found as the filter matches: SQLite's ``LIKE`` folds ASCII letters only, as its ``lower``
does; PostgreSQL's is exact, as ``strpos`` is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Integer, case, func, literal, select

from ssetape.storage.models import Exchange
from ssetape.storage.store import Store
from ssetape.vocabulary import MatchedIn

__all__ = ["AROUND", "TextMatch", "TextMatches"]

# Characters shown before and after the text found, and at most of the text itself.
AROUND = 30
HIT_MAX = 200
CUT = "…"
_COLUMNS = {
    MatchedIn.PROMPT: Exchange.request_text,
    MatchedIn.OUTPUT: Exchange.output_text,
    MatchedIn.PATH: Exchange.path,
}
# Ids a statement names (two variables each in the snippets' CASE): SQLite before 3.32
# takes at most 999 variables a statement.
_BATCH = 400


class TextMatch(NamedTuple):
    """Where the text was found and what is around it, as stored (recorded text: escape it
    where it is shown). ``before`` starts with CUT, ``after`` ends with it, where the text
    goes on."""

    where: MatchedIn
    before: str
    hit: str
    after: str

    @property
    def snippet(self) -> str:
        return f"{self.before}{self.hit}{self.after}"

    @staticmethod
    def doc_of(matches: Mapping[int, TextMatch], xid: int, text: str | None) -> dict[str, Any]:
        """What a JSON row of a text search carries: ``{"match": {"in": "prompt",
        "snippet": "…around it…"}}`` (``"match": null`` if none was read); nothing when no
        text was searched."""
        if not text:
            return {}
        m = matches.get(xid)
        return {"match": None if m is None else {"in": m.where.value, "snippet": m.snippet}}


class TextMatches:
    """The matches of a text in exchanges (see the module's text); nothing here writes."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def around(self, ids: Iterable[int], text: str) -> dict[int, TextMatch]:
        """Each exchange's first match of ``text`` (those that hold it: prompt, then output,
        then path), by id."""
        ids = list(dict.fromkeys(ids))
        if not text or not ids:
            return {}
        found: dict[int, TextMatch] = {}
        for start in range(0, len(ids), _BATCH):
            found.update(self._batch(ids[start : start + _BATCH], text))
        return found

    def _batch(self, ids: list[int], text: str) -> dict[int, TextMatch]:
        prompt = self._position(Exchange.request_text, text)
        # The output only where the prompt has no match: it may be megabytes.
        output = case((prompt > 0, 0), else_=self._position(Exchange.output_text, text))
        path = self._position(Exchange.path, text)
        stmt = select(Exchange.id, prompt, output, path).where(Exchange.id.in_(ids))
        places: dict[MatchedIn, dict[int, int]] = {where: {} for where in _COLUMNS}
        with self.store.engine.connect() as conn:
            for xid, *found in conn.execute(stmt):
                where, at = next(
                    ((w, p) for w, p in zip(_COLUMNS, found, strict=True) if p), (None, 0)
                )
                if where is not None:
                    places[where][xid] = at
            return {
                xid: match
                for where, at in places.items()
                if at
                for xid, match in self._snippets(conn, where, at, len(text)).items()
            }

    def _position(self, column: Any, text: str) -> ColumnElement[int]:
        """Where ``text`` first is in ``column`` (from 1), as the filter's LIKE finds it; 0
        where it is not (or the column is NULL)."""
        if self.store.is_sqlite:
            at = func.instr(func.lower(column), func.lower(literal(text)), type_=Integer)
        else:
            at = func.strpos(column, literal(text), type_=Integer)
        return func.coalesce(at, 0, type_=Integer)

    @staticmethod
    def _snippets(
        conn: Any, where: MatchedIn, at: dict[int, int], size: int
    ) -> dict[int, TextMatch]:
        """The text around each place ``at`` (id: position) in ``where``'s column, cut by
        the database: AROUND before, the hit (at most HIT_MAX), AROUND after, and one
        character more to tell whether it goes on."""
        hit = min(size, HIT_MAX)
        starts = {xid: max(p - AROUND, 1) for xid, p in at.items()}
        first = case(starts, value=Exchange.id)
        length = AROUND + hit + AROUND + 1
        stmt = select(Exchange.id, func.substr(_COLUMNS[where], first, length)).where(
            Exchange.id.in_(list(at))
        )
        out: dict[int, TextMatch] = {}
        for xid, piece in conn.execute(stmt):
            if piece is None:
                continue
            lead = at[xid] - starts[xid]
            before = (CUT if starts[xid] > 1 else "") + piece[:lead]
            found = piece[lead : lead + hit]
            if size > hit:  # a long text searched: its start, and no more
                out[xid] = TextMatch(where, before, found + CUT, "")
                continue
            end = lead + hit + AROUND
            after = piece[lead + hit : end] + (CUT if len(piece) > end else "")
            out[xid] = TextMatch(where, before, found, after)
        return out
