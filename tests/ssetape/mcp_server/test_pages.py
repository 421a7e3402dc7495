"""Pages bounded by what they cost an agent's context: bytes of JSON, not only a count. A page
stops before the item that would pass its budget, holds at least one, and cuts a huge one
with a note; the answer's text is compact JSON, the same as its structured content."""

from __future__ import annotations

from typing import Any

import orjson

from ssetape.mcp_server.paging import MAX_PAGE_BYTES, MIN_PAGE_BYTES, PAGE_BYTES
from ssetape.storage.store import Store
from tests.ssetape.mcp_server.client import answer, call, error, in_memory
from tests.ssetape.mcp_server.conftest import INJECTION, LONG
from tests.ssetape.web.conftest import Tape


def _bytes(doc: Any) -> int:
    return len(orjson.dumps(doc))


def test_a_default_page_of_events_fits_its_budget_and_the_pages_hold_them_all(
    tape: Tape, store: Store
) -> None:
    long = max(tape.exchanges(), key=lambda x: x.event_count or 0)
    assert (long.event_count or 0) > LONG

    async def body(client: Any) -> list[dict[str, Any]]:
        # What an agent asks for: as many as the tool gives, from the start, then the rest.
        pages = [await answer(client, "get_exchange", id=long.id, events=True, limit=200)]
        while (after := pages[-1]["structuredContent"]["events_next_after_seq"]) is not None:
            pages.append(await answer(client, "get_exchange", id=long.id, events=True,
                                      limit=200, after_seq=after))  # fmt: skip
        return pages

    pages = in_memory(store, body)
    docs = [p["structuredContent"] for p in pages]
    seqs = [e["seq"] for d in docs for e in d["events"]]
    assert seqs == list(range(long.event_count or 0))
    assert len(docs) >= 3 and all(len(d["events"]) > 1 for d in docs)
    for page, doc, following in zip(pages, docs, [*docs[1:], None], strict=True):
        assert doc["events_page_bytes"] == _bytes(doc["events"]) <= PAGE_BYTES
        # It stopped where the next event would have passed the budget.
        if following is not None:
            assert doc["events_page_bytes"] + 1 + _bytes(following["events"][0]) > PAGE_BYTES
        # The text an agent reads is that JSON, compact: no bigger than the structured one.
        [content] = page["content"]
        assert orjson.loads(content["text"]) == doc and len(content["text"].encode()) == _bytes(doc)
        assert "events_note" not in doc


def test_one_event_past_the_budget_is_cut_to_fit_and_says_so(tape: Tape, store: Store) -> None:
    [evil] = [x for x in tape.exchanges() if x.model == "gpt-4o-evil"]

    async def body(client: Any) -> dict[str, Any]:
        whole = await call(client, "get_exchange", id=evil.id, events=True)
        [seq] = [e["seq"] for e in whole["events"] if INJECTION[:40] in e["data"]["text"]]
        out = {"seq": seq, "whole": whole}
        out["small"] = await call(client, "get_exchange", id=evil.id, events=True,
                                  after_seq=seq - 1, max_bytes=MIN_PAGE_BYTES)  # fmt: skip
        out["too_small"] = await error(client, "get_exchange", id=evil.id, events=True,
                                       max_bytes=MIN_PAGE_BYTES - 1)  # fmt: skip
        return out

    out = in_memory(store, body)
    shown = next(e for e in out["whole"]["events"] if e["seq"] == out["seq"])
    assert _bytes(shown) > MIN_PAGE_BYTES  # as a page of its own, it would pass the budget
    small = out["small"]
    [event] = small["events"]
    assert event["seq"] == out["seq"] and small["events_next_after_seq"] == out["seq"]
    assert small["events_page_bytes"] == _bytes(small["events"]) <= MIN_PAGE_BYTES
    data = event["data"]
    assert data["truncated"] and data["size"] > len(INJECTION) > len(data["text"]) > 0
    assert shown["data"]["text"].startswith(data["text"])
    assert "max_bytes" in small["events_note"] and "cut" in small["events_note"]
    assert str(MIN_PAGE_BYTES) in out["too_small"]


def test_lists_stop_at_their_budget_and_the_cursor_goes_on(tape: Tape, store: Store) -> None:
    async def body(client: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"default": await call(client, "list_exchanges", limit=100)}
        pages = [await call(client, "list_exchanges", limit=100, max_bytes=2000)]
        while pages[-1]["next_cursor"] is not None:
            pages.append(await call(client, "list_exchanges", limit=100, max_bytes=2000,
                                    cursor=pages[-1]["next_cursor"]))  # fmt: skip
        out["pages"] = pages
        found = [await call(client, "findings", max_bytes=MIN_PAGE_BYTES)]
        while found[-1]["next_cursor"] is not None:
            found.append(await call(client, "findings", max_bytes=MIN_PAGE_BYTES,
                                    cursor=found[-1]["next_cursor"]))  # fmt: skip
        out["found"], out["all_found"] = found, await call(client, "findings")
        return out

    out = in_memory(store, body)
    everything = sorted((x.id for x in tape.exchanges()), reverse=True)
    assert out["default"]["page_bytes"] <= PAGE_BYTES
    pages = out["pages"]
    assert [x["id"] for p in pages for x in p["exchanges"]] == everything
    assert len(pages) > 1 and all(_bytes(p["exchanges"]) == p["page_bytes"] <= 2000
                                  for p in pages)  # fmt: skip
    found = [f for p in out["found"] for f in p["findings"]]
    assert found == out["all_found"]["findings"] and found
    assert all(p["page_bytes"] <= MIN_PAGE_BYTES for p in out["found"])


def test_stalls_are_paged_by_bytes_too(store: Store) -> None:
    """find_stalls reads each exchange's events to list its pauses: its page stops at the
    budget as the others do, and the cursor goes on from there with no stall twice."""

    async def body(client: Any) -> list[dict[str, Any]]:
        pages = [await call(client, "find_stalls", min_gap_ms=1, max_bytes=MIN_PAGE_BYTES)]
        while (cursor := pages[-1]["next_cursor"]) is not None:
            pages.append(await call(client, "find_stalls", min_gap_ms=1, cursor=cursor,
                                    max_bytes=MIN_PAGE_BYTES))  # fmt: skip
        pages.append(await call(client, "find_stalls", min_gap_ms=1, limit=20,
                                max_bytes=MAX_PAGE_BYTES))  # fmt: skip
        return pages

    *small, whole = in_memory(store, body)
    ids = [s["exchange"]["id"] for p in small for s in p["stalls"]]
    assert len(small) > 1 and ids == [s["exchange"]["id"] for s in whole["stalls"]]
    for page in small:
        assert page["page_bytes"] == _bytes(page["stalls"])
        assert page["page_bytes"] <= MIN_PAGE_BYTES or (len(page["stalls"]) == 1 and page["note"])
