"""Numbers no store holds, as an agent may pass them (2**63, 5,000 digits, 1e308, a float
that JSON cannot say): each an error of one line that names what is wrong, never the text of
Python, pydantic or the database driver."""

from __future__ import annotations

from typing import Any

from ssetape.storage.store import Store
from tests.ssetape.mcp_server.client import call, error, in_memory

HUGE = 2**63
DIGITS = "9" * 5000
# An id of 5,000 digits is "past what the store holds" where the SDK reads it as a number (mcp
# 1) and "no exchange" where it keeps the string (mcp 2): one line naming it either way.
ID_GONE = ("past what the store holds", "no exchange")
CALLS: list[tuple[str, dict[str, Any], str | tuple[str, ...]]] = [
    ("get_exchange", {"events": True, "after_seq": HUGE}, "after_seq: an event's seq"),
    ("get_exchange", {"id": DIGITS}, ID_GONE),
    ("compare", {"a": DIGITS}, ID_GONE),
    ("list_exchanges", {"cursor": str(HUGE)}, "past what the store holds"),
    ("list_exchanges", {"cursor": DIGITS}, "past what the store holds"),
    ("find_stalls", {"cursor": str(HUGE)}, "past what the store holds"),
    ("find_stalls", {"min_gap_ms": 1e308}, "min_gap_ms: at most 1,000,000,000,000 ms"),
    ("find_stalls", {"min_gap_ms": None}, "min_gap_ms: Input should be a valid number"),
    # A sessions cursor is no number but base64: this one is none the tool gave out.
    ("sessions", {"cursor": DIGITS}, ("past what the store holds", "pass next_cursor")),
]
INTERNAL = ("Python", "SQLite", "int_max_str_digits", "pydantic", "Traceback", "psycopg",
            "out of range", "bigint", "validation error")  # fmt: skip


def test_a_number_no_store_holds_is_a_one_line_error_naming_it(store: Store) -> None:
    async def body(client: Any) -> list[str]:
        listed = await call(client, "list_exchanges", limit=1)
        first = listed["exchanges"][0]["id"]
        said = []
        for name, args, _ in CALLS:
            full = {"id": first, "a": first, "b": first, **args} if name in (
                "get_exchange", "compare") else dict(args)  # fmt: skip
            said.append(await error(client, name, **full))
        return said

    for (name, _, want), text in zip(CALLS, in_memory(store, body), strict=True):
        wants = (want,) if isinstance(want, str) else want
        assert text.startswith(f"Error executing tool {name}: "), text
        assert any(w in text for w in wants), text
        assert "\n" not in text and len(text) < 200, text
        assert not any(word in text for word in INTERNAL), text
