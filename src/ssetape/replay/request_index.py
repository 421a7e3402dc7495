"""Which recording answers a request: every replay server's in-memory index of the store.

Built from the stored (already redacted) requests; incoming requests are redacted with the
store's key the same way before they are compared, so a masked field still matches (masks
compare key-free: see ``redactor.unmask``). A request with no recording gets a
:class:`Miss` naming the nearest recordings and how they differ.
"""

from __future__ import annotations

import operator
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, cast

import orjson
from sqlalchemy import func, select

from ssetape.matching import canonical_request, differences, fingerprint, leaves, one_line
from ssetape.redactor import Redactor, unmask
from ssetape.storage.models import Exchange
from ssetape.storage.store import Store
from ssetape.vocabulary import MAX_BODY, ExchangeState

__all__ = ["CLI_HINT", "Miss", "RequestIndex"]

_NEWEST = select(func.max(Exchange.id))

REPLAYABLE_STATES = (
    ExchangeState.COMPLETED,
    ExchangeState.TRUNCATED,
    ExchangeState.ABORTED,
    ExchangeState.INTERRUPTED,
)
NEAREST = 3
NEAREST_SCAN = 500  # recordings a miss is compared with, at most
_ID_SPAN = 1 << 48  # more than any exchange id: a distance weighs more than any id
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
    endpoint: tuple[str, str, str]  # the canonical method, host and path


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
        # Exchanges on the tape that cannot be replayed (no response stored, or a capture
        # that lost bytes it cannot place): a miss must not call such a tape empty.
        self._unreplayable = 0
        # Everything below this id is final and indexed; above it, rows may still be
        # recording (a slow stream begun before a fast one that finished).
        self._floor = 0
        self._newest = 0  # the newest id the last read saw
        self._by_endpoint: dict[tuple[str, str], list[_Entry]] = {}
        self._lock = threading.Lock()  # never held while the store is read
        self._refreshing = threading.Lock()  # one refresh at a time
        self._refresh_began = -float("inf")  # monotonic time the last refresh began
        # One nearest-recording search at a time: under a storm of misses, the threads that
        # answer them wait here instead of all taking the interpreter lock from the event
        # loop that times the streams being replayed.
        self._searching = threading.Lock()
        self._leaves: dict[int, frozenset[int]] = {}  # of recent candidates (see _rough)
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

    def refresh(self, *, after: float | None = None) -> None:
        """Add recordings made since the last refresh (new_episodes, other recorders). The
        store is read without the lock: lookups on the event loop never wait for it.

        ``after`` (a ``time.monotonic()``): nothing to do if a refresh began since then,
        as it saw every recording committed before; concurrent misses share one."""
        with self._refreshing:
            if after is not None and self._refresh_began >= after:
                return
            self._refresh_began = time.monotonic()
            self._read_new()

    def _read_new(self) -> None:  # with self._refreshing held
        # Under a storm of misses this runs for most of them (each needs the recordings
        # committed before it came): first one cheap look at the newest id, and nothing more
        # when no recording is new or still in progress. A miss then holds the interpreter
        # lock (and, on PostgreSQL, a round trip) for a fraction of a full read.
        with self.store.engine.connect() as conn:
            newest = conn.execute(_NEWEST).scalar()
            if newest is None or (newest == self._newest and self._floor >= newest):
                return
            rows = conn.execute(
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
                    Exchange.gap_seq,
                )
                .where(Exchange.id > self._floor)
                # Pruned to its summary (`ssetape prune --events-only`): nothing to play.
                .where(Exchange.events_pruned_at.is_(None))
                .order_by(Exchange.id)
            ).all()
        with self._lock:
            self._merge(rows)
            self._newest = max(self._newest, newest)

    def _merge(self, rows: Sequence[Any]) -> None:  # with the lock held
        floor = None
        for xid, state, status, error, method, scheme, host, path, query, body, gap in rows:
            if state == ExchangeState.RECORDING:
                floor = xid - 1 if floor is None else floor
                continue
            if xid in self._indexed:
                continue
            self._indexed.add(xid)
            # A capture that failed before 0.2.0 left holes nothing marks: not faithful. Now a
            # failure keeps the wire bytes (encoded streams) or says where the gap is.
            failed = "capture failed" in (error or "")
            faithful = not failed or gap is not None or "wire bytes are kept" in (error or "")
            if state not in REPLAYABLE_STATES or status is None or not faithful:
                self._unreplayable += 1
                continue
            canon = self._canonical(method, host, path, query, body)
            ids = self._by_fp.setdefault(fingerprint(canon), [])
            ids.append(xid)
            ids.sort()
            url = f"{scheme}://{host}{path}" + (f"?{query}" if query else "")
            endpoint = (canon["method"], canon["host"], canon["path"])
            entry = _Entry(xid, f"{method} {url}", canon, endpoint)
            self._entries.append(entry)
            self._by_endpoint.setdefault((method.upper(), path), []).append(entry)
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
        port: int | None = None,
    ) -> int | Miss | None:
        """The exchange id to serve, or why there is none.

        With ``may_query`` off it never touches the database (safe on an event loop) and
        answers None where it would have to look for new recordings. ``port``: the one the
        request went to, for a miss's message (matching compares hosts only).
        """
        where = host if port in (None, 80, 443) else f"{host}:{port}"
        arrived = time.monotonic()
        path, _, raw_query = full_path.partition("?")
        query = self.redactor.query(raw_query)
        # A body over MAX_BODY was never stored nor redacted: its stand-in is compared.
        big = body is not None and len(body) > MAX_BODY
        canon = self._canonical(
            method, host, path, query, body if big else self.redactor.body(body)
        )
        fp = fingerprint(canon)
        if not may_query:
            # On the event loop: never wait for a lookup that holds the lock in a thread.
            if not self._lock.acquire(blocking=False):
                return None
            try:
                return self._take(fp, method, where, path) if fp in self._by_fp else None
            finally:
                self._lock.release()
        with self._lock:
            known = fp in self._by_fp
        if not known:
            self.refresh(after=arrived)
        with self._lock:
            found = self._take(fp, method, where, path) if fp in self._by_fp else None
            candidates = self._candidates(method, path) if found is None else []
        if found is None:
            # Out of the lock: the nearest search compares with many recordings.
            with self._searching:
                found = self._miss(method, where, path, canon, candidates)
        if isinstance(found, Miss) and self.keep_misses:
            self.misses.append(found)
        return found

    def _candidates(self, method: str, path: str) -> list[_Entry]:  # with the lock held
        """The recordings a miss is compared with: the same endpoint's first, at most
        NEAREST_SCAN in all, so a miss costs the same on a tape of a million."""
        same = self._by_endpoint.get((method.upper(), path), [])[-NEAREST_SCAN:]
        ids = {e.id for e in same}
        rest = self._entries[-(NEAREST_SCAN - len(same)) :] if len(same) < NEAREST_SCAN else []
        return [*same, *(e for e in rest if e.id not in ids)]

    def _take(self, fp: str, method: str, host: str, path: str) -> int | Miss:
        """The next recording of ``fp`` (known) to serve."""  # with the lock held
        ids = self._by_fp[fp]
        n = self._served.get(fp, 0)
        if n < len(ids) or self.repeat:
            self._served[fp] = n + 1
            return ids[min(n, len(ids) - 1)]
        return Miss(
            one_line(
                f"no recording left for {method} {host}{path}: its {len(ids)} recording(s) "
                "were all served (ssetape_repeat is off)"
            ),
            [],
        )

    def _miss(
        self, method: str, host: str, path: str, canon: dict[str, Any], candidates: list[_Entry]
    ) -> Miss:  # with self._searching held
        # A rough distance first (set operations), then field-by-field differences for the
        # few it ranks best. The distances are computed by map() over the candidates, in C:
        # a search runs in a thread, and every bytecode it runs holds the interpreter lock
        # that the loop timing the streams (in a test, the test's own threads too) waits for.
        mine, endpoint = _rough(canon), (canon["method"], canon["host"], canon["path"])
        if len(self._leaves) > 4 * NEAREST_SCAN:
            self._leaves.clear()  # bounded: the candidates are mostly the same few hundred
        ids = [e.id for e in candidates]
        cached = list(map(self._leaves.get, ids))
        for i, theirs in enumerate(cached):
            if theirs is None:
                cached[i] = self._leaves[ids[i]] = _rough(candidates[i].canonical)
        sets = cast(list[frozenset[int]], cached)  # none is None now
        # A different endpoint is 20 leaves further.
        moved = [20 * (e.endpoint != endpoint) for e in candidates]
        # |theirs ^ mine| less |mine| (the same for all): |theirs| - 2 |theirs & mine|.
        common = map(len, map(mine.intersection, sets))
        distance = map(operator.sub, map(len, sets), map(operator.mul, common, repeat(2)))
        distance = map(operator.add, distance, moved)
        # One int per candidate, nearest first and then newest: sorted in C.
        score = map(operator.sub, map(operator.mul, distance, repeat(_ID_SPAN)), ids)
        by_id = dict(zip(ids, candidates, strict=True))
        scored = []
        for s in sorted(score)[: NEAREST * 3]:
            e = by_id[-s % _ID_SPAN]
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
        elif self._unreplayable:
            msg += (
                f"; the tape holds no recording that can be replayed ({self._unreplayable} "
                "without a stored response, or not recorded whole: `ssetape list` shows them)"
            )
        else:
            msg += "; the tape is empty"
        return Miss(one_line(f"{msg}. {self.hint}"), nearest)


def _rough(canonical: dict[str, Any]) -> frozenset[int]:
    """A request's leaves (``matching.leaves``) by their hashes: a tuple's hash is computed
    anew each time a set operation meets it, an int's is itself, so comparing a miss with
    500 recordings costs a tenth. A collision only makes the rough distance rougher: the
    nearest few are then compared field by field."""
    return frozenset(map(hash, leaves(canonical)))
