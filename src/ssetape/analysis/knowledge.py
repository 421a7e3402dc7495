"""A store's stream knowledge: what the analyzer found in each exchange, saved and read back.

The recording process's writer thread saves the analysis ``LiveAnalysis`` made while each
stream went by (:meth:`Knowledge.save_live`); `ssetape reindex` and cassette imports analyse
stored rows again (:meth:`Knowledge.reanalyse`, reading events back in pages so a
million-event stream is analysed in bounded memory). Live and recomputed knowledge come from
the same ``Analyzer``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sqlalchemy.exc import DBAPIError

from ssetape.analysis.analyzer import Analysis, Analyzer
from ssetape.analysis.apis import APIS, streams_array
from ssetape.analysis.bounds import bounded
from ssetape.analysis.live_analysis import content_type
from ssetape.analysis.profiles import override_for, profile_for, profile_or_none
from ssetape.analysis.sessions import SessionAnalyzer
from ssetape.cost.price import Price
from ssetape.cost.price_book import LazyPriceBook, PriceBook, PriceQuery
from ssetape.framing.framings import Framing, framing_of
from ssetape.storage.engine import describe, is_transient
from ssetape.storage.knowledge_rows import KnowledgeRows, KnowledgeTx
from ssetape.storage.models import Exchange, Finding
from ssetape.storage.store import Store
from ssetape.vocabulary import Transport

log = logging.getLogger("ssetape.analysis.knowledge")

# Bumped when the analysis changes, so `ssetape reindex --stale` finds rows to redo.
# 2: provider profiles, cache and reasoning counts; 3: web searches; 4: Bedrock, Ollama, Cohere,
# Interactions, vendor quirks (Vertex, Mistral...), HTTP errors read as bodies; 5: the first
# 1,000 tool calls kept, with tool_calls_total (a stream of 200,000 stored 11 MB of them);
# 6: who failed (fault), and a stream relayed whole but recorded with a gap is not cut;
# the request's prompt text (request_text: search by prompt); 7: WebSocket sessions read
# (openai_realtime, gemini_live, Responses WebSocket mode); 8: a session's prompt text, from
# its client frames; 9: a session's output text one response a line, and a cut session keeps
# every Responses WebSocket lane's text so far.
ANALYSIS_VERSION = 9
# Rows of a streamed HTTP error read for its body (of which MAX_ERROR_BODY bytes are kept).
_ERROR_ROWS = 1_000


def knowledge_columns(a: Analysis) -> dict[str, Any]:
    """The Exchange column values for one analysis."""
    return {
        "api": a.api,
        "model": a.model,
        "outcome": a.outcome,
        "outcome_reason": a.reason,
        "fault": a.fault,
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
        "request_text": a.request_text,
        "details": {
            "refusal_text": a.refusal_text,
            "reasoning_text": a.reasoning_text,
            "tool_calls": a.tool_calls,
            "tool_calls_total": a.tool_calls_total,
            "web_searches": a.web_searches,
            **({"session": a.session} if a.session is not None else {}),
        },
        "analysis_version": ANALYSIS_VERSION,
    }


# The exchange columns the analysis and its pricing write: derived from the events, so never
# in a cassette (an import analyses and prices again).
KNOWLEDGE_COLUMNS = frozenset(knowledge_columns(Analysis("", None, "", None))) | frozenset(
    Price(None).columns()
)


def skipped_line(skipped: list[tuple[int, str]]) -> str:
    """Exchanges not analysed, for one line: ``exchange 3 (OverflowError: ...)``, the first
    five named."""
    named = "; ".join(f"exchange {xid} ({why[:200]})" for xid, why in skipped[:5])
    more = f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
    return f"{len(skipped)} exchange(s): {named}{more}"


def price_query(
    a: Analysis, scheme: str, host: str, port: int, started_at: dt.datetime
) -> PriceQuery:
    """What an analysed exchange is priced from, with its API's facts (ApiRules)."""
    rules = APIS.get(a.api)
    return PriceQuery(
        a.api, a.model, scheme, host, port, started_at, a.profile, a.input_tokens,
        a.output_tokens, a.cache_read_tokens, a.cache_write_tokens, a.reasoning_tokens,
        a.web_searches, vendor=rules.vendor if rules is not None else None,
        input_excludes_cache=rules is not None and rules.input_excludes_cache,
    )  # fmt: skip


def _prices(tx: KnowledgeTx, results: list[tuple[int, Analysis]], book: PriceBook) -> list[Price]:
    """Each analysed exchange's price, from its analysis and where and when it was sent."""
    places = tx.places([xid for xid, _ in results])
    prices: list[Price] = []
    for xid, a in results:
        p = places.get(xid)
        if p is None:
            prices.append(Price(None, "exchange gone", data=book.version))
            continue
        try:
            prices.append(book.price(price_query(a, p.scheme, p.host, p.port, p.started_at)))
        except Exception as e:  # a price must never cost the exchange its knowledge
            log.warning("pricing exchange %d failed: %r", xid, e)
            prices.append(Price(None, f"pricing failed: {type(e).__name__}", data=book.version))
    return prices


def _save_each(
    tx: KnowledgeTx, results: list[tuple[int, Analysis]], book: PriceBook
) -> list[tuple[int, str]]:
    """:func:`_save` for all, or if the store rejects that, for each in a savepoint of its
    own, so that an exchange it rejects costs only itself; those, with why. An error of the
    store itself (down, locked) is raised: no other exchange could be saved either."""
    try:
        with tx.savepoint():
            _save(tx, results, book)
        return []
    except Exception as e:
        if is_transient(e):
            raise
        if len(results) == 1:
            return [(results[0][0], describe(e))]
    failed: list[tuple[int, str]] = []
    for one in results:
        try:
            with tx.savepoint():
                _save(tx, [one], book)
        except Exception as e:
            if is_transient(e):
                raise
            failed.append((one[0], describe(e)))
    return failed


def _save(tx: KnowledgeTx, results: list[tuple[int, Analysis]], book: PriceBook) -> None:
    """Knowledge columns, price and findings of analysed exchanges: a few statements for all."""
    if not results:
        return
    bounds = [(xid, bounded(a)) for xid, a in results]
    results = [(xid, b) for xid, (b, _) in bounds]
    absurd = {xid: why for xid, (_, why) in bounds if why is not None}
    prices = _prices(tx, results, book)
    for i, (xid, _) in enumerate(results):
        if xid in absurd:  # priced without the count it left out, its price would be wrong
            note = f"{absurd[xid]} past a 32-bit count, stored as unknown"
            prices[i] = Price(None, note, data=book.version)
    columns = [
        {"xid_": xid, **knowledge_columns(a), **price.columns()}
        for (xid, a), price in zip(results, prices, strict=True)
    ]
    findings = [
        {"exchange_id": xid, "n": n, "code": f.code, "event_seq": f.event_seq, "detail": f.detail}
        for xid, a in results
        for n, f in enumerate(a.findings)
    ]
    tx.save(columns, findings)


class Knowledge:
    """Analyses stored exchanges, writes their stream knowledge and findings, reads them."""

    def __init__(
        self,
        store: Store,
        live: Callable[[str], Analysis | None] | None = None,
        *,
        profiles: Mapping[str, str] | None = None,
        prices: LazyPriceBook | None = None,
    ) -> None:
        """``live``: the analysis already made while recording an exchange, by uid.
        ``profiles``: HOST=NAME overrides for re-analysis; without one, an exchange keeps the
        profile it was last read under (recorded, or a reindex's override), else gets its
        host's. ``prices``: the price data (genai-prices' own by default)."""
        self._store = store
        self.prices = prices or LazyPriceBook()
        self._live = live
        self._profiles = profiles or {}
        self._rows = KnowledgeRows(store)
        # Exchanges this could not analyse or store the analysis of, with why: they keep
        # what they had (`reindex --stale` tries them again).
        self.skipped: list[tuple[int, str]] = []

    def analyse(self, tx: KnowledgeTx, x: Exchange) -> Analysis:
        profile = (
            override_for(x.host, self._profiles, x.port)
            or profile_or_none(x.profile)
            or profile_for(x.host)
        )
        if x.transport == Transport.WEBSOCKET:
            session = SessionAnalyzer(
                path=x.path, query=x.query, request_headers=x.request_headers, profile=profile
            )
            for seq, offset_us, direction, data in tx.messages(x.id):
                session.message(seq, offset_us, direction, data)
            return session.finish(status=x.status, state=x.state, error=x.error)
        analyzer = Analyzer(
            method=x.method, path=x.path, request_body=x.request_body, profile=profile
        )
        ctype = content_type(x.response_headers)
        analyzer.answered(x.status)
        # As the recorder stored them: events where a framing cut them, the wire chunks
        # otherwise; only an API whose stream is a JSON array reads those (the live analysis
        # reads the same rows). An HTTP error's rows are its body, read from their bytes.
        array = framing_of(ctype) is Framing.CHUNKS and streams_array(x.path)
        if x.is_stream and x.status is not None and x.status >= 400:
            for seq, offset_us, event, data, raw in tx.error_rows(x.id, _ERROR_ROWS):
                analyzer.feed_row(seq, offset_us, event, data, raw)
        elif x.is_stream and not array:
            for seq, offset_us, event, data in tx.events(x.id):
                analyzer.feed(seq, offset_us, event, data)
        elif x.is_stream:
            for seq, offset_us, raw in tx.chunks(x.id):
                analyzer.feed_raw(seq, offset_us, raw)
        return analyzer.finish(
            status=x.status,
            state=x.state,
            response_body=None if x.is_stream else x.response_body,
            response_content_type=ctype,
            error=x.error,
            gap_seq=x.gap_seq,
        )

    def update(self, exchange_ids: Iterable[int]) -> int:
        """Analyse and store the exchanges in one transaction; the number done."""
        with self._rows.reading() as tx:
            results: list[tuple[int, Analysis]] = []
            for xid in exchange_ids:
                x = tx.exchange(xid)
                if x is None:
                    continue
                live = self._live(x.uid) if self._live is not None else None
                try:
                    results.append((xid, live if live is not None else self.analyse(tx, x)))
                except DBAPIError:
                    raise  # the transaction is gone: nothing else can be read in it
                except Exception as e:  # a bug of ours on one stream costs only that one
                    self.skipped.append((xid, describe(e)))
                tx.forget(x)
            failed = _save_each(tx, results, self.prices())
        self.skipped += failed
        return len(results) - len(failed)

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
        failed: list[tuple[int, str]] = []
        if results:
            with self._rows.writing() as tx:
                failed = _save_each(tx, results, self.prices())
        start = len(self.skipped)
        done = len(results) - len(failed) + (self.update(rest) if rest else 0)
        failed += self.skipped[start:]
        del self.skipped[start:]  # said here, not kept: a recorder runs for days
        if failed:
            log.warning("ssetape storage: %s not analysed; the others were", skipped_line(failed))
        return done

    def exchange_ids(self, *, stale_only: bool = False) -> list[int]:
        """Exchanges to (re)index: all, or only those not analysed by this version or not
        priced with this price data."""
        stale = (ANALYSIS_VERSION, self.prices().version) if stale_only else None
        return self._rows.ids(stale_for=stale)

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
        return self._rows.findings(exchange_id)
