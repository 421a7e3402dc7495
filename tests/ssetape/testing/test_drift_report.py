"""The drift report: requests that matched only because fields were ignored, or missed, told
field by field against the nearest recording, in the terminal and as JSON, with and without
pytest-xdist; and re-recorded cassettes compared with what they held, timing aside."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from ssetape.testing.drift import content_changes, recordings, shown
from tests.ssetape.testing.hygiene_cassettes import (
    UPSTREAM,
    chat,
    exchange,
    run_pytest,
    write_cassette,
)

EVIL = "evil\x1b[31m\n" + "x" * 500  # a terminal escape, a newline, and long
TESTS = f'''
import httpx, pytest

pytestmark = pytest.mark.ssetape("cassettes/shared.jsonl", ignore_fields=["user"])


def ask(ssetape, body):
    return httpx.post(ssetape.base_url("{UPSTREAM}") + "/v1/chat/completions", json=body)


def test_ignored(ssetape):
    r = ask(ssetape, {chat("hi", user=EVIL)!r})
    assert r.json() == {{"answer": "hello"}}


def test_changed(ssetape):
    assert ask(ssetape, {chat("bye")!r}).status_code == 404


def test_same(ssetape):
    assert ask(ssetape, {chat("hi")!r}).status_code == 200
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write_cassette(tmp_path / "cassettes" / "shared.jsonl", [exchange(chat("hi"))])
    (tmp_path / "test_api.py").write_text(TESTS)
    return tmp_path


def _report(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(path.read_bytes())
    return doc


def _by_test(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["test"].rpartition("::")[2]: d for d in doc["drift"]}


@pytest.mark.parametrize("workers", [None, "2"])
def test_drift_table_and_json(project: Path, workers: str | None) -> None:
    out = project / "drift.json"
    args = ["-n", workers] if workers else []
    result = run_pytest(project, "--ssetape-drift", "--ssetape-drift-json", str(out), *args)
    text = result.stdout
    # test_changed's miss fails it (the plugin's rule), the others pass.
    assert "1 failed, 2 passed" in text, text + result.stderr
    assert text.count("ssetape drift: requests that differ from their recordings") == 1

    drift = _by_test(_report(out))
    assert set(drift) == {"test_ignored", "test_changed"}  # test_same matched on every field
    ignored, changed = drift["test_ignored"], drift["test_changed"]
    assert ignored["missed"] is False and ignored["line"] == 2
    assert ignored["request"] == "POST api.example.com/v1/chat/completions"
    assert [(f["field"], f["recorded"], f["ignored"]) for f in ignored["fields"]] == [
        ("body.user", '"u1"', True)
    ]
    requested = ignored["fields"][0]["requested"]
    # Escaped to one printable line and cut: the recorded or requested text is not trusted.
    assert requested.startswith('"evil\\u001b[31m\\nxxx') and requested.endswith("…")
    assert len(requested) <= 120 and "\x1b" not in requested and "\n" not in requested
    assert changed["missed"] is True and changed["line"] == 2
    assert [(f["field"], f["recorded"], f["requested"], f["ignored"])
            for f in changed["fields"]] == [
        ("body.messages[0].content", '"hi"', '"bye"', False)
    ]  # fmt: skip

    # The table: each test, its request, each field with both values.
    table = text[text.index("ssetape drift:") :]
    assert "test_api.py::test_ignored" in table and "test_api.py::test_changed" in table
    assert "matched, fields ignored; nearest: cassette line 2" in table
    assert "missed; nearest: cassette line 2" in table
    row = next(line for line in table.splitlines() if "body.messages[0].content" in line)
    assert row.split() == ["body.messages[0].content", '"hi"', '"bye"']
    row = next(line for line in table.splitlines() if "body.user (ignored)" in line)
    assert '"u1"' in row and "\x1b" not in row and row.rstrip().endswith("…")
    # A full run that replayed: the one recording was served, nothing is left over.
    assert "recordings no test replayed" not in table


def test_no_report_without_the_option(project: Path) -> None:
    result = run_pytest(project)
    assert "1 failed, 2 passed" in result.stdout
    assert "ssetape drift" not in result.stdout


def _lines(doc: list[dict[str, Any]]) -> list[bytes]:
    return [orjson.dumps(d) + b"\n" for d in doc]


def test_re_recording_compared_beyond_timing() -> None:
    header = {"ssetape_cassette": 2, "redact_fields": []}
    old = exchange(chat("hi"))
    event = {"kind": "event", "seq": 0, "offset_us": 10, "raw": "data: 1\n\n"}
    before = recordings(_lines([header, old, event]))
    # Re-recorded later, slower, with another Date and another mask key: the same bytes.
    slower = exchange(chat("hi"), date="Tue, 01 Dec 2026 10:00:00 GMT")
    slower["ttfb_us"], slower["duration_us"] = 9_000, 99_000
    again = recordings(_lines([header, slower, dict(event, offset_us=99)]))
    assert content_changes(before, again) is None
    # Another answer, or an event's bytes, is a change; a new recording is counted apart.
    other = exchange(chat("hi"), answer="goodbye")
    assert content_changes(before, recordings(_lines([header, other, event]))) == (
        "1 of 1 recording(s) differ beyond timing"
    )
    changed_event = dict(event, raw="data: 2\n\n")
    assert content_changes(before, recordings(_lines([header, old, changed_event]))) == (
        "1 of 1 recording(s) differ beyond timing"
    )
    more = recordings(_lines([header, old, event, exchange(chat("bye"))]))
    assert content_changes(before, more) == "1 recording(s) new or changed (2 now)"


def test_shown_values_are_one_bounded_line() -> None:
    assert shown("a\nb\x1b[2J\u202e") == '"a\\nb\\u001b[2J\\u202e"'
    assert shown(1) == "1" and shown("1") == '"1"' and shown("<absent>") == "(absent)"
    assert shown({"k": "v" * 300}, limit=20) == '{"k":"vvvvvvvvvvvvv…'
