"""Stream knowledge as an operator meets it: record real streams through `ssetape record`
with the official SDKs, then ask `list`, `show`, `stats` and `reindex` about them."""

from __future__ import annotations

import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from alembic import command
from click.testing import CliRunner
from sqlalchemy import create_engine

from ssetape.cli.main import main
from ssetape.simulator.simulator import Simulator
from ssetape.storage.store import alembic_config
from tests.conftest import Proc, start_ssetape
from tests.ssetape.cli.test_cli import assert_one_line_error, run


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`ssetape ARGS` in this process: the read-only commands are asked dozens of times
    here, and a subprocess per call would cost a second each. Recording and the
    one-line-error checks still run the real executable."""
    r = CliRunner().invoke(main, list(args), catch_exceptions=False, color=False, terminal_width=80)
    return subprocess.CompletedProcess(list(args), r.exit_code, r.stdout, r.stderr)


def ssetape_json(*args: str) -> Any:
    r = cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    return orjson.loads(r.stdout)


class Tape:
    """One recording session shared by the tests below (recording costs seconds)."""

    def __init__(self, db: str) -> None:
        self.db = db
        self.texts: dict[str, str] = {}  # model -> text the SDK client assembled


def _record(proc: Proc) -> dict[str, str]:
    texts: dict[str, str] = {}
    oai = openai.OpenAI(base_url=proc.url + "/v1", api_key="sk-test", max_retries=0)
    for model in ("gpt-4o-sim", "gpt-4o-sim-error", "gpt-4o-sim-refusal"):
        stream = oai.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": f"hello {model}"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        parts: list[str] = []
        try:
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    parts.append(chunk.choices[0].delta.content)
        except openai.APIError:
            pass  # the SDK raises on the mid-stream error chunk; the text so far counts
        texts[model] = "".join(parts)
    with oai.responses.stream(model="o4-mini-sim-incomplete", input="tell me") as rs:
        texts["o4-mini-sim-incomplete"] = "".join(
            e.delta for e in rs if e.type == "response.output_text.delta"
        )
    ant = anthropic.Anthropic(base_url=proc.url, api_key="not-a-key", max_retries=0)
    with ant.messages.stream(
        model="claude-sim", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
    ) as ms:
        texts["claude-sim"] = "".join(ms.text_stream)
    # An HTTP error status, not a stream.
    httpx.post(proc.url + "/v1/chat/completions", json={"model": "gpt-sim-429", "stream": True})
    return texts


@pytest.fixture(scope="module")
def tape(tmp_path_factory: pytest.TempPathFactory, confdir_module: Path) -> Iterator[Tape]:
    with Simulator(speed=4).serve_in_thread() as sim:
        db = str(tmp_path_factory.mktemp("audit") / "tape.db")
        proc = start_ssetape(
            [
                "record",
                "--mode",
                f"reverse:{sim.url}",
                "--db",
                db,
                "--port",
                "0",
                "--confdir",
                str(confdir_module),
            ],
            db=db,
        )
        try:
            texts = _record(proc)
        finally:
            assert proc.stop() == 0, proc.log.decode()
    t = Tape(db)
    t.texts = texts
    yield t


@pytest.fixture(scope="module")
def confdir_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("confdir")


def by_model(db: str) -> dict[str, dict[str, Any]]:
    return {r["model"]: r for r in ssetape_json("list", "--db", db)}


def test_show_json_tells_what_each_stream_said(tape: Tape) -> None:
    rows = by_model(tape.db)
    assert set(rows) == {
        "gpt-4o-sim",
        "gpt-4o-sim-error",
        "gpt-4o-sim-refusal",
        "o4-mini-sim-incomplete",
        "claude-sim",
        "gpt-sim-429",
    }
    expect = {
        "gpt-4o-sim": ("chat_completions", "completed", "stop"),
        "gpt-4o-sim-error": ("chat_completions", "error", None),
        "gpt-4o-sim-refusal": ("chat_completions", "refused", None),
        "o4-mini-sim-incomplete": ("responses", "incomplete", "max_output_tokens"),
        "claude-sim": ("messages", "completed", "end_turn"),
        "gpt-sim-429": ("chat_completions", "http_error", None),
    }
    for model, (api, outcome, reason) in expect.items():
        row = rows[model]
        d = ssetape_json("show", "--db", tape.db, str(row["id"]))
        assert (d["api"], d["model"], d["outcome"]) == (api, model, outcome), d
        if reason is not None:
            assert d["reason"] == reason
        for key in ("ttfb_ms", "ttft_ms", "duration_ms", "gap_ms", "output_text", "findings"):
            assert key in d
        assert set(d["gap_ms"]) == {"median", "p95", "max"}
        assert set(d["usage"]) == {
            "input_tokens", "output_tokens", "total_tokens",
            "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
        }  # fmt: skip
        assert d["profile"] == "compatible"  # the simulator's host is named by no profile
        assert all({"seq", "offset_us", "event", "data"} <= set(e) for e in d["events"])
        if model in tape.texts:  # what the SDK client showed is what we stored
            assert d["output_text"] == tape.texts[model]
        if outcome in ("completed", "incomplete"):
            assert 0 < d["ttfb_ms"] <= d["ttft_ms"] <= d["duration_ms"]
            u = d["usage"]
            assert u["input_tokens"] > 0 and u["output_tokens"] > 0
            assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"]
            assert d["gap_ms"]["median"] <= d["gap_ms"]["p95"] <= d["gap_ms"]["max"]
            assert d["findings"] == []
    assert rows["gpt-sim-429"]["usage"]["output_tokens"] is None  # never estimated


def test_list_filters(tape: Tape) -> None:
    def models(*args: str) -> set[str]:
        return {r["model"] for r in ssetape_json("list", "--db", tape.db, *args)}

    assert models("--api", "messages") == {"claude-sim"}
    assert models("--api", "responses") == {"o4-mini-sim-incomplete"}
    assert models("--outcome", "error") == {"gpt-4o-sim-error"}
    assert models("--model", "gpt-4o") == {"gpt-4o-sim", "gpt-4o-sim-error", "gpt-4o-sim-refusal"}
    assert len(models("--since", "1h")) == 6
    assert models("--since", "2999-01-01") == set()
    assert len(models("--host", "127.0.0.1")) == 6 and models("--host", "example.com") == set()
    word = tape.texts["claude-sim"].split()[0]
    assert "claude-sim" in models("--grep", word)
    assert_one_line_error(run("list", "--db", tape.db, "--since", "yesterday"), "--since")
    for huge in ("99999999999999d", "9" * 400 + "w"):
        assert_one_line_error(run("list", "--db", tape.db, "--since", huge), "too far back")
    until = run("export", "--db", tape.db, "-o", "-", "--until", "99999999999999d")
    assert_one_line_error(until, "too far back")
    assert_one_line_error(run("list", "--db", tape.db, "--api", "fax"), "--api")
    human = cli("list", "--db", tape.db)
    assert human.returncode == 0
    for header in ("model", "outcome", "tokens", "ttft"):
        assert header in human.stdout
    assert max(len(line) for line in human.stdout.splitlines()) <= 80


def test_stats_by_api_adds_up(tape: Tape) -> None:
    rows = ssetape_json("list", "--db", tape.db)
    groups = {g["group"]: g for g in ssetape_json("stats", "--db", tape.db, "--by", "api")}
    assert {k: g["count"] for k, g in groups.items()} == {
        "chat_completions": 4,
        "responses": 1,
        "messages": 1,
    }
    chat = groups["chat_completions"]
    assert chat["failed"] == 2  # the mid-stream error and the 429; a refusal is no failure
    for g in groups.values():
        assert set(g) >= {
            "group",
            "count",
            "failed",
            "ttfb_ms",
            "ttft_ms",
            "input_tokens",
            "output_tokens",
        }
        assert set(g["ttfb_ms"]) == {"p50", "p95"} and set(g["ttft_ms"]) == {"p50", "p95"}
    total_in = sum(r["usage"]["input_tokens"] or 0 for r in rows)
    assert sum(g["input_tokens"] for g in groups.values()) == total_in > 0
    everything = ssetape_json("stats", "--db", tape.db)
    assert len(everything) == 1 and everything[0]["count"] == 6
    assert everything[0]["failed"] == 2
    assert ssetape_json("stats", "--db", tape.db, "--outcome", "completed")[0]["failed"] == 0
    assert ssetape_json("stats", "--db", tape.db, "--host", "example.com") == []
    # What stats counts as failed is what `list --outcome failed` lists, and no more.
    failed = ssetape_json("list", "--db", tape.db, "--outcome", "failed")
    assert {r["model"] for r in failed} == {"gpt-4o-sim-error", "gpt-sim-429"}
    assert {r["outcome"] for r in failed} == {"error", "http_error"}
    for g in groups.values():
        listed = ssetape_json("list", "--db", tape.db, "--api", g["group"], "--outcome", "failed")
        assert len(listed) == g["failed"], g["group"]
    assert_one_line_error(run("list", "--db", tape.db, "--outcome", "errors"), "failed")
    human = cli("stats", "--db", tape.db, "--by", "model")
    assert human.returncode == 0 and "claude-sim" in human.stdout


def _knowledge(db: str) -> list[dict[str, Any]]:
    drop = {"events", "request", "response"}
    return [
        {k: v for k, v in ssetape_json("show", "--db", db, str(r["id"])).items() if k not in drop}
        for r in ssetape_json("list", "--db", db)
    ]


def test_reindex_recomputes_old_rows_after_migration(tape: Tape, tmp_path: Path) -> None:
    """Also the check that what the recording process analysed live, as each stream went
    by, is what analysing the stored events gives."""
    db = tmp_path / "old.db"
    with sqlite3.connect(tape.db) as src, sqlite3.connect(db) as dst:
        src.backup(dst)
    before = _knowledge(str(db))
    # The store as ssetape 0.1 left it: schema 0001, no knowledge columns.
    cfg = alembic_config()
    engine = create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0001")
    engine.dispose()
    with sqlite3.connect(db) as c:
        cols = {row[1] for row in c.execute("PRAGMA table_info(exchanges)")}
        assert "outcome" not in cols
        assert c.execute("SELECT count(*) FROM events").fetchone()[0] > 50

    migrated = _knowledge(str(db))  # opening migrates; knowledge not there yet
    assert all(m["outcome"] is None and m["analyzed"] is False for m in migrated)
    assert [m["event_count"] for m in migrated] == [b["event_count"] for b in before]
    r = cli("reindex", "--db", str(db), "--stale")
    assert r.returncode == 0 and "reindexed 6" in r.stdout, r.stderr
    assert _knowledge(str(db)) == before
    assert "reindexed 0" in cli("reindex", "--db", str(db), "--stale").stdout


def test_show_timeline_and_svg(tape: Tape, tmp_path: Path) -> None:
    rid = str(by_model(tape.db)["claude-sim"]["id"])
    r = cli("show", "--db", tape.db, rid, "--timeline")
    assert r.returncode == 0, r.stderr
    assert "TTFT" in r.stdout
    svg = tmp_path / "t.svg"
    r = cli("show", "--db", tape.db, rid, "--svg", str(svg))
    assert r.returncode == 0, r.stderr
    import xml.etree.ElementTree as ET

    assert ET.fromstring(svg.read_text()).tag.endswith("svg")
    assert svg.stat().st_mode & 0o777 == 0o600


def test_stats_on_missing_db_is_one_line(tmp_path: Path) -> None:
    assert_one_line_error(run("stats", "--db", str(tmp_path / "none.db")), "none.db")
