"""`--profile HOST=NAME` in every form a user writes a host: a `*.` wildcard, a trailing dot,
a port; and a one-line refusal for what names no host."""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
from click.testing import CliRunner

from ssetape.cli.main import main
from ssetape.storage.models import Exchange
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.addons.test_recorder import CHAT
from tests.conftest import Proc
from tests.ssetape.cli.test_cli import assert_one_line_error, run
from tests.upstreams import fixed_upstream

# (host, port) -> the profile reindex must give it under the overrides below.
EXPECTED = {
    ("api.example.com", 443): "seed",  # *.example.com
    ("example.com", 443): "seed",  # a domain's pattern names the domain too
    ("gw.example.com", 8080): "openai",  # its port is more specific than the wildcard
    ("gw.example.com", 9090): "seed",
    ("localhost", 8000): "anthropic",  # `localhost.`: the trailing dot is the same name
    ("other.com", 443): "compatible",  # no override: the default
    ("::1", 8000): "seed",  # an IPv6 address with a port: in brackets
}
OVERRIDES = [
    "*.example.com=seed", "gw.example.com:8080=openai", "LocalHost.=anthropic", "[::1]:8000=seed",
]  # fmt: skip


def test_reindex_reads_each_host_under_the_profile_its_pattern_names(tmp_path: Path) -> None:
    db = tmp_path / "hosts.db"
    with Store.open(str(db)) as store, store.Session.begin() as s:
        for n, (host, port) in enumerate(EXPECTED):
            s.add(
                Exchange(
                    uid=f"{n:032}",
                    started_at=dt.datetime.now(dt.UTC),
                    method="POST",
                    scheme="https",
                    host=host,
                    port=port,
                    path="/v1/chat/completions",
                    query="",
                    http_version="HTTP/1.1",
                    request_headers=[],
                    fingerprint="f",
                    status=200,
                    is_stream=True,
                    state="completed",
                )
            )
    args = [a for o in OVERRIDES for a in ("--profile", o)]
    r = CliRunner().invoke(main, ["reindex", "--db", str(db), *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    with Store.open(str(db), create=False) as store:
        assert {(x.host, x.port): x.profile for x in Queries(store).exchanges()} == EXPECTED


def test_record_reads_a_host_with_a_port_under_its_profile(
    ssetape_proc: Callable[..., Proc],
) -> None:
    chunks = [b'data: {"choices":[]}\n\n', b"data: [DONE]\n\n"]
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    with fixed_upstream(head, chunks) as upstream:
        port = int(upstream.rpartition(":")[2])
        rec = ssetape_proc(
            "record", "--mode", f"reverse:http://localhost:{port}",
            "--profile", f"localhost.:{port}=seed", "--profile", "localhost:1=openai",
        )  # fmt: skip
        httpx.post(rec.url + "/v1/chat/completions", json=CHAT, timeout=30)
        assert rec.stop() == 0
    with Store.open(str(rec.db), create=False) as store:
        [x] = Queries(store).exchanges()
        assert (x.host, x.profile) == ("localhost", "seed")


def test_a_profile_host_that_names_no_host_is_refused_in_one_line(tmp_path: Path) -> None:
    assert_one_line_error(run("record", "--port", "0", "--profile", "*=seed"), "*=seed")
    db = str(tmp_path / "none.db")
    for bad in ("example.com:http=seed", "a b.com=seed", "**.x.com=seed", "x.com:0=seed", ".=seed"):
        r = CliRunner().invoke(main, ["reindex", "--db", db, "--profile", bad])
        done = subprocess.CompletedProcess([], r.exit_code, r.stdout, r.stderr)
        assert_one_line_error(done, "--profile", bad, "HOST, .DOMAIN or *.DOMAIN")
