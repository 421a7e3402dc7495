"""Store queries at scale: `list` (first page, each filter), `stats --since 1d` and `show ID`
on a store of 1M exchanges / 100M events, on SQLite and PostgreSQL, with their plans.

    python -m bench.bench_store_scale [--backend sqlite|postgresql|both]
        [--db postgresql+psycopg://postgres@127.0.0.1:5432/test] [--sqlite PATH]
        [--exchanges 1000000] [--events-per 100] [--days 30] [--rounds 5] [--keep]
        [--sqlite-stats analyze|none|both] [--generate-only] [--only REGEX]
        [--index BACKEND:DDL ...] [--no-base]

The store is made by ``Store.open`` (the schema of the newest migration, whatever it is) and
then filled straight, no proxy: ``--exchanges`` exchanges whose ``started_at`` spread over the
last ``--days`` days (ids in start order), a realistic mix of hosts, APIs, ~20 models, outcomes
(mostly completed; errors, cuts, refusals, ...), sessions (most NULL), usage, cost and timing
summaries, a few findings and a handful still ``recording``; ``--events-per`` events on
average per exchange (100-byte SSE events, offsets increasing). PostgreSQL gets a database of
its own (``ssetape_bench_scale_<exchanges>x<events-per>`` on the server of ``--db``), loaded
with binary COPY; SQLite a file (default: ``$TMPDIR/ssetape_bench_scale/``) filled by
executemany in big transactions with synchronous=OFF and no journal on the loading connection
only. If ``events`` has a ``day`` column (PostgreSQL's day partitions) it gets the exchange's
start date, and ``ssetape.storage.partitions.make`` makes the partitions of the days loaded
when that module has it. Then VACUUM ANALYZE (PostgreSQL) / ANALYZE (SQLite), as autovacuum
would. ``--keep`` reuses a store this script filled with the same figures.

Timed: each command as a fresh process of the real CLI (``--rounds`` times: first, best and
median wall time), and the same reads in-process through ``storage.queries.Queries`` (what
the command asks the store, without Python's start). Every SQL statement those reads send is
captured (``before_cursor_execute``) and explained: PostgreSQL ``EXPLAIN (ANALYZE, BUFFERS)``,
SQLite ``EXPLAIN QUERY PLAN`` (with the statement's own time); a plan that scans ``events`` or
reads all of ``exchanges`` is flagged. SQLite's planner without statistics (a store nothing
ever ran ANALYZE on, which is every store ssetape makes) and with them: ``--sqlite-stats``.

The PostgreSQL load skips the foreign key triggers (``session_replication_role = replica``,
when the role may) and waits for no WAL flush at commit; a 1M x 100 load took 15 min here, and
SQLite's 17 min (2 cores). ``--index postgresql:CREATE INDEX ...`` (or ``sqlite:``) times the
commands again with a candidate index, made for that pass and dropped after; ``--only`` picks
the commands by label (``'model|host'``); ``--generate-only`` only makes the store.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import datetime as dt
import hashlib
import io
import itertools
import json
import os
import random
import re
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import create_engine, event, func, select, text
from sqlalchemy.engine import make_url

BIN = Path(sys.executable).parent
MARK = "bench_store_scale"  # the settings key a finished load leaves
SEED = 26

# -- the mix ---------------------------------------------------------------------------------

# (weight, host, port, scheme, path template, query, api, profile, price provider,
#  [(model weight, model, USD per million input tokens, per million output tokens)])
ROUTES: list[tuple[float, str, int, str, str, str, str, str, str | None,
                   list[tuple[float, str, float | None, float | None]]]] = [
    (0.30, "api.openai.com", 443, "https", "/v1/chat/completions", "", "chat_completions",
     "openai", "openai", [
         (0.40, "gpt-4o-mini-2024-07-18", 0.15, 0.6), (0.25, "gpt-4o-2024-08-06", 2.5, 10.0),
         (0.17, "gpt-4.1-mini-2025-04-14", 0.4, 1.6), (0.12, "gpt-4.1-2025-04-14", 2.0, 8.0),
         (0.06, "o4-mini-2025-04-16", 1.1, 4.4)]),
    (0.12, "api.openai.com", 443, "https", "/v1/responses", "", "responses", "openai", "openai", [
        (0.55, "gpt-5-mini-2025-08-07", 0.25, 2.0), (0.42, "gpt-5-2025-08-07", 1.25, 10.0),
        (0.03, "o3-2025-04-16", 2.0, 8.0)]),
    (0.28, "api.anthropic.com", 443, "https", "/v1/messages", "", "messages", "anthropic",
     "anthropic", [
         (0.50, "claude-sonnet-4-20250514", 3.0, 15.0),
         (0.30, "claude-3-5-haiku-20241022", 0.8, 4.0),
         (0.12, "claude-3-7-sonnet-20250219", 3.0, 15.0),
         (0.08, "claude-opus-4-1-20250805", 15.0, 75.0)]),
    (0.12, "generativelanguage.googleapis.com", 443, "https",
     "/v1beta/models/{model}:streamGenerateContent", "alt=sse", "gemini", "compatible", "google", [
         (0.60, "gemini-2.5-flash", 0.3, 2.5), (0.30, "gemini-2.5-pro", 1.25, 10.0),
         (0.10, "gemini-2.0-flash", 0.1, 0.4)]),
    (0.07, "bedrock-runtime.us-east-1.amazonaws.com", 443, "https",
     "/model/{model}/converse-stream",
     "", "bedrock_converse", "compatible", "aws", [
         (0.993, "anthropic.claude-3-5-sonnet-20241022-v2:0", 3.0, 15.0),
         (0.007, "amazon.nova-pro-v1:0", 0.8, 3.2)]),
    (0.05, "api.groq.com", 443, "https", "/openai/v1/chat/completions", "", "chat_completions",
     "compatible", "groq", [(1.0, "llama-3.3-70b-versatile", 0.59, 0.79)]),
    (0.058, "localhost", 11434, "http", "/api/chat", "", "ollama", "compatible", None, [
        (0.7, "llama3.1:8b", None, None), (0.3, "qwen2.5:7b", None, None)]),
    (0.002, "api.cohere.com", 443, "https", "/v2/chat", "", "cohere_chat", "compatible", "cohere",
     [(1.0, "command-r-plus-08-2024", 2.5, 10.0)]),
]  # fmt: skip

# (weight, outcome, state, share of the events kept): the rest of the mix is "completed".
OUTCOMES = [
    (0.020, "incomplete", "completed", 1.0),
    (0.012, "error", "completed", 0.4),
    (0.015, "http_error", "completed", 0.0),
    (0.008, "cut", "truncated", 0.5),
    (0.010, "aborted", "aborted", 0.3),
    (0.004, "refused", "completed", 0.2),
    (0.003, "no_response", "failed", 0.0),
    (0.002, "interrupted", "interrupted", 0.5),
    (0.002, "unresolved", "completed", 1.0),  # Responses only (the others: completed)
]
TERMINATED = ("incomplete", "refused", "error", "unresolved")  # their streams end with a terminal
RECORDING = 5  # the newest exchanges are still in flight
SESSION_BLOCK = 25  # consecutive exchanges of one session
RARE_WORD = "zanzibar"  # in about one output text in a thousand: what --grep looks for
ABSENT_MODEL, ABSENT_HOST, ABSENT_WORD = "text-davinci-003", "api.mistral.ai", "qwertyuiop"
WORDS = (  # noqa: SIM905
    "the of and to in is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when if "
    "so no will more can out about up what said into them other time could some these two "
    "may first then do any like my now over such our man me even most made after also did "
    "many before must through back years where much your way well down should because each "
    "just those people how too little state good very make world still own see men work long "
    "get here between both life being under never day same another know while last might us "
    "great old year off come since against go came right used take three"
).split()
RECORDERS = ["gw-a:4101:1764000000", "gw-b:4102:1764000000", "gw-c:7001:1764100000"]
INFLIGHT_RECORDER = "gw-d:9100:1764600000"  # no run row: never taken for gone
FINDING_DETAIL = {
    "no_terminal_event": "the stream ended without its terminal event",
    "unknown_event": "event 'ping.extra' is not in the API's vocabulary",
    "usage_missing": "stream_options.include_usage was asked for and no usage came",
}


def _event_pool(api: str, model: str, k: int) -> list[tuple[str | None, str, bytes]]:
    """``k`` middle events of a stream of ``api``: (event name, data, raw bytes), ~100 bytes
    raw each."""
    rng = random.Random(f"{api}/{model}")
    out: list[tuple[str | None, str, bytes]] = []
    for i in range(k):
        w = " " + rng.choice(WORDS)
        name: str | None = None
        if api == "chat_completions":
            data = (
                f'{{"id":"chatcmpl-B{i % 97:02d}x","choices":[{{"index":0,'
                f'"delta":{{"content":"{w}"}}}}]}}'
            )
        elif api == "responses":
            name = "response.output_text.delta"
            data = f'{{"type":"{name}","output_index":0,"delta":"{w}","sequence_number":{i}}}'
        elif api == "messages":
            name = "content_block_delta"
            data = f'{{"type":"{name}","index":0,"delta":{{"type":"text_delta","text":"{w}"}}}}'
        elif api == "gemini":
            data = f'{{"candidates":[{{"content":{{"parts":[{{"text":"{w}"}}],"role":"model"}}}}]}}'
        elif api == "bedrock_converse":
            name = "contentBlockDelta"
            data = f'{{"contentBlockIndex":0,"delta":{{"text":"{w}"}},"p":"abcdefghijk"}}'
        elif api == "ollama":
            data = (
                f'{{"model":"{model}","message":{{"role":"assistant","content":"{w}"}},'
                '"done":false}'
            )
        else:  # cohere_chat
            name = "content-delta"
            data = (
                f'{{"type":"{name}","index":0,'
                f'"delta":{{"message":{{"content":{{"text":"{w}"}}}}}}}}'
            )
        if api == "ollama":
            raw = data.encode() + b"\n"
        elif api == "bedrock_converse":
            body = data.encode()
            raw = (
                (len(body) + 52).to_bytes(4, "big")
                + b"\x00\x00\x00\x24\x8a\x0c\x11\x7f"
                + b"\x0b:event-type\x07\x00\x11contentBlockDelta"
                + body
                + b"\x5e\x1f\x23\x01"
            )
        else:
            raw = (f"event: {name}\n" if name else "").encode() + f"data: {data}\n\n".encode()
        out.append((name, data, raw))
    return out


Ev = tuple[str | None, str, bytes]


def _ends(api: str, model: str) -> tuple[Ev, Ev]:
    """The first and the terminal event of a stream of ``api``."""
    sse = lambda name, data: (name, data, (f"event: {name}\n" if name else "").encode()  # noqa: E731
                              + f"data: {data}\n\n".encode())  # fmt: skip
    if api == "messages":
        return (sse("message_start", f'{{"type":"message_start","message":{{"model":"{model}"}}}}'),
                sse("message_stop", '{"type":"message_stop"}'))  # fmt: skip
    if api == "responses":
        return (sse("response.created", '{"type":"response.created","sequence_number":0}'),
                sse("response.completed",
                    '{"type":"response.completed","sequence_number":1}'))  # fmt: skip
    if api == "cohere_chat":
        return (sse("message-start", '{"type":"message-start","id":"c0"}'),
                sse("message-end", '{"type":"message-end"}'))  # fmt: skip
    if api == "ollama":
        first = f'{{"model":"{model}","message":{{"role":"assistant","content":""}},"done":false}}'
        last = f'{{"model":"{model}","done":true,"done_reason":"stop","eval_count":42}}'
        return (None, first, first.encode() + b"\n"), (None, last, last.encode() + b"\n")
    if api == "bedrock_converse":
        return (("messageStart", '{"role":"assistant"}', b"\x00\x00\x00\x50messageStart"),
                ("messageStop", '{"stopReason":"end_turn"}',
                 b"\x00\x00\x00\x55messageStop"))  # fmt: skip
    if api == "gemini":
        return (sse(None, '{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"}}]}'),
                sse(None,
                    '{"candidates":[{"finishReason":"STOP"}],"usageMetadata":{}}'))  # fmt: skip
    return (sse(None, '{"id":"chatcmpl-B","choices":[{"index":0,"delta":{"role":"assistant"}}]}'),
            sse(None, "[DONE]"))  # fmt: skip


@dataclass
class Plan:
    """What the generator decides for every exchange up front (a few bytes each), so that the
    rows can be made chunk by chunk and the event total is known before loading."""

    n: int
    events_per: int
    days: int
    end: dt.datetime
    route: array = field(default_factory=lambda: array("B"))  # index into MODELS
    outcome: array = field(default_factory=lambda: array("B"))  # 0 completed, else OUTCOMES+1
    events: array = field(default_factory=lambda: array("I"))

    @property
    def total_events(self) -> int:
        return sum(self.events)


MODELS = [(ri, m) for ri, r in enumerate(ROUTES) for m in r[9]]


def make_plan(n: int, events_per: int, days: int, seed: int, end: dt.datetime) -> Plan:
    rng = random.Random(seed)
    plan = Plan(n, events_per, days, end)
    cum_m, acc = [], 0.0
    for ri, (_mw, *_rest) in MODELS:
        acc += ROUTES[ri][0] * _mw
        cum_m.append(acc)
    cum_o, acc = [], 0.0
    for w, *_ in OUTCOMES:
        acc += w
        cum_o.append(acc)
    keep = [1.0] + [o[3] for o in OUTCOMES]
    for i in range(n):
        m = min(bisect.bisect(cum_m, rng.random() * cum_m[-1]), len(MODELS) - 1)
        o = bisect.bisect(cum_o, rng.random())
        o = 0 if o >= len(OUTCOMES) else o + 1
        api = ROUTES[MODELS[m][0]][6]
        if OUTCOMES[o - 1][1] == "unresolved" and api != "responses":
            o = 0
        if i >= n - RECORDING:
            o = 255  # still recording
        plan.route.append(m)
        plan.outcome.append(o)
    shares = [0.5 if o == 255 else keep[o] for o in plan.outcome]
    mean_stream = events_per * n / max(1e-9, sum(shares))  # the total comes out at n * events_per
    for s in shares:
        plan.events.append(0 if s == 0 else max(2, round(mean_stream * s * rng.uniform(0.5, 1.5))))
    return plan


def _fmt_sqlite(t: dt.datetime) -> str:
    """As SQLAlchemy stores a UTC datetime in SQLite (storage.models.UTCDateTime)."""
    return t.strftime("%Y-%m-%d %H:%M:%S.%f")


EXCHANGE_COLUMNS = [
    "id", "uid", "started_at", "method", "scheme", "host", "port", "path", "query",
    "http_version", "request_headers", "request_body", "fingerprint", "status", "reason",
    "response_headers", "response_body", "is_stream", "state", "error", "ttfb_us", "duration_us",
    "event_count", "recorder", "gap_seq", "session", "api", "model", "outcome", "outcome_reason",
    "input_tokens", "output_tokens", "total_tokens", "cache_read_tokens", "cache_write_tokens",
    "reasoning_tokens", "profile", "ttft_us", "gap_median_us", "gap_p95_us", "gap_max_us",
    "tokens_per_s", "output_text", "details", "analysis_version", "cost_nusd", "price_provider",
    "price_model", "price_note", "price_data", "events_pruned_at",
]  # fmt: skip
JSON_COLUMNS = {"request_headers", "response_headers", "details"}
EVENT_COLUMNS = ["exchange_id", "seq", "offset_us", "event", "data", "raw"]
FINDING_COLUMNS = ["exchange_id", "n", "code", "event_seq", "detail"]
POOL = 512


class Generator:
    """Rows of the plan, a chunk of exchanges at a time: (exchange tuples in EXCHANGE_COLUMNS
    order, finding tuples, and an iterator of event tuples with the day column if asked)."""

    def __init__(self, plan: Plan, seed: int) -> None:
        self.plan = plan
        self.seed = seed
        span = dt.timedelta(days=plan.days).total_seconds()
        self.t0 = plan.end - dt.timedelta(seconds=span)
        self.step_us = span * 1e6 / max(1, plan.n)
        self.pools = {m: _event_pool(ROUTES[ri][6], m, POOL) for ri, (_w, m, *_p) in MODELS}
        self.ends = {m: _ends(ROUTES[ri][6], m) for ri, (_w, m, *_p) in MODELS}
        jr = random.Random(seed + 1)
        self.jitter = [jr.randrange(0, 128) for _ in range(4096)]

    def started(self, i: int) -> dt.datetime:
        """Exchange i's start (0-based), in id order with a little jitter: ids follow time."""
        jitter = ((i * 2654435761) % 1000) / 1000 * 0.4 * self.step_us
        return self.t0 + dt.timedelta(microseconds=i * self.step_us + jitter)

    def chunk(
        self, lo: int, hi: int
    ) -> tuple[
        list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[int, int, int, int, dt.date]]
    ]:
        """Exchanges lo..hi-1 (0-based; id = i + 1): their rows, findings and, per exchange,
        what its events need (id, event count, ttft, gap, day)."""
        plan = self.plan
        rng = random.Random(self.seed * 1_000_003 + lo)
        xs, fs, evs = [], [], []
        for i in range(lo, hi):
            xid = i + 1
            m = plan.route[i]
            ri, (_mw, model, pin, pout) = MODELS[m]
            _w, host, port, scheme, path, query, api, profile, provider, _models = ROUTES[ri]
            path = path.format(model=model)
            o = plan.outcome[i]
            n = plan.events[i]
            if o == 255:
                outcome, state = "recording", "recording"
            elif o == 0:
                outcome, state = "completed", "completed"
            else:
                outcome, state = OUTCOMES[o - 1][1], OUTCOMES[o - 1][2]
            started = self.started(i)
            prompt_words = rng.randrange(8, 40)
            prompt = " ".join(rng.choice(WORDS) for _ in range(prompt_words))
            body = orjson.dumps({"model": model, "stream": True, "max_tokens": 1024,
                                 "messages": [{"role": "user", "content": prompt}]})  # fmt: skip
            status: int | None = 200
            reason: str | None = "OK"
            is_stream = n > 0 or o == 255
            resp_headers: list[list[str]] | None = [
                [
                    "content-type",
                    "text/event-stream" if api != "ollama" else "application/x-ndjson",
                ],
                ["date", started.strftime("%a, %d %b %Y %H:%M:%S GMT")],
                ["x-request-id", f"req_{rng.getrandbits(64):016x}"],
            ]
            resp_body: bytes | None = None
            error: str | None = None
            outcome_reason: str | None = None
            if outcome == "http_error":
                status = rng.choice((429, 429, 429, 500, 503, 400))
                reason = {429: "Too Many Requests", 500: "Internal Server Error",
                          503: "Service Unavailable", 400: "Bad Request"}[status]  # fmt: skip
                resp_headers[0][1] = "application/json"
                resp_body = b'{"error":{"type":"rate_limit_error","message":"slow down"}}'
                outcome_reason = f"HTTP {status}"
            elif outcome == "no_response":
                status = reason = resp_headers = None
                error = "upstream connect error: connection timed out"
            elif outcome == "aborted":
                error = "client disconnected"
            elif outcome == "cut":
                error = "upstream closed the connection mid-stream"
                outcome_reason = "no terminal event"
            elif outcome == "error":
                outcome_reason = "overloaded_error: Overloaded"
            elif outcome == "incomplete":
                outcome_reason = "max_tokens"
            elif outcome == "refused":
                outcome_reason = "refusal"
            elif outcome == "interrupted":
                error = "recorder gone before the exchange was stored whole"
            ttfb = int(rng.lognormvariate(12.6, 0.5)) if status else None  # ~300 ms
            gap = max(2000, int(rng.lognormvariate(10.0, 0.5)))  # ~22 ms
            ttft = (ttfb or 0) + rng.randrange(5_000, 80_000) if n else None
            duration = None if o == 255 else (ttft or ttfb or 30_000_000) + n * gap + 2_000
            output_tokens = max(1, int(n * rng.uniform(0.9, 1.6))) if n else None
            if not n and status:
                output_tokens = 0
            input_tokens = int(rng.lognormvariate(6.5, 1.0)) if status else None
            cached = provider in ("anthropic", "openai") and rng.random() < 0.3
            cache_read = int(input_tokens * rng.random()) if input_tokens and cached else None
            cache_write = (int(input_tokens * 0.2) if cache_read and provider == "anthropic"
                           else None)  # fmt: skip
            reasoning = (int(output_tokens * rng.uniform(0.5, 3)) if output_tokens and
                         model.startswith(("o3", "o4", "gpt-5")) else None)  # fmt: skip
            total = (input_tokens or 0) + (output_tokens or 0) if input_tokens is not None else None
            if pin is not None and input_tokens is not None:
                cost = round((input_tokens * pin + (output_tokens or 0) * pout) * 1000)
                price = (provider, model, None, "genai-prices 0.0.61")
            else:
                cost = None
                price = (None, None, f"no price for {model}" if pin is None else None,
                         "genai-prices 0.0.61")  # fmt: skip
            words = rng.randrange(20, 90) if n else 0
            text_out = " ".join(rng.choice(WORDS) for _ in range(words)) if words else None
            if text_out and rng.random() < 0.001:
                text_out += f" {RARE_WORD}"
            block = i // SESSION_BLOCK
            session = f"ci-run-{block:06d}" if (block * 7919) % 10 < 4 else None
            recorder = INFLIGHT_RECORDER if o == 255 else RECORDERS[block % len(RECORDERS)]
            gap_p95 = int(gap * rng.uniform(1.8, 3.0)) if n > 1 else None
            gap_max = (int(gap * rng.uniform(3, 6)) if rng.random() > 0.01 else 4_000_000) \
                if n > 1 else None  # fmt: skip
            tps = (output_tokens / ((n * gap) / 1e6)) if n > 1 and output_tokens else None
            headers = [["host", host], ["content-type", "application/json"],
                       ["authorization", "Bearer [redacted:5f1c2a]"],
                       ["user-agent", "ssetape-bench/1.0"],
                       ["accept", "text/event-stream"]]  # fmt: skip
            xs.append((
                xid, f"{rng.getrandbits(128):032x}", started, "POST", scheme, host, port, path,
                query, "HTTP/1.1" if scheme == "http" else "HTTP/2.0", headers, body,
                hashlib.sha256(body).hexdigest(), status, reason, resp_headers, resp_body,
                is_stream, state, error, ttfb, duration, n, recorder, None, session, api, model,
                outcome, outcome_reason, input_tokens, output_tokens, total, cache_read,
                cache_write, reasoning, profile, ttft, gap if n > 1 else None, gap_p95, gap_max,
                tps, text_out, None, 4, cost, *price, None,
            ))  # fmt: skip
            if outcome == "cut":
                fs.append((xid, 0, "no_terminal_event", n - 1 if n else None,
                           FINDING_DETAIL["no_terminal_event"]))  # fmt: skip
            elif n and rng.random() < 0.003:
                fs.append((xid, 0, "unknown_event", rng.randrange(n),
                           FINDING_DETAIL["unknown_event"]))  # fmt: skip
                if rng.random() < 0.3:
                    fs.append((xid, 1, "usage_missing", None, FINDING_DETAIL["usage_missing"]))
            if n:
                evs.append((xid, n, ttft or 0, gap, started.date(), m, o))
        return xs, fs, evs

    def events(self, evs: list[Any], *, day: bool) -> Iterator[tuple[Any, ...]]:
        """The event rows of a chunk, in (exchange_id, seq) order."""
        jitter = self.jitter
        for xid, n, ttft, gap, d, m, o in evs:
            pool = self.pools[MODELS[m][1][1]]
            first, last = self.ends[MODELS[m][1][1]]
            base = (xid * 37) % POOL
            terminal = o == 0 or (o != 255 and OUTCOMES[o - 1][1] in TERMINATED)
            rows = [first]
            mid = n - 1 - (1 if terminal else 0)
            while mid > 0:
                take = min(mid, POOL - base)
                rows.extend(pool[base : base + take])
                mid -= take
                base = 0
            if terminal and n > 1:
                rows.append(last)
            j0 = xid & 4095
            offs = [ttft + s * gap + (jitter[(j0 + s) & 4095] * gap >> 8) for s in range(n)]
            if day:
                for s, (name, data, raw) in enumerate(rows):
                    yield (xid, s, offs[s], name, data, raw, d)
            else:
                for s, (name, data, raw) in enumerate(rows):
                    yield (xid, s, offs[s], name, data, raw)


# -- stores ----------------------------------------------------------------------------------


def pg_db_name(args: argparse.Namespace) -> str:
    return args.pg_database or f"ssetape_bench_scale_{args.exchanges}x{args.events_per}"


def pg_target(args: argparse.Namespace) -> str:
    url = make_url(args.db).set(database=pg_db_name(args))
    return url.render_as_string(hide_password=False)


def sqlite_target(args: argparse.Namespace) -> str:
    if args.sqlite:
        return args.sqlite
    folder = Path(tempfile.gettempdir()) / "ssetape_bench_scale"
    folder.mkdir(exist_ok=True)
    return str(folder / f"scale-{args.exchanges}x{args.events_per}.db")


def wanted(args: argparse.Namespace) -> dict[str, Any]:
    return {"exchanges": args.exchanges, "events_per": args.events_per, "days": args.days,
            "seed": args.seed}  # fmt: skip


def kept(target: str, args: argparse.Namespace, is_pg: bool) -> dict[str, Any] | None:
    """The marker of a finished load with the same figures, if the store has one and holds
    its counts; else None."""
    if is_pg:
        admin = create_engine(make_url(args.db).set(database="postgres"))
        with admin.connect() as conn:
            there = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :d"),
                                 {"d": pg_db_name(args)}).first()  # fmt: skip
        admin.dispose()
        if there is None:
            return None
        url = target
    else:
        if not Path(target).exists():
            return None
        url = f"sqlite:///{target}"
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            value = conn.execute(text("SELECT value FROM settings WHERE key = :k"),
                                 {"k": MARK}).scalar()  # fmt: skip
            if value is None:
                return None
            mark = json.loads(value)
            if {k: mark.get(k) for k in wanted(args)} != wanted(args):
                return None
            count, events = conn.execute(
                text("SELECT count(*), sum(event_count) FROM exchanges")).one()  # fmt: skip
            if count != mark["exchanges"] or events != mark["events"]:
                return None
            return dict(mark)
    except Exception:
        return None
    finally:
        engine.dispose()


def schema_note(target: str) -> None:
    """Say so when opening will migrate a kept store (a migration of 100M events can take a
    long while, and every CLI run would otherwise do it first)."""
    from alembic.script import ScriptDirectory

    from ssetape.storage.store import alembic_config

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    url = target if "://" in target else f"sqlite:///{target}"
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rev = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    finally:
        engine.dispose()
    if rev != head:
        print(f"  the kept store is at schema {rev}, this ssetape's head is {head}: migrating "
              "it now (this can take long on 100M events)", flush=True)  # fmt: skip


def fresh_pg(args: argparse.Namespace) -> str:
    admin = create_engine(make_url(args.db).set(database="postgres"), isolation_level="AUTOCOMMIT")
    name = pg_db_name(args)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return pg_target(args)


def fresh_sqlite(path: str) -> str:
    for suffix in ("", "-wal", "-shm", ".stats.json"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return path


def make_partitions(store: Any, days: list[dt.date]) -> str:
    """Day partitions of ``events`` for ``days``, if the schema has them and
    ``ssetape.storage.partitions`` can make them; what was done, in words."""
    try:
        from ssetape.storage import partitions  # type: ignore[attr-defined]
    except ImportError:
        return "no ssetape.storage.partitions: rows go to the default partition"
    make = getattr(partitions, "make", None)
    if make is None:
        return "ssetape.storage.partitions has no make(): rows go to the default partition"
    made = 0
    for d in days:
        try:
            with store.engine.begin() as conn:
                made += bool(make(conn, d))
        except Exception as exc:  # the default partition takes that day's rows
            print(f"  partition of {d}: {str(exc).splitlines()[0]}")
    return f"{made} day partitions by ssetape.storage.partitions.make"


def generate(target: str, args: argparse.Namespace, is_pg: bool) -> dict[str, Any]:
    """Fill a fresh store; returns the marker (figures, times) it leaves in settings."""
    from ssetape.storage.store import Store

    end = dt.datetime.now(dt.UTC).replace(microsecond=0)
    t0 = time.perf_counter()
    plan = make_plan(args.exchanges, args.events_per, args.days, args.seed, end)
    total = plan.total_events
    print(f"  plan: {args.exchanges:,} exchanges, {total:,} events over {args.days} days to "
          f"{end:%Y-%m-%d %H:%M} UTC ({time.perf_counter() - t0:.1f} s)", flush=True)  # fmt: skip
    gen = Generator(plan, args.seed)
    with Store.open(target) as store:
        with store.engine.connect() as conn:
            cols = [c["name"] for c in __import__("sqlalchemy").inspect(conn).get_columns("events")]
        day = "day" in cols
        note = "events has no day column"
        if day:
            first = gen.started(0).date()
            days = [first + dt.timedelta(days=k) for k in range((end.date() - first).days + 1)]
            note = make_partitions(store, days)
        print(f"  schema: {note}", flush=True)
        t1 = time.perf_counter()
        if is_pg:
            load_pg(store, gen, args, day)
        else:
            load_sqlite(store, gen, args)
        loaded = time.perf_counter() - t1
        t2 = time.perf_counter()
        if is_pg:
            with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.exec_driver_sql("VACUUM (ANALYZE)")
        else:
            raw = sqlite3.connect(target, isolation_level=None)
            raw.execute("ANALYZE")
            save_sqlite_stats(raw, target)
            raw.close()
        analysed = time.perf_counter() - t2
        mark = {**wanted(args), "events": total, "end": end.isoformat(),
                "load_s": round(loaded, 1), "analyze_s": round(analysed, 1),
                "day_column": day}  # fmt: skip
        store.set_setting(MARK, json.dumps(mark))
    rate = total / loaded if loaded else 0
    print(f"  loaded in {loaded:,.0f} s ({rate:,.0f} events/s, "
          f"{args.exchanges / loaded:,.0f} exchanges/s); "
          f"{'VACUUM ANALYZE' if is_pg else 'ANALYZE'} {analysed:,.0f} s", flush=True)  # fmt: skip
    return mark


CHUNK = 10_000  # exchanges a transaction (about a million events at 100 each)


def load_pg(store: Any, gen: Generator, args: argparse.Namespace, day: bool) -> None:
    raw = store.engine.raw_connection()
    try:
        pg = raw.driver_connection
        with pg.cursor() as cur:
            superuser = cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
                                    ).fetchone()[0]  # fmt: skip
            # Loading only: the rows are consistent by construction, so the foreign key
            # triggers (one check per event) are skipped, and no commit waits for the WAL.
            if superuser:
                cur.execute("SET session_replication_role = replica")
            cur.execute("SET synchronous_commit = off")

            def oids(table: str, cols: list[str]) -> list[int]:
                found = dict(cur.execute(
                    "SELECT attname, atttypid::int FROM pg_attribute WHERE attrelid = %s::regclass "
                    "AND attnum > 0 AND NOT attisdropped", (table,)).fetchall())  # fmt: skip
                return [found[c] for c in cols]

            ecols = EVENT_COLUMNS + (["day"] if day else [])
            x_types, e_types = oids("exchanges", EXCHANGE_COLUMNS), oids("events", ecols)
            f_types = oids("findings", FINDING_COLUMNS)
            x_sql = f"COPY exchanges ({', '.join(EXCHANGE_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
            e_sql = f"COPY events ({', '.join(ecols)}) FROM STDIN (FORMAT BINARY)"
            f_sql = f"COPY findings ({', '.join(FINDING_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
            from psycopg.types.json import Json

            jcols = [k for k, c in enumerate(EXCHANGE_COLUMNS) if c in JSON_COLUMNS]
            done, t0 = 0, time.perf_counter()
            for lo in range(0, args.exchanges, CHUNK):
                hi = min(args.exchanges, lo + CHUNK)
                xs, fs, evs = gen.chunk(lo, hi)
                with cur.copy(x_sql) as copy:
                    copy.set_types(x_types)
                    for row in xs:
                        r = list(row)
                        for k in jcols:
                            if r[k] is not None:
                                r[k] = Json(r[k], dumps=_dumps)
                        copy.write_row(r)
                if fs:
                    with cur.copy(f_sql) as copy:
                        copy.set_types(f_types)
                        for row in fs:
                            copy.write_row(row)
                with cur.copy(e_sql) as copy:
                    copy.set_types(e_types)
                    write = copy.write_row
                    for row in gen.events(evs, day=day):
                        write(row)
                pg.commit()
                done += sum(e[1] for e in evs)
                progress(hi, args.exchanges, done, t0)
            cur.execute("SELECT setval(pg_get_serial_sequence('exchanges', 'id'), "
                        "(SELECT max(id) FROM exchanges))")  # fmt: skip
            pg.commit()
    finally:
        raw.close()


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def progress(hi: int, n: int, events: int, t0: float) -> None:
    if hi == n or hi % (CHUNK * 10) == 0:
        took = time.perf_counter() - t0
        print(f"    {hi:>10,} exchanges, {events:>13,} events, {took:7.0f} s, "
              f"{events / took:>9,.0f} events/s", flush=True)  # fmt: skip


def load_sqlite(store: Any, gen: Generator, args: argparse.Namespace) -> None:
    path = str(store.path)
    store.close()  # the loading connection must be the only one
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        # Loading only: no journal, no fsync, a big page cache; WAL again at the end.
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("PRAGMA cache_size = -1000000")
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")
        x_sql = (f"INSERT INTO exchanges ({', '.join(EXCHANGE_COLUMNS)}) VALUES "
                 f"({', '.join('?' * len(EXCHANGE_COLUMNS))})")  # fmt: skip
        e_sql = f"INSERT INTO events ({', '.join(EVENT_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)"
        f_sql = f"INSERT INTO findings ({', '.join(FINDING_COLUMNS)}) VALUES (?, ?, ?, ?, ?)"
        ti = EXCHANGE_COLUMNS.index("started_at")
        jcols = [k for k, c in enumerate(EXCHANGE_COLUMNS) if c in JSON_COLUMNS]
        done, t0 = 0, time.perf_counter()
        for lo in range(0, args.exchanges, CHUNK):
            hi = min(args.exchanges, lo + CHUNK)
            xs, fs, evs = gen.chunk(lo, hi)
            rows = []
            for row in xs:
                r = list(row)
                r[ti] = _fmt_sqlite(r[ti])
                for k in jcols:
                    if r[k] is not None:
                        r[k] = _dumps(r[k])
                rows.append(r)
            conn.execute("BEGIN")
            conn.executemany(x_sql, rows)
            conn.executemany(f_sql, fs)
            conn.executemany(e_sql, gen.events(evs, day=False))
            conn.execute("COMMIT")
            done += sum(e[1] for e in evs)
            progress(hi, args.exchanges, done, t0)
        conn.execute("PRAGMA locking_mode = NORMAL")
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()


def save_sqlite_stats(conn: sqlite3.Connection, path: str) -> None:
    rows = conn.execute("SELECT tbl, idx, stat FROM sqlite_stat1").fetchall()
    Path(f"{path}.stats.json").write_text(json.dumps(rows))


def set_sqlite_stats(path: str, on: bool) -> None:
    """sqlite_stat1 as ANALYZE left it (``on``), or empty (a store nothing analysed)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        saved = Path(f"{path}.stats.json")
        if on and not saved.exists():
            conn.execute("ANALYZE")
            save_sqlite_stats(conn, path)
        conn.execute("BEGIN")
        with contextlib.suppress(sqlite3.OperationalError):  # no sqlite_stat1 yet
            conn.execute("DELETE FROM sqlite_stat1")
        if on:
            conn.executemany("INSERT INTO sqlite_stat1 VALUES (?, ?, ?)",
                             json.loads(saved.read_text()))  # fmt: skip
        conn.execute("COMMIT")
    finally:
        conn.close()


def store_size(target: str, is_pg: bool, *, detail: bool = True) -> tuple[int, str]:
    """Bytes of the whole store, and a breakdown (SQLite's reads every page: minutes on a
    big store, so only when ``detail``)."""
    if not is_pg:
        total = sum(Path(f"{target}{s}").stat().st_size for s in ("", "-wal")
                    if Path(f"{target}{s}").exists())  # fmt: skip
        if not detail:
            return total, "file size"
        conn = sqlite3.connect(target)
        try:
            parts = conn.execute(
                "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC LIMIT 6"
            ).fetchall()
            detail = ", ".join(f"{n} {b / 2**30:.2f} GiB" for n, b in parts)
        except sqlite3.OperationalError:  # no dbstat in this build
            detail = ""
        finally:
            conn.close()
        return total, detail
    engine = create_engine(target)
    try:
        with engine.connect() as conn:
            total = conn.execute(text("SELECT pg_database_size(current_database())")).scalar()
            # A partitioned table's size is its partitions' (pg_partition_tree: the table
            # alone when it has none).
            rows = conn.execute(text(
                "SELECT t, coalesce((SELECT sum(pg_total_relation_size(relid)) "
                "FROM pg_partition_tree(t::regclass)), pg_total_relation_size(t::regclass)), "
                "coalesce((SELECT sum(pg_indexes_size(relid)) "
                "FROM pg_partition_tree(t::regclass)), pg_indexes_size(t::regclass)) "
                "FROM unnest(ARRAY['events', 'exchanges', 'findings']) AS t ORDER BY 2 DESC"
            )).all()  # fmt: skip
            parts = [f"{name} {size / 2**30:.2f} GiB (indexes {idx / 2**30:.2f})"
                     for name, size, idx in rows]  # fmt: skip
    finally:
        engine.dispose()
    return int(total or 0), ", ".join(parts)


# -- what is timed ---------------------------------------------------------------------------


@dataclass
class Probe:
    """The values the filters use, chosen in the store."""

    mid_id: int
    mid_uid: str
    session: str
    matches: dict[str, int] = field(default_factory=dict)


def probe(store: Any, args: argparse.Namespace) -> Probe:
    from ssetape.storage.models import Exchange

    mid = max(1, args.exchanges // 2)
    with store.engine.connect() as conn:
        uid = conn.execute(select(Exchange.uid).where(Exchange.id == mid)).scalar_one()
        session = conn.execute(
            select(Exchange.session).where(Exchange.id >= mid, Exchange.session.is_not(None))
            .order_by(Exchange.id).limit(1)).scalar_one()  # fmt: skip
    return Probe(mid, uid, session)


@dataclass
class Command:
    label: str
    cli: list[str]  # after `ssetape`, without --db
    run: Callable[[Any], Any]  # the same reads in-process, given the Store
    count: Callable[[Any], int] | None = None  # exchanges it matches


def commands(p: Probe) -> list[Command]:
    from ssetape.analysis.stats import Stats
    from ssetape.storage.filters import ExchangeFilter, parse_since
    from ssetape.storage.queries import Queries
    from ssetape.storage.runs import Runs
    from ssetape.storage.standby import standby_state
    from ssetape.views.documents import EVENTS_SHOWN, write_detail
    from ssetape.views.timeline import Timeline
    from ssetape.views.timeline_chart import TimelineChart

    def opened(store: Any) -> None:  # what every command does when it opens the store
        Runs(store).mark_gone_interrupted()
        standby_state(store.engine)

    def lister(**kw: Any) -> Callable[[Any], Any]:
        def run(store: Any) -> Any:
            f = ExchangeFilter(**{k: parse_since(v) if k == "since" else v for k, v in kw.items()})
            return Queries(store).exchanges(f, limit=50)

        return run

    def counter(**kw: Any) -> Callable[[Any], int]:
        def count(store: Any) -> int:
            from ssetape.storage.models import Exchange

            f = ExchangeFilter(**{k: parse_since(v) if k == "since" else v for k, v in kw.items()})
            stmt = f.apply(select(func.count()).select_from(Exchange))
            with store.engine.connect() as conn:
                return int(conn.execute(stmt).scalar_one())

        return count

    def stats(by: str | None, **kw: Any) -> Callable[[Any], Any]:
        def run(store: Any) -> Any:
            f = ExchangeFilter(**{k: parse_since(v) if k == "since" else v for k, v in kw.items()})
            rows = Stats(store).groups(by, f)
            Runs(store).totals()
            return rows

        return run

    def show(key: int | str) -> Callable[[Any], Any]:
        def run(store: Any) -> Any:
            q = Queries(store)
            x = q.exchange(key)
            assert x is not None
            q.findings(x.id)
            q.event_span(x.id)
            return list(q.events(x.id, start=0, stop=EVENTS_SHOWN))

        return run

    def show_json(store: Any) -> Any:
        q = Queries(store)
        x = q.exchange(p.mid_id)
        assert x is not None
        out = io.BytesIO()
        write_detail(out, x, q, q.findings(x.id), full=False, start=0, stop=EVENTS_SHOWN)
        return out.tell()

    def show_timeline(store: Any) -> Any:
        q = Queries(store)
        x = q.exchange(p.mid_id)
        assert x is not None
        q.findings(x.id)
        return TimelineChart(Timeline.of(x, q)).render(width=120)

    def L(label: str, cli: list[str], **kw: Any) -> Command:
        flags = {"model": "--model", "host": "--host", "api": "--api", "outcome": "--outcome",
                 "session": "--session", "since": "--since", "text": "--grep"}  # fmt: skip
        args = ["list", *itertools.chain.from_iterable((flags[k], v) for k, v in kw.items())]
        return Command(label or " ".join(args), args, lister(**kw), counter(**kw))

    return [
        Command("(process start: ssetape list --help)", ["list", "--help"], lambda s: None),
        Command("(store open: mark_gone_interrupted, standby check)", [], opened),
        L("list", []),
        L("", [], model="claude-sonnet-4"),
        L("", [], model="amazon.nova-pro-v1:0"),
        L("", [], host="api.anthropic.com"),
        L("", [], host="api.cohere.com"),
        L("", [], api="messages"),
        L("", [], api="cohere_chat"),
        L("", [], outcome="error"),
        L("", [], outcome="no_response"),
        L("", [], session=p.session),
        L("", [], since="1d"),
        L("", [], since="1h"),
        L("", [], text=RARE_WORD),
        # Values no exchange has: the first page's worst case (the whole walk for nothing).
        L("", [], model=ABSENT_MODEL),
        L("", [], host=ABSENT_HOST),
        L("", [], text=ABSENT_WORD),
        Command(
            "stats --since 1d",
            ["stats", "--since", "1d"],
            stats(None, since="1d"),
            counter(since="1d"),
        ),
        Command(
            "stats --since 1d --by model",
            ["stats", "--since", "1d", "--by", "model"],
            stats("model", since="1d"),
            counter(since="1d"),
        ),
        Command("stats (whole store; not a goal)", ["stats"], stats(None), counter()),
        Command(f"show {p.mid_id}", ["show", str(p.mid_id)], show(p.mid_id)),
        Command(f"show {p.mid_id} --json", ["show", str(p.mid_id), "--json"], show_json),
        Command(
            f"show {p.mid_id} --timeline", ["show", str(p.mid_id), "--timeline"], show_timeline
        ),
        Command("show UID", ["show", p.mid_uid], show(p.mid_uid)),
    ]


@dataclass
class Timed:
    first: float
    best: float
    median: float
    cpu: float | None = None  # the median CPU time (user + system) of the CLI's process


def timed(fn: Callable[[], Any], rounds: int, *, child: bool = False) -> Timed:
    took, cpu = [], []
    for _ in range(rounds):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        fn()
        took.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return Timed(took[0], min(took), statistics.median(took),
                 statistics.median(cpu) if child else None)  # fmt: skip


def run_cli(argv: list[str]) -> None:
    env = {**os.environ, "COLUMNS": "160", "NO_COLOR": "1"}
    p = subprocess.run([str(BIN / "ssetape"), *argv], capture_output=True, env=env)
    if p.returncode:
        raise RuntimeError(f"ssetape {' '.join(argv)} exited {p.returncode}: "
                           f"{p.stderr.decode()[-400:]}")  # fmt: skip


@dataclass
class Captured:
    label: str
    statements: list[tuple[str, Any]]


def capture(store: Any, fn: Callable[[Any], Any]) -> list[tuple[str, Any]]:
    """The SQL statements ``fn(store)`` sends, in order, with their parameters."""
    got: list[tuple[str, Any]] = []

    def listen(_c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, _many: bool) -> None:
        got.append((statement, params))

    event.listen(store.engine, "before_cursor_execute", listen)
    try:
        fn(store)
    finally:
        event.remove(store.engine, "before_cursor_execute", listen)
    return got


SCAN_PG = re.compile(r"(Parallel )?Seq Scan on (\w+)")
# An index walk on exchanges that reads this many rows to keep a few is flagged as a scan.
WALK_PG = re.compile(r"(Parallel )?Index (Only )?Scan (Backward )?using (\w+) on exchanges")
WALKED = 100_000
SCAN_SQLITE = re.compile(r"\bSCAN (\w+)(?: USING (?:COVERING )?INDEX (\w+))?")


def explain(store: Any, statement: str, params: Any) -> tuple[str, list[str], float | None]:
    """(plan text, flags, seconds the statement took) of one SELECT."""
    flags: list[str] = []
    if store.is_sqlite:
        raw = store.engine.raw_connection()
        try:
            cur = raw.driver_connection.cursor()
            rows = cur.execute("EXPLAIN QUERY PLAN " + statement, params or ()).fetchall()
            t0 = time.perf_counter()
            cur.execute(statement, params or ()).fetchall()
            took = time.perf_counter() - t0
        finally:
            raw.close()
        depth = {0: 0}
        lines = []
        for node, parent, _nu, detail in rows:
            depth[node] = depth.get(parent, 0) + 1
            lines.append("  " * (depth[node] - 1) + detail)
            m = SCAN_SQLITE.search(detail)
            if m and m.group(1).startswith("events"):
                flags.append(f"SCANS events ({detail})")
            elif m and m.group(1) == "exchanges" and not m.group(2):
                flags.append("FULL SCAN of exchanges")
            elif m and m.group(1) == "exchanges" and " LIMIT " not in statement.upper():
                flags.append(f"FULL SCAN of exchanges (every entry of index {m.group(2)})")
            elif m and m.group(1) == "exchanges":
                flags.append(f"walks index {m.group(2)} in order until the LIMIT is filled")
            if "TEMP B-TREE" in detail:
                flags.append(f"sorts: {detail}")
        return "\n".join(lines), flags, took
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + statement, params).all()
    lines = [r[0] for r in rows]
    took = None
    for k, line in enumerate(lines):
        t = re.search(r"Execution Time: ([\d.]+) ms", line)
        if t:
            took = float(t.group(1)) / 1000
        m = SCAN_PG.search(line)
        walk = WALK_PG.search(line)
        if not (m and m.group(2).startswith(("events", "exchanges"))) and not walk:
            continue
        # What the node read: an empty partition's Seq Scan reads no page and is no scan.
        pages = removed = 0
        rows_m = re.search(r"actual time=\S+ rows=(\d+) loops=(\d+)", line)
        loops = int(rows_m.group(2)) if rows_m else 1
        got = int(rows_m.group(1)) * loops if rows_m else 0
        for below in lines[k + 1 :]:
            if "->" in below:
                break
            b = re.search(r"Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?", below)
            if b:
                pages += int(b.group(1) or 0) + int(b.group(2) or 0)
            r = re.search(r"Rows Removed by Filter: (\d+)", below)
            if r:  # an average over the loops (parallel workers)
                removed += int(r.group(1)) * loops
        if m:
            if removed == 0 and got == 0:  # an empty partition (a page or two of nothing)
                continue
            what = "SCANS events" if m.group(2).startswith("events") else "FULL SCAN of exchanges"
            flags.append(f"{what} ({m.group(0)}: {pages:,} pages, {got + removed:,} rows read)")
        elif walk and removed >= WALKED:
            flags.append(f"WALKS exchanges ({walk.group(0)}: {got + removed:,} rows read for "
                         f"{got:,} kept, {pages:,} pages)")  # fmt: skip
    return "\n".join(lines), flags, took


def bench_store(target: str, name: str, args: argparse.Namespace, out: dict[str, Any]) -> None:
    """Time every command on one store; rows for the tables and the plans in ``out``."""
    from ssetape.storage.store import Store

    store = Store.open(target)
    print(f"  load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    try:
        p = probe(store, args)
        cmds = [c for c in commands(p) if c.label.startswith("(process")
                or re.search(args.only or "", c.label)]  # fmt: skip
        db = target
        for c in cmds:
            if c.count is not None:
                out["matches"][name, c.label] = c.count(store)
        for c in cmds:
            if c.cli:
                argv = [*c.cli] if c.cli[-1] == "--help" else [*c.cli, "--db", db]
                t = timed(lambda argv=argv: run_cli(argv), args.rounds, child=True)
                out["cli"].append((name, c.label, t))
                print(f"  cli  {c.label:58} first {t.first:7.3f}  best {t.best:7.3f}  "
                      f"median {t.median:7.3f} s, CPU {t.cpu:6.3f} s", flush=True)  # fmt: skip
        for c in cmds:
            if c.cli and c.cli[-1] == "--help":
                continue
            t = timed(lambda c=c: c.run(store), args.rounds)
            out["inproc"].append((name, c.label, t))
            print(f"  in-process {c.label:52} first {t.first:7.3f}  best {t.best:7.3f}  "
                  f"median {t.median:7.3f} s", flush=True)  # fmt: skip
        for c in cmds:
            if c.cli and c.cli[-1] == "--help":
                continue
            seen: set[str] = set()
            for statement, params in capture(store, c.run):
                key = statement + repr(params)
                if key in seen:
                    continue
                seen.add(key)
                head = statement.lstrip().split(None, 1)[0].upper()
                if head in ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"):
                    continue
                if head not in ("SELECT", "WITH"):
                    out["plans"].append((name, c.label, statement, params, "(not a SELECT: not "
                                         "explained)", [], None))  # fmt: skip
                    continue
                plan, flags, took = explain(store, statement, params)
                out["plans"].append((name, c.label, statement, params, plan, flags, took))
    finally:
        store.close()
        print(f"  load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


@contextlib.contextmanager
def candidates(
    target: str, ddls: list[str], is_pg: bool, *, stats: bool, out: dict[str, Any]
) -> Iterator[None]:
    """The candidate indexes made (and analysed when ``stats``) for the pass, dropped after:
    the kept store stays as the migrations made it."""
    made: list[str] = []
    url = target if is_pg else f"sqlite:///{target}"
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for ddl in ddls:
                for stmt in filter(None, (s.strip() for s in ddl.split(";"))):
                    t0 = time.perf_counter()
                    conn.exec_driver_sql(stmt)
                    took = time.perf_counter() - t0
                    m = re.match(r"CREATE (?:UNIQUE )?INDEX (?:CONCURRENTLY )?"
                                 r"(?:IF NOT EXISTS )?(\w+)", stmt, re.I)  # fmt: skip
                    if m:
                        made.append(m.group(1))
                        if stats:
                            conn.exec_driver_sql("ANALYZE exchanges" if is_pg
                                                 else f"ANALYZE {m.group(1)}")  # fmt: skip
                    out["candidates"].append((target, stmt, took))
                    print(f"  candidate: {stmt} ({took:.1f} s)", flush=True)
        yield
    finally:
        with engine.connect() as conn:
            for name in made:
                conn.exec_driver_sql(f"DROP INDEX IF EXISTS {name}")
        engine.dispose()


# -- main ------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    ap.add_argument(
        "--db",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/test",
        help="a PostgreSQL URL: its server gets the benchmark's own database",
    )
    ap.add_argument("--pg-database", help="that database's name (default: by the figures)")
    ap.add_argument("--sqlite", help="the SQLite file (default: in $TMPDIR/ssetape_bench_scale)")
    ap.add_argument("--exchanges", type=int, default=1_000_000)
    ap.add_argument("--events-per", type=int, default=100, help="events per exchange, on average")
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--rounds", type=int, default=5, help="runs of each command")
    ap.add_argument(
        "--keep", action="store_true", help="reuse a store this script filled with the same figures"
    )
    ap.add_argument(
        "--sqlite-stats",
        choices=("analyze", "none", "both"),
        default="both",
        help="time SQLite with ANALYZE's statistics, without (as ssetape leaves a store), or both",
    )
    ap.add_argument("--generate-only", action="store_true")
    ap.add_argument("--only", metavar="REGEX", help="only the commands whose label matches")
    ap.add_argument(
        "--index",
        action="append",
        default=[],
        metavar="BACKEND:DDL",
        help="a candidate index (sqlite: or postgresql:, then CREATE INDEX ...; "
        "statements split on ';'): timed again with it, then it is dropped",
    )
    ap.add_argument(
        "--no-base",
        action="store_true",
        help="with --index: only the pass with the candidate indexes",
    )
    args = ap.parse_args()
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} cores; {args.exchanges:,} "
        f"exchanges x {args.events_per} events over {args.days} days\n",
        flush=True,
    )
    backends = ["postgresql", "sqlite"] if args.backend == "both" else [args.backend]
    out: dict[str, Any] = {"cli": [], "inproc": [], "plans": [], "matches": {}, "stores": [],
                           "candidates": []}  # fmt: skip
    for backend in backends:
        is_pg = backend == "postgresql"
        target = pg_target(args) if is_pg else sqlite_target(args)
        shown = make_url(target).render_as_string(hide_password=True) if is_pg else target
        print(f"{backend}: {shown}", flush=True)
        mark = kept(target, args, is_pg) if args.keep else None
        reused = mark is not None
        if reused:
            print(f"  kept: {mark['events']:,} events, generated up to {mark['end']}", flush=True)
            schema_note(target)
        else:
            target = fresh_pg(args) if is_pg else fresh_sqlite(target)
            mark = generate(target, args, is_pg)
        size, detail = store_size(target, is_pg, detail=is_pg or not reused)
        out["stores"].append((backend, shown, mark, size, detail))
        print(f"  size {size / 2**30:.2f} GiB ({detail})", flush=True)
        if args.generate_only:
            continue
        ddls = [d.split(":", 1)[1] for d in args.index if d.split(":", 1)[0] == backend]
        if is_pg:
            if not (args.no_base and ddls):
                bench_store(target, "PostgreSQL", args, out)
            if ddls:
                with candidates(target, ddls, is_pg, stats=True, out=out):
                    bench_store(target, "PostgreSQL + candidates", args, out)
        else:
            passes = {"both": [False, True], "none": [False], "analyze": [True]}[args.sqlite_stats]
            for on in passes if not (args.no_base and ddls) else []:
                set_sqlite_stats(target, on)
                name = "SQLite, ANALYZE" if on else "SQLite, no statistics"
                print(f" {name}", flush=True)
                bench_store(target, name, args, out)
            if ddls:
                on = args.sqlite_stats == "analyze"
                set_sqlite_stats(target, on)
                name = f"SQLite, {'ANALYZE' if on else 'no statistics'} + candidates"
                print(f" {name}", flush=True)
                with candidates(target, ddls, is_pg, stats=on, out=out):
                    bench_store(target, name, args, out)
    if not args.generate_only:
        report(out, args)


def report(out: dict[str, Any], args: argparse.Namespace) -> None:
    print("\n## Stores\n")
    print("| backend | store | exchanges | events | load s | ANALYZE s | size |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for backend, shown, mark, size, _detail in out["stores"]:
        print(f"| {backend} | {shown} | {mark['exchanges']:,} | {mark['events']:,} | "
              f"{mark.get('load_s', '?')} | {mark.get('analyze_s', '?')} | "
              f"{size / 2**30:.1f} GiB |")  # fmt: skip
    if out["candidates"]:
        print("\nCandidate indexes (the `+ candidates` passes; made for them, dropped after):\n")
        for target, stmt, took in out["candidates"]:
            where = "SQLite" if "://" not in target else "PostgreSQL"
            print(f"- {where}: `{stmt}` ({took:.1f} s to build)")
    print("\n## CLI, a fresh process each run (wall time, s)\n")
    print(f"{args.rounds} runs each; `matches`: the exchanges the filter matches.\n")
    print(
        "`- start`: the median less the median of `list --help` (Python and ssetape's "
        "imports) on the same backend; `CPU`: the process's own CPU time (user + system, "
        "median), which other load on the machine stretches less than the wall time.\n"
    )
    print("| backend | command | matches | first | best | median | - start | CPU | under 1 s? |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    start = {name: t.median for name, label, t in out["cli"] if label.startswith("(process")}
    for name, label, t in out["cli"]:
        n = out["matches"].get((name, label))
        ok = "yes" if t.median < 1 else "**no**"
        less = "" if label.startswith("(process") else f"{t.median - start.get(name, 0):.3f}"
        print(f"| {name} | `{label}` | {'' if n is None else f'{n:,}'} | {t.first:.3f} | "
              f"{t.best:.3f} | {t.median:.3f} | {less} | {t.cpu or 0:.3f} | {ok} |")  # fmt: skip
    print("\n## In-process, through storage.queries.Queries (s)\n")
    print("| backend | command | first | best | median | under 1 s? |")
    print("|---|---|---:|---:|---:|---|")
    for name, label, t in out["inproc"]:
        ok = "yes" if t.median < 1 else "**no**"
        print(f"| {name} | `{label}` | {t.first:.4f} | {t.best:.4f} | {t.median:.4f} | {ok} |")
    print("\n## Plans\n")
    flagged = []
    plan_of: dict[tuple[str, str], str] = {}
    for name, label, statement, params, plan, flags, took in out["plans"]:
        t = "" if took is None else f" ({took * 1000:.1f} ms)"
        print(f"### {name}: `{label}`{t}\n")
        print("```sql\n" + statement.strip() + "\n```")
        print(f"parameters: {params!r}\n")
        key = (name, statement + repr(params))
        if key in plan_of:
            print(f"(the plan shown under `{plan_of[key]}`)")
        else:
            plan_of[key] = label
            print("```\n" + plan + "\n```")
        if flags:
            print("flags: " + "; ".join(flags))
            if any(f.startswith(("SCANS", "FULL SCAN", "WALKS")) for f in flags) or (took or 0) > 1:
                flagged.append((name, label, flags, took))
        elif (took or 0) > 1:
            flagged.append((name, label, ["over 1 s"], took))
        print()
    print("## Flagged statements\n")
    if not flagged:
        print("none")
    for name, label, flags, took in flagged:
        t = "" if took is None else f" {took * 1000:.1f} ms"
        print(f"- {name}: `{label}`{t}: {'; '.join(flags)}")


if __name__ == "__main__":
    main()
