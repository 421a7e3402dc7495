"""Which recording answers a request: every replay server's in-memory index of the store.

Built from the stored (already redacted) requests; incoming requests are redacted with the
store's key the same way before they are compared, so a masked field still matches (masks
compare key-free: see ``redactor.unmask``). A request with no recording gets a
:class:`Miss` naming the nearest recordings and how they differ.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import select

from ssetape.matching import canonical_request, differences, fingerprint
from ssetape.redactor import Redactor, unmask
from ssetape.storage.models import Exchange
from ssetape.storage.store import Store
from ssetape.vocabulary import ExchangeState

__all__ = ["CLI_HINT", "Miss", "RequestIndex"]

REPLAYABLE_STATES = (
    ExchangeState.COMPLETED,
    ExchangeState.TRUNCATED,
    ExchangeState.ABORTED,
    ExchangeState.INTERRUPTED,
)
NEAREST = 3
# What a miss's message tells the user to do, in the words of the command they ran.
CLI_HINT = (
    "Record it with --record-mode new_episodes, or ignore volatile fields with --ignore-field."
)


@dataclass(frozen=True, slots=True)
class Miss:
    message: str
    nearest: list[dict[str, Any]]

    def body(self) -> bytes:
        """The JSON error a client gets, shaped like the APIs' own errors."""
        doc = {
            "error": {
                "type": "ssetape_replay_miss",
                "code": "ssetape_replay_miss",
                "message": self.message,
                "nearest": self.nearest,
            }
        }
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2)


@dataclass(frozen=True, slots=True)
class _Entry:
    id: int
    url: str
    canonical: dict[str, Any]


class RequestIndex:
    def __init__(
        self,
        store: Store,
        redactor: Redactor,
        *,
        ignore: Sequence[str] = (),
        match_host: bool = True,
        repeat: bool = True,
        hint: str = CLI_HINT,
        keep_misses: bool = False,
    ) -> None:
        """``hint``: the advice a miss ends with; ``keep_misses``: remember every miss in
        :attr:`misses` (for a test's report)."""
        self.store = store
        self.redactor = redactor
        self.ignore = tuple(ignore)
        self.match_host = match_host
        self.repeat = repeat
        self._by_fp: dict[str, list[int]] = {}
        self._entries: list[_Entry] = []
        self._served: dict[str, int] = {}
        self._indexed: set[int] = set()
        # Everything below this id is final and indexed; above it, rows may still be
        # recording (a slow stream begun before a fast one that finished).
        self._floor = 0
        self._lock = threading.Lock()
        self.hint = hint
        self.keep_misses = keep_misses
        self.misses: list[Miss] = []

    def _canonical(
        self, method: str, host: str, path: str, query: str, body: bytes | None
    ) -> dict[str, Any]:
        canon = canonical_request(
            method, host, path, query, body, ignore=self.ignore, match_host=self.match_host
        )
        return unmask(canon)  # type: ignore[no-any-return]

    def refresh(self) -> None:
        """Add recordings made since the last refresh (new_episodes, other recorders)."""
        with self.store.Session() as s:
            rows = s.execute(
                select(
                    Exchange.id,
                    Exchange.state,
                    Exchange.status,
                    Exchange.error,
                    Exchange.method,
                    Exchange.scheme,
                    Exchange.host,
                    Exchange.path,
                    Exchange.query,
                    Exchange.request_body,
                )
                .where(Exchange.id > self._floor)
                .order_by(Exchange.id)
            ).all()
        floor = None
        for xid, state, status, error, method, scheme, host, path, query, body in rows:
            if state == ExchangeState.RECORDING:
                floor = xid - 1 if floor is None else floor
                continue
            if xid in self._indexed:
                continue
            self._indexed.add(xid)
            # A stream whose capture failed has holes: serving it would not be faithful.
            faithful = "capture failed" not in (error or "")
            if state not in REPLAYABLE_STATES or status is None or not faithful:
                continue
            canon = self._canonical(method, host, path, query, body)
            ids = self._by_fp.setdefault(fingerprint(canon), [])
            ids.append(xid)
            ids.sort()
            url = f"{scheme}://{host}{path}" + (f"?{query}" if query else "")
            self._entries.append(_Entry(xid, f"{method} {url}", canon))
        if rows:
            self._floor = floor if floor is not None else rows[-1][0]

    def recording_ids(self) -> list[int]:
        """Every replayable recording indexed so far, oldest first."""
        with self._lock:
            return sorted(xid for ids in self._by_fp.values() for xid in ids)

    def lookup(
        self,
        method: str,
        host: str,
        full_path: str,
        body: bytes | None,
        *,
        may_query: bool = True,
    ) -> int | Miss | None:
        """The exchange id to serve, or why there is none.

        With ``may_query`` off it never touches the database (safe on an event loop) and
        answers None where it would have to look for new recordings.
        """
        path, _, raw_query = full_path.partition("?")
        query = self.redactor.query(raw_query)
        canon = self._canonical(method, host, path, query, self.redactor.body(body))
        fp = fingerprint(canon)
        with self._lock:
            if fp not in self._by_fp:
                if not may_query:
                    return None
                self.refresh()
            ids = self._by_fp.get(fp)
            if ids:
                n = self._served.get(fp, 0)
                if n < len(ids) or self.repeat:
                    self._served[fp] = n + 1
                    return ids[min(n, len(ids) - 1)]
                miss = Miss(
                    f"no recording left for {method} {host}{path}: its {len(ids)} recording(s) "
                    "were all served (ssetape_repeat is off)",
                    [],
                )
                if self.keep_misses:
                    self.misses.append(miss)
                return miss
            miss = self._miss(method, host, path, canon)
            if self.keep_misses:
                self.misses.append(miss)
            return miss

    def _miss(self, method: str, host: str, path: str, canon: dict[str, Any]) -> Miss:
        scored = []
        for e in self._entries:
            diffs = differences(e.canonical, canon)
            # A different endpoint is a worse neighbour than a different body field.
            weight = sum(10 if d.field in ("method", "host", "path") else 1 for d in diffs)
            scored.append((weight, e, diffs))
        scored.sort(key=lambda t: (t[0], -t[1].id))
        nearest = [
            {"id": e.id, "request": e.url, "differences": [d.as_dict() for d in diffs]}
            for _, e, diffs in scored[:NEAREST]
        ]
        msg = f"no recording matches {method} {host}{path}"
        if scored:
            _, best, diffs = scored[0]
            what = ", ".join(
                f"{d.field} (recorded {d.recorded!r}, requested {d.requested!r})" for d in diffs[:3]
            )
            msg += f"; nearest is #{best.id} {best.url}, which differs in {what}"
        else:
            msg += "; the tape is empty"
        return Miss(f"{msg}. {self.hint}", nearest)
