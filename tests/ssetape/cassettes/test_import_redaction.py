"""`ssetape import` redacts what it loads as the store redacts what it records: a cassette
written by hand or by another tool, with secrets in the clear, leaves none of them in the
store, in `show`, `show --json`, `list --json` or the SVG, and its requests still match."""

from __future__ import annotations

import base64
import gzip
import subprocess
from pathlib import Path

import orjson

from ssetape.replay.request_index import RequestIndex
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.conftest import SSETAPE

BEARER, QUERY, FIELD, ZIPPED, WHOLE = (
    "sk-import-clear-1",
    "import-clear-2",
    "import-clear-3",
    "import-clear-4",
    "import-clear-5",
)
PATH = "/v1/chat/completions"


def body(token: str) -> bytes:
    return orjson.dumps(
        {"model": "m", "stream": True, "metadata": {"user_token": token, "note": "kept"}}
    )


def exchange(uid: str, query: str, headers: list[list[str]], request_body: object) -> bytes:
    line = {
        "kind": "exchange", "uid": uid, "started_at": "2026-11-30T10:00:00+00:00",
        "method": "POST", "scheme": "https", "host": "api.openai.com", "port": 443,
        "path": PATH, "query": query, "request_headers": headers, "request_body": request_body,
        "fingerprint": "0" * 64, "status": 200,
        "response_headers": [["content-type", "text/event-stream"],
                             ["set-cookie", "session=cookie-clear-6"]],
        "is_stream": True, "state": "completed", "http_version": "HTTP/1.1", "ttfb_us": 1000,
        "duration_us": 3000, "event_count": 1,
    }  # fmt: skip
    event = {"kind": "event", "seq": 0, "offset_us": 2000, "data": "hi", "raw": "data: hi\n\n"}
    return orjson.dumps(line) + b"\n" + orjson.dumps(event) + b"\n"


def test_an_imported_cassettes_secrets_reach_no_artefact(tmp_path: Path) -> None:
    tape = tmp_path / "hand.jsonl"
    zipped = base64.b64encode(gzip.compress(body(ZIPPED))).decode()
    tape.write_bytes(
        orjson.dumps({"ssetape_cassette": 1, "redact_fields": ["user_token"]}) + b"\n"
        + exchange("a" * 32, f"api_key={QUERY}&x=1",
                   [["Authorization", f"Bearer {BEARER}"]], body(FIELD).decode())
        + exchange("b" * 32, "", [["content-encoding", "gzip"]], {"b64": zipped})
        + exchange("c" * 32, "", [], '{"user_token": "' + WHOLE + '", "x": NaN}')
    )  # fmt: skip
    db = tmp_path / "s.db"
    r = subprocess.run([SSETAPE, "import", str(tape), "--db", str(db)], capture_output=True)
    assert r.returncode == 0, r.stderr

    outputs = [db.read_bytes()]
    for args in (["list", "--json"], *(["show", str(n), "--json"] for n in (1, 2, 3)),
                 *(["show", str(n), "--full"] for n in (1, 2, 3))):  # fmt: skip
        r = subprocess.run([SSETAPE, *args, "--db", str(db)], capture_output=True)
        assert r.returncode == 0, r.stderr
        outputs.append(r.stdout)
    svg = tmp_path / "t.svg"
    subprocess.run([SSETAPE, "show", "1", "--svg", str(svg), "--db", str(db)], check=True)
    outputs.append(svg.read_bytes())
    for out in outputs:
        for secret in (BEARER, QUERY, FIELD, ZIPPED, WHOLE, "cookie-clear-6"):
            assert secret.encode() not in out
    assert b"Bearer <redacted:" in outputs[2] and b"kept" in outputs[2]  # masks, not deletions

    # The masked request still matches the request it came from, as a replay computes it.
    with Store.open(str(db), create=False) as store:
        assert store.redact_fields() == ["user_token"]
        index = RequestIndex(store, store.redactor(), keep_misses=True)
        index.refresh()
        path = f"{PATH}?api_key={QUERY}&x=1"
        assert isinstance(index.lookup("POST", "api.openai.com", path, body(FIELD)), int)
        assert not index.misses


def test_masks_already_in_a_cassette_are_kept_as_they_are(tmp_path: Path) -> None:
    """Importing what ssetape exported changes nothing: a mask is never masked again."""
    mask = "<redacted:0123456789ab>"
    tape = tmp_path / "masked.jsonl"
    tape.write_bytes(
        orjson.dumps({"ssetape_cassette": 1, "redact_fields": ["user_token"]}) + b"\n"
        + exchange("d" * 32, "api_key=%3Credacted%3A0123456789ab%3E",
                   [["Authorization", f"Bearer {mask}"]], body(mask).decode())
    )  # fmt: skip
    db = tmp_path / "s.db"
    subprocess.run([SSETAPE, "import", str(tape), "--db", str(db)], check=True)
    with Store.open(str(db), create=False) as store:
        [x] = Queries(store).exchanges()
        assert x.request_headers == [["Authorization", f"Bearer {mask}"]]
        assert x.query == "api_key=%3Credacted%3A0123456789ab%3E"
        assert x.request_body == body(mask)
        assert x.fingerprint == "0" * 64  # nothing changed, so neither did it
