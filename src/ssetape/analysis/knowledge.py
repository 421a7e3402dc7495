"""A store's stream knowledge: what the analyzer found in each exchange, saved and read back.

The recording process's writer thread saves the analysis ``LiveAnalysis`` made while each
stream went by (:meth:`Knowledge.save_live`); `ssetape reindex` and cassette imports analyse
stored rows again (:meth:`Knowledge.reanalyse`, reading events back in pages so a
million-event stream is analysed in bounded memory). Live and recomputed knowledge come from
the same ``Analyzer``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, delete, insert, select, update
from sqlalchemy.orm import Session

from ssetape.analysis.analyzer import Analysis, Analyzer
from ssetape.analysis.apis import streams_array
from ssetape.analysis.live_analysis import content_type
from ssetape.analysis.profiles import override_for, profile_for, profile_or_none
from ssetape.storage.engine import SQLITE_BEGIN
from ssetape.storage.models import Event, Exchange, Finding
from ssetape.storage.store import Store

log = logging.getLogger("ssetape.analysis.knowledge")

# Bumped when the analysis changes, so `ssetape reindex --stale` finds rows to redo.
ANALYSIS_VERSION = 2  # 2: provider profiles, cache and reasoning token counts
_PAGE = 5_000
EXCHANGES = cast(Table, Exchange.__table__)


def knowledge_columns(a: Analysis) -> dict[str, Any]:
    """The Exchange column values for one analysis."""
    return {
        "api": a.api,
        "model": a.model,
        "outcome": a.outcome,
        "outcome_reason": a.reason,
        "input_tokens": a.input_tokens,
        "output_tokens": a.output_tokens,
        "total_tokens": a.total_tokens,
        "cache_read_tokens": a.cache_read_tokens,
        "cache_write_tokens": a.cache_write_tokens,
        "reasoning_tokens": a.reasoning_tokens,
        "profile": a.profile,
        "ttft_us": a.ttft_us,
        "gap_median_us": a.gap_median_us,
        "gap_p95_us": a.gap_p95_us,
        "gap_max_us": a.gap_max_us,
        "tokens_per_s": a.tokens_per_s,
        "output_text": a.output_text,
        "details": {
            "refusal_text": a.refusal_text,
            "reasoning_text": a.reasoning_text,
            "tool_calls": a.tool_calls,
        },
        "analysis_version": ANALYSIS_VERSION,
    }


# The exchange columns the analysis writes: derived from the events, so never in a cassette.
KNOWLEDGE_COLUMNS = frozenset(knowledge_columns(Analysis("", None, "", None)))
_UPDATE = update(EXCHANGES).where(EXCHANGES.c.id == bindparam("xid_"))


def _save(conn: Connection, results: list[tuple[int, Analysis]]) -> None:
    """Knowledge columns and findings of analysed exchanges: a few statements for all."""
    if not results:
        return
    conn.execute(_UPDATE, [{"xid_": xid, **knowledge_columns(a)} for xid, a in results])
    ids = [xid for xid, _ in results]
    for start in range(0, len(ids), 500):  # SQLite caps the variables in one statement
        conn.execute(delete(Finding).where(Finding.exchange_id.in_(ids[start : start + 500])))
    findings = [
        {"exchange_id": xid, "n": n, "code": f.code, "event_seq": f.event_seq, "detail": f.detail}
        for xid, a in results
        for n, f in enumerate(a.findings)
    ]
    if findings:
        conn.execute(insert(Finding), findings)


class Knowledge:
    """Analyses stored exchanges, writes their stream knowledge and findings, reads them."""

    def __init__(
        self,
        store: Store,
        live: Callable[[str], Analysis | None] | None = None,
        *,
        profiles: Mapping[str, str] | None = None,
    ) -> None:
        """``live``: the analysis already made while recording an exchange, by uid.
        ``profiles``: HOST=NAME overrides for re-analysis; without one, an exchange keeps the
        profile it was last read under (recorded, or a reindex's override), else gets its
        host's."""
        self._store = store
        self._live = live
        self._profiles = profiles or {}
        self._engine = (
            store.engine.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"})
            if store.is_sqlite
            else store.engine
        )

    def analyse(self, s: Session, x: Exchange) -> Analysis:
        profile = (
            override_for(x.host, self._profiles, x.port)
            or profile_or_none(x.profile)
            or profile_for(x.host)
        )
        analyzer = Analyzer(
            method=x.method, path=x.path, request_body=x.request_body, profile=profile
        )
        ctype = content_type(x.response_headers)
        # As the recorder stored them: events for SSE, the wire chunks otherwise; only an API
        # whose stream is a JSON array reads those (the live analysis reads the same rows).
        array = not (ctype or "").lower().startswith("text/event-stream") and streams_array(x.path)
        if x.is_stream and not array:
            stmt = (
                select(Event.seq, Event.offset_us, Event.event, Event.data)
                .where(Event.exchange_id == x.id)
                .order_by(Event.seq)
                .execution_options(yield_per=_PAGE)
            )
            for seq, offset_us, event, data in s.execute(stmt):
                analyzer.feed(seq, offset_us, event, data)
        elif x.is_stream:
            raw_stmt = (
                select(Event.seq, Event.offset_us, Event.raw)
                .where(Event.exchange_id == x.id)
                .order_by(Event.seq)
                .execution_options(yield_per=_PAGE)
            )
            for seq, offset_us, raw in s.execute(raw_stmt):
                analyzer.feed_raw(seq, offset_us, bytes(raw))
        return analyzer.finish(
            status=x.status,
            state=x.state,
            response_body=None if x.is_stream else x.response_body,
            response_content_type=ctype,
        )

    def update(self, exchange_ids: Iterable[int]) -> int:
        """Analyse and store the exchanges in one transaction; the number done."""
        # IMMEDIATE on SQLite: this reads, then writes; a plain BEGIN would fail at once
        # ("database is locked") when another connection commits in between.
        with Session(self._engine) as s, s.begin():
            results: list[tuple[int, Analysis]] = []
            for xid in exchange_ids:
                x = s.get(Exchange, xid)
                if x is None:
                    continue
                live = self._live(x.uid) if self._live is not None else None
                results.append((xid, live if live is not None else self.analyse(s, x)))
                s.expunge(x)  # keep the session small over long reindex runs
            _save(s.connection(), results)
        return len(results)

    def save_live(self, finished: list[tuple[int, str]]) -> int:
        """Store the live analyses of just-recorded exchanges, ``(id, uid)`` pairs, without
        reading the exchanges back (about 1 ms each through the ORM: per event of a
        1,000-event stream, as much as its SSE parsing). Those without one are analysed
        from the store."""
        take = self._live or (lambda uid: None)
        results: list[tuple[int, Analysis]] = []
        rest: list[int] = []
        for xid, uid in finished:
            a = take(uid)
            if a is None:
                rest.append(xid)
            else:
                results.append((xid, a))
        if results:
            with self._engine.begin() as conn:
                _save(conn, results)
        return len(results) + (self.update(rest) if rest else 0)

    def exchange_ids(self, *, stale_only: bool = False) -> list[int]:
        """Exchanges to (re)index: all, or only those never analysed by this version."""
        stmt = select(Exchange.id).order_by(Exchange.id)
        if stale_only:
            stmt = stmt.where(
                (Exchange.analysis_version.is_(None))
                | (Exchange.analysis_version != ANALYSIS_VERSION)
            )
        with self._store.Session() as s:
            return list(s.scalars(stmt))

    def reanalyse(self, ids: list[int], *, progress: Callable[[int], None] | None = None) -> int:
        """Analyse ``ids`` again from the store, 100 exchanges per transaction."""
        done = 0
        for start in range(0, len(ids), 100):
            part = ids[start : start + 100]
            done += self.update(part)
            if progress is not None:
                progress(len(part))
        return done

    def findings(self, exchange_id: int) -> list[Finding]:
        stmt = select(Finding).where(Finding.exchange_id == exchange_id).order_by(Finding.n)
        with self._store.Session() as s:
            return list(s.scalars(stmt))
