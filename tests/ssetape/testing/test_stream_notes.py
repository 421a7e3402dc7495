"""A note is not a finding: a stream of an API ssetape does not model carries the neutral
``unknown_api`` note, which the plugin shows nowhere as a broken rule (assert_no_findings,
--ssetape-strict), while a real finding beside it still fails."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from ssetape.analysis.findings import UNMODELLED, FindingCode
from ssetape.storage.models import Exchange, Finding
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.testing.stream_checks import assert_no_findings, findings_report
from ssetape.testing.stream_record import read_records


def _exchange(store: Store, uid: str, codes: list[str]) -> int:
    with store.Session.begin() as s:
        x = Exchange(
            uid=uid, started_at=dt.datetime.now(dt.UTC), method="POST", scheme="https",
            host="llm.example", port=443, path="/v9/generate", query="", http_version="HTTP/1.1",
            request_headers=[], request_body=b"{}", fingerprint="ab" * 32, is_stream=True,
            recorder="host:1:0", state="completed", api="unknown", outcome="completed",
        )  # fmt: skip
        s.add(x)
        s.flush()
        for n, code in enumerate(codes):
            s.add(Finding(exchange_id=x.id, n=n, code=code, event_seq=None, detail=UNMODELLED))
        return x.id


def test_an_unknown_api_note_fails_no_check_and_a_finding_still_does(tmp_path: Path) -> None:
    store = Store.open(str(tmp_path / "tape.db"))
    try:
        noted = _exchange(store, "a" * 32, [FindingCode.UNKNOWN_API])
        broken = _exchange(store, "b" * 32, [FindingCode.UNKNOWN_API, FindingCode.INVALID_JSON])
        rec, bad = read_records(Queries(store), [noted, broken], {})
    finally:
        store.close()
    assert rec.findings == ()
    assert_no_findings(rec)
    assert findings_report([rec]) == ""
    assert [f.code for f in bad.findings] == [FindingCode.INVALID_JSON]
    with pytest.raises(AssertionError, match="1 finding"):
        assert_no_findings(bad)
