"""No secret reaches the disk or the output: DB file, WAL, logs, CLI."""

from __future__ import annotations

import gzip
import subprocess
from collections.abc import Callable
from pathlib import Path

import anthropic
import httpx
import openai
import orjson

from ssetape.simulator.simulator import Simulator
from tests.conftest import SSETAPE, Proc

OPENAI_KEY = "sk-proj-SECRETopenaiKEY0123456789abcdef"
# Split so that secret scanners do not take the fake key for a real one.
ANTHROPIC_KEY = "sk-" + "ant-api03-SECRETanthropicKEY0123456789"
AZURE_KEY = "azureSECRETkey0123456789"
BODY_SECRET = "user-token-SECRET-42"
COOKIE = "session=SECRETcookie99"


def session_with_secrets(base: str) -> None:
    """Streams through the recorder at ``base`` carrying every kind of secret: API keys in
    Authorization, x-api-key and api-key, a cookie, and a redacted JSON body field."""
    client = openai.OpenAI(base_url=base + "/v1", api_key=OPENAI_KEY, max_retries=0)
    list(
        client.chat.completions.create(
            model="sim-chat",
            stream=True,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"cookie": COOKIE, "api-key": AZURE_KEY},
            extra_body={"metadata": {"user_token": BODY_SECRET, "keep": "visible"}},
        )
    )
    ant = anthropic.Anthropic(base_url=base, api_key=ANTHROPIC_KEY, max_retries=0)
    list(
        ant.messages.create(
            model="sim-m", max_tokens=20, stream=True, messages=[{"role": "user", "content": "hi"}]
        )
    )


def test_no_key_in_db_wal_logs_or_cli_output(
    sim: Simulator, ssetape_proc: Callable[..., Proc], tmp_path: Path
) -> None:
    proc = ssetape_proc(
        "record", "--mode", f"reverse:{sim.url}", "--redact-field", "metadata.user_token"
    )
    session_with_secrets(proc.url)
    other = openai.OpenAI(base_url=proc.url + "/v1", api_key=OPENAI_KEY + "X", max_retries=0)
    list(other.responses.create(model="sim-r", stream=True, input="hi"))
    # The WAL is checked while the recorder still runs: that is when it holds the most.
    wal = Path(proc.db + "-wal")
    wal_bytes = wal.read_bytes() if wal.exists() else b""
    assert proc.stop() == 0

    listing = subprocess.run([SSETAPE, "list", "--db", proc.db, "--json"], capture_output=True)
    shown = [
        subprocess.run([SSETAPE, "show", "--db", proc.db, str(i), *fmt], capture_output=True)
        for i in (1, 2, 3)
        for fmt in ([], ["--json"])
    ]
    everything = [Path(proc.db).read_bytes(), wal_bytes, proc.log, listing.stdout]
    everything += [s.stdout + s.stderr for s in shown]
    for secret in (OPENAI_KEY, ANTHROPIC_KEY, AZURE_KEY, BODY_SECRET, "SECRETcookie99"):
        for blob in everything:
            assert secret.encode() not in blob

    # `show --json` of each exchange, by the API it called.
    ids = {r["url"].rsplit("/", 1)[1]: r["id"] for r in orjson.loads(listing.stdout)}
    detail = orjson.loads(shown[2 * ids["completions"] - 1].stdout)
    headers = dict((k.lower(), v) for k, v in detail["request"]["headers"])
    assert headers["authorization"].startswith("Bearer <redacted:")
    assert headers["api-key"].startswith("<redacted:")
    assert b"visible" in Path(proc.db).read_bytes()  # only the named field is masked
    # Two different keys stay distinguishable, the same key gives the same mask.
    second = orjson.loads(shown[2 * ids["responses"] - 1].stdout)
    h2 = dict((k.lower(), v) for k, v in second["request"]["headers"])
    assert h2["authorization"] != headers["authorization"]
    assert httpx.Headers(second["request"]["headers"])["authorization"].startswith("Bearer <red")


# Bodies a JSON parser refuses, each with a secret in a field to redact. What JavaScript sends
# when text is cut inside an emoji, a NaN, a byte-order mark, nesting past any parser's limit,
# and a compressed request body.
UNPARSABLE = {
    "surrogate": b'{"prompt": "cut \\ud83d", "api_key": "sk-LEAK-1"}',
    "nan": b'{"temperature": NaN, "api_key": "sk-LEAK-2"}',
    "bom": b'\xef\xbb\xbf{"api_key": "sk-LEAK-3"}',
    "deep": b'{"api_key": "sk-LEAK-4", "x": ' + b"[" * 2000 + b"]" * 2000 + b"}",
}


def test_bodies_no_parser_reads_still_leave_no_secret(
    sim: Simulator, ssetape_proc: Callable[..., Proc]
) -> None:
    """Redaction fails closed: a body whose fields cannot be found is masked whole (and the
    log says so once); a body that parses keeps every byte but the mask (a 64-bit-overflowing
    integer stays as sent)."""
    proc = ssetape_proc("record", "--mode", f"reverse:{sim.url}", "--redact-field", "api_key")
    url = proc.url + "/v1/chat/completions"
    with httpx.Client(timeout=30) as c:
        for body in UNPARSABLE.values():
            c.post(url, content=body, headers={"content-type": "application/json"})
        zipped = gzip.compress(b'{"model": "sim-chat", "api_key": "sk-LEAK-5"}')
        c.post(url, content=zipped, headers={"content-encoding": "gzip"})
        exact = b'{"model": "sim-chat", "n": 18446744073709551616, "api_key": "sk-LEAK-6"}'
        c.post(url, content=exact, headers={"content-type": "application/json"})
    assert proc.stop() == 0
    shown = [
        subprocess.run([SSETAPE, "show", "--db", proc.db, str(i), "--json"], capture_output=True)
        for i in range(1, 7)
    ]
    listing = subprocess.run([SSETAPE, "list", "--db", proc.db, "--json"], capture_output=True)
    for blob in [Path(proc.db).read_bytes(), proc.log, listing.stdout, *(s.stdout for s in shown)]:
        assert b"sk-LEAK" not in blob
    assert proc.log.count(b"masked whole") <= 3  # one line per kind of body, never its text
    last = orjson.loads(shown[5].stdout)["request"]["body"]
    kept = '{"model": "sim-chat", "n": 18446744073709551616, "api_key": "<redacted:'
    assert last.startswith(kept)
