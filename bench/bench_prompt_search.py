"""Search by prompt at scale: `list --grep PHRASE` on a store of 100k exchanges with prompts,
on SQLite and PostgreSQL, with the plans.

    python -m bench.bench_prompt_search [--backend sqlite|postgresql|both]
        [--db postgresql+psycopg://postgres@127.0.0.1:5432/test] [--sqlite PATH]
        [--exchanges 100000] [--rounds 5] [--keep]

The store is made by ``Store.open`` (the newest schema: SQLite's FTS5 text index over the
output, the path and the request's text, PostgreSQL's trigram indexes) and filled straight,
no proxy: each exchange a chat request whose body holds a system prompt (one of 20) and 1-8
turns of made-up words (about 2.5 KB; one in 50 a long agent history of 30-60 KB), its
``request_text`` as the recorder's analysis extracts it (``analysis.request_text``, timed
here too), and an output of a few hundred characters. Planted: a unique invoice number in 6
prompts, a phrase in 3 % of them, and a phrase nowhere. PostgreSQL gets a database of its
own (``ssetape_bench_prompts_<exchanges>``); SQLite a file in ``$TMPDIR``. ``--keep`` reuses
a store this script filled with the same figures.

Timed, ``--rounds`` times each (first, best and median): what `list --grep` asks the store
in-process (``Queries.exchanges`` for the first page of 50, then ``TextMatches.around`` for
the match shown under each), and the command itself as a fresh process of the real CLI. The
page's statements are explained (SQLite ``EXPLAIN QUERY PLAN``, PostgreSQL ``EXPLAIN
(ANALYZE, BUFFERS)``). For reference, the same search without its index (SQLite: the
filter's LIKE alone; PostgreSQL: bitmap and index scans off), and SQLite's rebuild of the
text index (what migration 0015 costs a store of this size).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import create_engine, delete, func, insert, select, text, update
from sqlalchemy.engine import make_url

from bench.bench_store_scale import capture, explain, run_cli, timed
from ssetape.analysis.request_text import request_text
from ssetape.storage.filters import ExchangeFilter
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.storage.text_index import TABLE
from ssetape.storage.text_matches import TextMatches

SEED = 40
MARK = "bench_prompt_search"
INVOICE = "INV-2026-000417"
COMMON = "our refund policy"
ABSENT = "qwertyuiop zxcvbnm"
SYSTEMS = 20
BATCH = 2000


def words(rng: random.Random, n: int) -> list[str]:
    syllables = ["ka", "lo", "mi", "ren", "to", "sa", "vel", "dor", "pi", "an", "es", "tur",
                 "ga", "ne", "ul", "fo", "ri", "ste", "qua", "bel"]  # fmt: skip
    common = [
        "the", "a", "of", "to", "and", "in", "is", "for", "on", "with", "that", "this", "it",
        "as", "be", "are", "by", "at", "from", "or", "your", "please", "can", "you", "what",
        "how", "when", "invoice", "order", "account", "customer", "report",
    ]  # fmt: skip
    made = {"".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(n)}
    return [*common * 20, *sorted(made)]


def sentence(rng: random.Random, vocab: list[str], n: int) -> str:
    return " ".join(rng.choices(vocab, k=n)).capitalize() + "."


def prompts(n: int, seed: int) -> tuple[list[dict[str, Any]], dict[str, list[int]]]:
    """The request bodies, and which ones (by index) got each planted phrase."""
    rng = random.Random(seed)
    vocab = words(rng, 4000)
    systems = [" ".join(sentence(rng, vocab, rng.randint(8, 20)) for _ in range(rng.randint(3, 8)))
               for _ in range(SYSTEMS)]  # fmt: skip
    planted: dict[str, list[int]] = {INVOICE: rng.sample(range(n), 6), COMMON: []}
    invoices = set(planted[INVOICE])
    bodies = []
    for i in range(n):
        turns = rng.randint(1, 8) if rng.random() > 0.02 else rng.randint(60, 120)
        msgs = [{"role": "system", "content": systems[i % SYSTEMS]}]
        for t in range(turns):
            said = " ".join(
                sentence(rng, vocab, rng.randint(5, 25)) for _ in range(rng.randint(1, 4))
            )
            msgs.append({"role": "user" if t % 2 == 0 else "assistant", "content": said})
        last = msgs[-1]
        if i in invoices:
            last["content"] += f" Please check invoice {INVOICE} again."
        if rng.random() < 0.03:
            planted[COMMON].append(i)
            last["content"] += f" What is {COMMON}?"
        bodies.append({"model": "gpt-4o-mini", "stream": True, "messages": msgs})
    return bodies, planted


def rows(bodies: list[dict[str, Any]], seed: int) -> tuple[list[dict[str, Any]], float]:
    """Exchange rows for the bodies; and the seconds ``request_text`` took for all."""
    rng = random.Random(seed + 1)
    vocab = words(rng, 2000)
    end = dt.datetime(2026, 12, 6, tzinfo=dt.UTC)
    out, took = [], 0.0
    for i, body in enumerate(bodies):
        raw = orjson.dumps(body)
        t0 = time.perf_counter()
        prompt = request_text("chat_completions", orjson.loads(raw))
        took += time.perf_counter() - t0
        out.append({
            "uid": f"{i:032x}", "started_at": end - dt.timedelta(seconds=(len(bodies) - i) * 13),
            "method": "POST", "scheme": "https", "host": "api.openai.com", "port": 443,
            "path": "/v1/chat/completions", "query": "", "http_version": "HTTP/1.1",
            "request_headers": [["content-type", "application/json"]], "request_body": raw,
            "fingerprint": f"{i:064x}", "status": 200, "is_stream": True, "state": "completed",
            "api": "chat_completions", "model": "gpt-4o-mini", "outcome": "completed",
            "output_text": " ".join(sentence(rng, vocab, rng.randint(5, 25))
                                    for _ in range(rng.randint(1, 8))),
            "request_text": prompt, "event_count": 0,
        })  # fmt: skip
    return out, took


def target(args: argparse.Namespace, is_pg: bool) -> str:
    if not is_pg:
        return args.sqlite or str(
            Path(tempfile.gettempdir()) / f"ssetape_bench_prompts_{args.exchanges}.db"
        )
    return (
        make_url(args.db)
        .set(database=f"ssetape_bench_prompts_{args.exchanges}")
        .render_as_string(hide_password=False)
    )


def fresh(url: str, is_pg: bool) -> None:
    if not is_pg:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{url}{suffix}").unlink(missing_ok=True)
        return
    name = make_url(url).database
    admin = create_engine(make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()


def load(url: str, is_pg: bool, args: argparse.Namespace) -> dict[str, Any]:
    """The planted phrases' expected counts, from a store this script filled or fills now."""
    want = {"exchanges": args.exchanges, "seed": SEED}
    if args.keep and (is_pg or Path(url).exists()):
        with Store.open(url) as store:
            done = store.setting(MARK)
        if done and orjson.loads(done)["want"] == want:
            print(f"  reusing {url}")
            return dict(orjson.loads(done))
    fresh(url, is_pg)
    bodies, planted = prompts(args.exchanges, SEED)
    data, extract_s = rows(bodies, SEED)
    del bodies
    sizes = [len(r["request_text"].encode()) for r in data]
    t0 = time.perf_counter()
    with Store.open(url) as store:
        for start in range(0, len(data), BATCH):
            with store.writing_engine.begin() as conn:
                conn.execute(insert(Exchange), data[start : start + BATCH])
        load_s = time.perf_counter() - t0
        if is_pg:  # as autovacuum would, before the queries are timed
            with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.exec_driver_sql("VACUUM ANALYZE exchanges")
        info = {
            "want": want, "load_s": round(load_s, 1),
            "extract_us": round(extract_s / len(data) * 1e6, 1),
            "prompt_bytes_median": int(statistics.median(sizes)),
            "prompt_bytes_total": sum(sizes), "counts": {k: len(v) for k, v in planted.items()},
        }  # fmt: skip
        store.set_setting(MARK, orjson.dumps(info).decode())
    print(f"  loaded {len(data):,} exchanges in {load_s:.1f} s")
    return info


def saving_cost(url: str, is_pg: bool, n: int = 2000, rounds: int = 3) -> None:
    """What the prompt costs the recorder: the UPDATE that saves an exchange's analysis at the
    end of its stream (its output text, now with its request's text), timed with and without
    the request's text on the same rows, in one transaction (as the writer saves a batch),
    the two interleaved ``rounds`` times (medians)."""
    fresh(url, is_pg)
    bodies, _ = prompts(n, SEED + 2)
    data, _ = rows(bodies, SEED + 2)
    began = [{**r, "output_text": None, "request_text": None} for r in data]
    took: dict[bool, list[float]] = {False: [], True: []}
    with Store.open(url) as store:
        for _ in range(rounds):
            for with_prompt in (False, True):
                with store.writing_engine.begin() as conn:
                    conn.execute(delete(Exchange))
                    conn.execute(insert(Exchange), began)
                    ids = list(conn.execute(select(Exchange.id).order_by(Exchange.id)).scalars())
                t0 = time.perf_counter()
                with store.writing_engine.begin() as conn:
                    for xid, r in zip(ids, data, strict=True):
                        values = {"output_text": r["output_text"], "outcome": "completed"}
                        if with_prompt:
                            values["request_text"] = r["request_text"]
                        conn.execute(update(Exchange).where(Exchange.id == xid).values(values))
                took[with_prompt].append((time.perf_counter() - t0) / n)
    a, b = statistics.median(took[False]), statistics.median(took[True])
    print(
        f"  the analysis' UPDATE at a stream's end: {a * 1e3:.3f} ms with the output alone, "
        f"{b * 1e3:.3f} ms with the prompt too (+{(b - a) * 1e3:.3f} ms an exchange)"
    )
    fresh(url, is_pg)


def list_grep(store: Store, phrase: str) -> int:
    """What `ssetape list --grep PHRASE` asks the store: the first page, then its matches."""
    found = Queries(store).exchanges(ExchangeFilter(text=phrase), limit=50)
    TextMatches(store).around([x.id for x in found], phrase)
    return len(found)


def unindexed(store: Store, phrase: str) -> float:
    """Seconds the filter's clause takes to list a first page without the text indexes."""
    stmt = ExchangeFilter(text=phrase).apply(select(Exchange.id))
    stmt = stmt.order_by(Exchange.started_at.desc()).limit(50)
    with store.engine.connect() as conn:
        if not store.is_sqlite:
            conn.exec_driver_sql("SET enable_bitmapscan = off")
        t0 = time.perf_counter()
        conn.execute(stmt).all()
        return time.perf_counter() - t0


def bench(url: str, is_pg: bool, args: argparse.Namespace) -> None:
    name = "PostgreSQL" if is_pg else "SQLite"
    print(f"\n== {name}: {url}")
    info = load(url, is_pg, args)
    print(f"  request_text: {info['extract_us']} µs a request (median prompt "
          f"{info['prompt_bytes_median']:,} bytes, {info['prompt_bytes_total'] / 2**20:.0f} MiB "
          "in all)")  # fmt: skip
    db = ["--db", url]
    with Store.open(url) as store:
        if not is_pg:
            size = os.path.getsize(url) / 2**20
            print(f"  store {size:,.0f} MiB")
        cases = [(INVOICE, info["counts"][INVOICE]), (COMMON, info["counts"][COMMON]),
                 (ABSENT, 0)]  # fmt: skip
        start = timed(lambda: run_cli(["list", "--help"]), args.rounds, child=True)
        print(f"  the process's start alone (list --help): {start.median:.3f} s, "
              f"CPU {start.cpu or 0:.3f} s")  # fmt: skip
        print(f"  {'phrase':<24} {'matches':>8} {'shown':>6} {'in-process s':>22} "
              f"{'CLI s':>22} {'CLI CPU s':>9} {'no index s':>11}")  # fmt: skip
        plans = []
        for phrase, n in cases:
            shown = list_grep(store, phrase)
            inproc = timed(lambda p=phrase: list_grep(store, p), args.rounds)
            cli = timed(lambda p=phrase: run_cli(["list", *db, "--grep", p]), args.rounds,
                        child=True)  # fmt: skip
            scan = unindexed(store, phrase)
            print(f"  {phrase!r:<24} {n:>8,} {shown:>6} "
                  f"{inproc.median:>8.3f} ({inproc.best:.3f}-{inproc.first:.3f}) "
                  f"{cli.median:>8.3f} ({cli.best:.3f}-{cli.first:.3f}) {cli.cpu or 0:>9.3f} "
                  f"{scan:>11.3f}")  # fmt: skip
            got = capture(store, lambda s, p=phrase: list_grep(s, p))
            page = [(s, p) for s, p in got if s.startswith("SELECT exchanges.id")]
            for stmt, params in page:
                plan, flags, took = explain(store, stmt, params)
                plans.append((phrase, plan, flags, took))
        for phrase, plan, flags, took in plans:
            spent = f"{took * 1000:.1f} ms" if took is not None else "?"
            print(
                f"\n  plan of the page for {phrase!r} ({spent}){' ' + str(flags) if flags else ''}"
            )
            print("    " + plan.replace("\n", "\n    "))
        if not is_pg:
            with store.writing_engine.begin() as conn:
                t0 = time.perf_counter()
                conn.exec_driver_sql(f"INSERT INTO {TABLE}({TABLE}) VALUES ('rebuild')")
                rebuilt = time.perf_counter() - t0
            print(f"\n  text index rebuilt (migration 0015's cost) in {rebuilt:.1f} s")
        else:
            with store.engine.connect() as conn:
                got_size = conn.execute(
                    select(
                        func.pg_size_pretty(func.pg_relation_size("ix_exchanges_request_text_trgm"))
                    )
                ).scalar_one()
            print(f"\n  ix_exchanges_request_text_trgm: {got_size}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    ap.add_argument(
        "--db",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/test",
        help="a PostgreSQL URL: its server gets a database of this bench's own",
    )
    ap.add_argument("--sqlite", help="the SQLite file (default: in $TMPDIR)")
    ap.add_argument("--exchanges", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--keep", action="store_true", help="reuse a store filled with these figures")
    args = ap.parse_args()
    for backend in ("sqlite", "postgresql"):
        if args.backend in (backend, "both"):
            is_pg = backend == "postgresql"
            bench(target(args, is_pg), is_pg, args)
            cost = target(argparse.Namespace(**{**vars(args), "exchanges": "cost"}), is_pg)
            saving_cost(cost, is_pg)


if __name__ == "__main__":
    main()
