"""Search by prompt, as a user meets it: six failing requests recorded through `ssetape record`
with a unique invoice number in their prompts (each API, each place a prompt is) are found by
that number, and only they, in `ssetape list --grep`, the viewer's ``q`` and MCP's
``list_exchanges(text=...)``, each with where it was found and the text around it; on SQLite
and PostgreSQL. A store recorded before is searched by prompt once `ssetape reindex` ran."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import orjson
import pytest
from alembic import command
from sqlalchemy import create_engine, update

from ssetape.simulator.simulator import Simulator
from ssetape.storage.models import Exchange
from ssetape.storage.store import Store, alembic_config
from tests.addons.stores import pg_base, pg_schema
from tests.conftest import SIM_SPEED, SSETAPE
from tests.ssetape.mcp_server.client import call, in_memory
from tests.ssetape.web.conftest import Tape, app_client, record

INVOICE = "INV-7731-0042"
# Recorded text that would act in a terminal (set its title, colour it) or a page (a script).
HOSTILE = "<script>alert(1)</script>HOSTILE-77\x1b]0;pwned\x07\x1b[31m red"
GEMINI = "/v1beta/models/{}:streamGenerateContent?alt=sse"
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}

# Six failing requests, the invoice number in a different place of each prompt.
SIX = [
    ("/v1/chat/completions", {"model": "gpt-4o-sim-error", "stream": True, "messages": [
        {"role": "system", "content": f"You answer questions on invoice {INVOICE}."},
        {"role": "user", "content": "What is due?"}]}),
    ("/v1/chat/completions", {"model": "gpt-4o-sim-503", "stream": True, "messages": [
        {"role": "user", "content": [{"type": "text", "text": f"Pay {INVOICE} today"}, IMAGE]}]}),
    ("/v1/responses", {"model": "o4-mini-sim-failed", "stream": True,
                       "instructions": f"Only discuss {INVOICE}.", "input": "Summarise it."}),
    ("/v1/responses", {"model": "o4-mini-sim-500", "stream": True, "input": [
        {"role": "user", "content": [{"type": "input_text", "text": f"Refund {INVOICE}?"}]}]}),
    ("/v1/messages", {"model": "claude-sim-error", "max_tokens": 30, "stream": True,
                      "system": [{"type": "text", "text": f"Invoice {INVOICE} is disputed."}],
                      "messages": [{"role": "user", "content": "Why?"}]}),
    (GEMINI.format("gemini-sim-500"), {"contents": [
        {"role": "user", "parts": [{"text": f"Translate invoice {INVOICE} to French"}]}]}),
]  # fmt: skip
# What must not be found: the number in a tool's schema and the request's other fields (not
# the prompt), a number one digit off, a failing request without it.
OTHERS = [
    ("/v1/chat/completions", {"model": "gpt-4o-sim", "stream": True, "user": INVOICE,
                              "messages": [{"role": "user", "content": "What is due?"}],
                              "tools": [{"type": "function", "function": {
                                  "name": "lookup", "description": f"Looks up {INVOICE}",
                                  "parameters": {"type": "object", "properties": {}}}}]}),
    ("/v1/messages", {"model": "claude-sim", "max_tokens": 30, "stream": True,
                      "messages": [{"role": "user", "content": "Pay INV-7731-0043 now"}]}),
    ("/v1/chat/completions", {"model": "gpt-4o-sim-429", "stream": True,
                              "messages": [{"role": "user", "content": "hello"}]}),
    ("/v1/chat/completions", {"model": "gpt-4o-sim", "stream": True,
                              "messages": [{"role": "user", "content": HOSTILE}]}),
]  # fmt: skip


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def tape(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Tape]:
    folder = tmp_path_factory.mktemp("prompts")
    confdir = folder / "confdir"
    confdir.mkdir()

    def recorded(db: str) -> Tape:
        with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
            record(db, confdir, sim.url, [*SIX, *OTHERS])
        return Tape(db, confdir)

    if request.param == "sqlite":
        yield recorded(str(folder / "tape.db"))
        return
    pg_base()
    with pg_schema() as url:
        yield recorded(url)


def ssetape(*args: str) -> str:
    r = subprocess.run([SSETAPE, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _six(tape: Tape) -> list[int]:
    """The six failing exchanges' ids, as recorded (one after the other), newest first."""
    xs = sorted(tape.exchanges(), key=lambda x: x.id)
    assert len(xs) == len(SIX) + len(OTHERS)
    six = xs[: len(SIX)]
    assert all(x.outcome in ("error", "http_error") for x in six), [x.outcome for x in six]
    return sorted((x.id for x in six), reverse=True)


def test_list_grep_finds_the_six_by_their_prompt(tape: Tape) -> None:
    six = _six(tape)
    rows = orjson.loads(ssetape("list", "--db", tape.db, "--grep", INVOICE, "--json"))
    assert [r["id"] for r in rows] == six
    for r in rows:
        assert r["match"]["in"] == "prompt"
        assert INVOICE in r["match"]["snippet"] and len(r["match"]["snippet"]) < 100
    failed = ssetape("list", "--db", tape.db, "--grep", INVOICE, "--outcome", "failed", "--json")
    assert [r["id"] for r in orjson.loads(failed)] == six
    # The table, then a line per exchange: where, and the text around it.
    table = ssetape("list", "--db", tape.db, "--grep", INVOICE)
    for xid in six:
        assert re.search(rf"^#{xid} prompt: .*{INVOICE}", table, re.MULTILINE), table
    assert orjson.loads(ssetape("list", "--db", tape.db, "--grep", "INV-7731-0044", "--json")) == []


def test_the_viewer_finds_the_six_by_their_prompt(tape: Tape) -> None:
    six = _six(tape)
    for client in app_client(tape.db):
        page = client.get("/", params={"q": INVOICE}).text
        assert [int(i) for i in re.findall(r'<tr data-id="(\d+)"', page)] == six
        marked = re.findall(r'<span class="cell match">prompt: [^<]*<mark>([^<]*)</mark>', page)
        assert marked == [INVOICE] * len(six)


def test_mcp_finds_the_six_by_their_prompt(tape: Tape) -> None:
    six = _six(tape)
    with Store.open(tape.db) as store:
        found: dict[str, Any] = in_memory(
            store, lambda client: call(client, "list_exchanges", text=INVOICE)
        )
    assert [x["id"] for x in found["exchanges"]] == six
    for x in found["exchanges"]:
        assert x["match"]["in"] == "prompt" and INVOICE in x["match"]["snippet"]


def test_a_hostile_prompt_is_shown_escaped(tape: Tape) -> None:
    table = ssetape("list", "--db", tape.db, "--grep", "HOSTILE-77")
    assert "\x1b" not in table and "\x07" not in table
    line = r"^#\d+ prompt: <script>alert\(1\)</script>HOSTILE-77\\x1b\]0;pwned\\x07\\x1b\[31m red$"
    assert re.search(line, table, re.MULTILINE), table
    for client in app_client(tape.db):
        page = client.get("/", params={"q": "HOSTILE-77"}).text
        assert "<script>alert" not in page and "\x1b" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert "<mark>HOSTILE-77</mark>" in page


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_store_recorded_before_is_searched_by_prompt_after_reindex(
    backend: str, tmp_path: Path
) -> None:
    """Rows stored before request_text was (schema 0014, analysis version 5): reindex
    --stale fills them, and the search finds them."""
    if backend == "postgresql":
        pg_base()
    confdir = tmp_path / "confdir"
    confdir.mkdir()
    with pg_schema() if backend == "postgresql" else nullcontext() as url:
        db = url or str(tmp_path / "old.db")
        with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
            record(db, confdir, sim.url, [SIX[0], OTHERS[1]])
        engine = create_engine(db if "://" in db else f"sqlite:///{db}")
        with engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0014")
            conn.execute(update(Exchange).values(analysis_version=5))
        engine.dispose()
        # Opened by this version: migrated, the rows not yet read for their prompt.
        assert orjson.loads(ssetape("list", "--db", db, "--grep", INVOICE, "--json")) == []
        assert "reindexed 2" in ssetape("reindex", "--db", db, "--stale")
        rows = orjson.loads(ssetape("list", "--db", db, "--grep", INVOICE, "--json"))
        assert [(r["model"], r["match"]["in"]) for r in rows] == [("gpt-4o-sim-error", "prompt")]
