"""What `ssetape show` and `list` print from hostile recordings: markup and escape sequences
in model output, headers and paths are shown, never obeyed; huge events are cut with their
size unless --full."""

from __future__ import annotations

import datetime as dt
import io
import os
import subprocess
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console

from ssetape.storage.models import Event, Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.views.tables import EVENT_MAX, list_table, show_view
from tests.conftest import SSETAPE

# What a terminal would act on: set the title, write the clipboard, clear the screen.
TITLE, CLIPBOARD, CLEAR = "\x1b]0;pwned\x07", "\x1b]52;c;cm0gLXJmIH4=\x07", "\x1b[2J"
HOSTILE = f"ok [/] [bold red]red[/bold red] {TITLE}{CLIPBOARD}{CLEAR} end"


def hostile_store(path: Path, *, big: int = 0) -> Store:
    store = Store.open(str(path))
    data = orjson.dumps({"choices": [{"delta": {"content": HOSTILE}}]}).decode()
    events = [
        (0, 1000, "message", data, None, f"data: {data}\n\n".encode()),
        (1, 2000, "message", "x" * big, None, b"data: " + b"x" * big + b"\n\n"),
    ]
    with store.Session.begin() as s:
        x = Exchange(
            uid="h" * 32, started_at=dt.datetime.now(dt.UTC), method="POST", scheme="https",
            host="api.example.com", port=443, path=f"/v1/[bold red]chat{CLEAR}", query="",
            http_version="HTTP/1.1", request_headers=[["x-evil", HOSTILE]],
            request_body=orjson.dumps({"model": f"m{TITLE}"}), fingerprint="f", status=200,
            reason="OK", response_headers=[["content-type", "text/event-stream"]],
            is_stream=True, state="completed", event_count=2, model=f"gpt[/]{TITLE}",
            output_text=HOSTILE, outcome="completed", analysis_version=1, error=HOSTILE,
        )  # fmt: skip
        s.add(x)
        s.flush()
        for seq, off, ev, d, _id, raw in events:
            s.add(Event(exchange_id=x.id, seq=seq, offset_us=off, event=ev, data=d, raw=raw))
    return store


def printed(renderable: Any, *, terminal: bool = True) -> str:
    out = io.StringIO()
    Console(file=out, force_terminal=terminal, width=200, color_system="truecolor").print(
        renderable
    )
    return out.getvalue()


def test_recorded_text_is_shown_never_obeyed(tmp_path: Path) -> None:
    store = hostile_store(tmp_path / "t.db")
    [x] = Queries(store).exchanges()
    for text in (
        printed(show_view(x, list(Queries(store).events(x.id)), [])),
        printed(list_table([x])),
    ):
        for sequence in (TITLE, CLIPBOARD, CLEAR):
            assert sequence not in text  # no escape sequence from the recording reaches it
        assert "\\x1b" in text  # shown, written out
    plain = printed(show_view(x, list(Queries(store).events(x.id)), []), terminal=False)
    assert "ok [/] [bold red]red[/bold red]" in plain  # markup in data is text
    store.close()


def test_show_cuts_huge_events_unless_full(tmp_path: Path) -> None:
    store = hostile_store(tmp_path / "t.db", big=5_000_000)
    [x] = Queries(store).exchanges()
    cut = printed(show_view(x, list(Queries(store).events(x.id)), []), terminal=False)
    assert f"{5_000_000 - EVENT_MAX:,} more characters; show --full prints them" in cut
    assert len(cut) < 100_000
    full = printed(show_view(x, list(Queries(store).events(x.id)), [], full=True), terminal=False)
    assert full.count("x") >= 5_000_000
    store.close()


def test_a_huge_chunk_without_data_says_how_many_bytes_it_left_out(tmp_path: Path) -> None:
    """A non-SSE stream's chunk (a Gemini array piece) or a comment has no data: its bytes
    are shown, cut, with the count of bytes left out."""
    store = hostile_store(tmp_path / "t.db")
    [x] = Queries(store).exchanges()
    chunk = Event(seq=0, offset_us=0, event=None, data=None, raw=b"[" + b"y" * 4_999)
    cut = printed(show_view(x, [chunk], []), terminal=False)
    assert f"{5_000 - EVENT_MAX:,} more bytes; show --full prints them" in cut
    store.close()


def test_the_cli_prints_hostile_and_huge_recordings(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    hostile_store(db, big=2_000_000).close()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    for args in (["show", "1"], ["list"], ["show", "1", "--json"]):
        r = subprocess.run(
            [SSETAPE, *args, "--db", str(db)], capture_output=True, text=True, env=env, timeout=60
        )
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr
        for sequence in (TITLE, CLIPBOARD, CLEAR):
            assert sequence not in r.stdout
    doc = orjson.loads(
        subprocess.run(
            [SSETAPE, "show", "1", "--json", "--db", str(db)], capture_output=True, check=True
        ).stdout
    )
    assert doc["events"][1]["truncated"]["raw_bytes"] == 2_000_008
    assert len(doc["events"][1]["raw"]) == 1024 * 1024


# Hosts as an imported cassette or a shared store can hold them: markup that fails
# (`[/]` closes nothing), markup that makes a link, and what a terminal would act on.
HOSTILE_HOSTS = ["evil[/]x.com", "[link=https://evil.example]api.openai.com[/link]",
                 f"a{TITLE}{CLEAR}b", "api.\u202emoc.evil"]  # fmt: skip


def _one_exchange_with(db: Path, host: str) -> None:
    with Store.open(str(db)) as store, store.Session.begin() as s:
        s.add(
            Exchange(
                uid=host.encode().hex()[:32],
                started_at=dt.datetime.now(dt.UTC),
                method="GET",
                scheme="https",
                host=host,
                port=443,
                path="/",
                query="",
                http_version="HTTP/1.1",
                request_headers=[],
                fingerprint="f",
                status=200,
                is_stream=False,
                state="completed",
            )
        )


def test_list_and_stats_show_a_hostile_host_as_text(tmp_path: Path) -> None:
    """`list`'s title names the one host it lists, `stats --by host` each host."""
    from click.testing import CliRunner

    from ssetape.cli.main import main

    env = {"FORCE_COLOR": "1", "TERM": "xterm-256color", "COLUMNS": "200"}  # as a terminal
    for n, host in enumerate(HOSTILE_HOSTS):
        db = tmp_path / f"{n}.db"
        _one_exchange_with(db, host)
        for args in (["list"], ["stats", "--by", "host"]):
            r = CliRunner(env=env).invoke(main, [*args, "--db", str(db)])
            assert r.exit_code == 0, (args, r.output, r.exception)
            for acting in (TITLE, CLEAR, "\x1b]8;", "\u202e"):  # 8: a terminal hyperlink
                assert acting not in r.stdout, (args, r.stdout)
            shown = host.replace(TITLE, "\\x1b]0;pwned\\x07").replace(CLEAR, "\\x1b[2J")
            assert shown.replace("\u202e", "\\u202e")[:12] in r.stdout, (args, r.stdout)
