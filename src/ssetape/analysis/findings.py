"""Protocol findings: what a stream did that its API's rules say it should not.

The codes are a closed vocabulary, stored per exchange and filtered on by auditors.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["NOTES", "UNMODELLED", "Finding", "FindingCode"]


class FindingCode(StrEnum):
    EVENT_AFTER_TERMINAL = "event_after_terminal"  # anything after the stream's terminal
    NO_TERMINAL_EVENT = "no_terminal_event"  # the stream ended without its terminal
    NEVER_ARRIVES = "never_arrives"  # an event the API declares but never sends
    INVALID_JSON = "invalid_json"
    USAGE_MISSING = "usage_missing"  # usage was asked for and did not come
    UNKNOWN_EVENT = "unknown_event"  # outside the API's vocabulary (kept, informational)
    ANALYZER_ERROR = "analyzer_error"  # a bug of ours, never of the stream
    SERVER_ERROR = "server_error"  # an error a WebSocket session's server sent
    FINDINGS_TRUNCATED = "findings_truncated"  # more findings than are kept
    # A note, not a fault: no API ssetape models claimed the stream, so nothing was checked.
    UNKNOWN_API = "unknown_api"


# The detail of UNKNOWN_API.
UNMODELLED = "No API ssetape models claimed this stream: its events and timing are kept, unchecked."
# Codes that say what a stream is, not a rule it broke: shown and stored with the findings,
# never a failure of the plugin's assert_no_findings or --ssetape-strict.
NOTES: frozenset[str] = frozenset({FindingCode.UNKNOWN_API})


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    event_seq: int | None
    detail: str
