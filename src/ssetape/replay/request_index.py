"""Which recording answers a request: every replay server's in-memory index of the store.

Built from the stored (already redacted) requests; incoming requests are redacted with the
store's key the same way before they are compared, so a masked field still matches (masks
compare key-free: see ``redactor.unmask``). A request with no recording gets a
:class:`~ssetape.replay.miss.Miss` naming the nearest recordings and how they differ.

A recording the upstream cut (or the recorder did not finish) never shadows a whole one of
the same request: the whole one is served. Recording new episodes (``rerecord_cut``), a
request whose only recordings are cut is a miss, so it goes upstream and is recorded again.
"""

from __future__ import annotations

import difflib
import operator
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, cast

from ssetape.matching import Difference, canonical_request, differences, fingerprint, leaves
from ssetape.redactor import Redactor, unmask
from ssetape.replay.miss import CLI_ADVICE, Advice, Candidate, Miss, MissKind, Unreplayable
from ssetape.replay.ws_miss import FrameRules, store_name
from ssetape.storage.store import Store
from ssetape.storage.tape_reads import TapeEntry, TapeReads
from ssetape.vocabulary import MAX_BODY, TRANSPORT_ERRORS, ExchangeState

__all__ = ["Hit", "Miss", "RequestIndex", "store_name"]

REPLAYABLE_STATES = (
    ExchangeState.COMPLETED,
    ExchangeState.TRUNCATED,
    ExchangeState.ABORTED,
    ExchangeState.INTERRUPTED,
)
NEAREST = 3
NEAREST_SCAN = 500  # recordings a miss is compared with, at most
NEAREST_FINE = 48  # of those, at most this many compared field by field
_ID_SPAN = 1 << 48  # more than any exchange id: a distance weighs more than any id
_DEFAULT_PORT = {"http": 80, "https": 443}


class Hit(int):
    """The exchange id a lookup found (an int, as lookups always answered), with the rules
    it was matched by: a WebSocket session's replay matches its client frames by them too
    (``--ignore-field``), and tells their misses in the index's words."""

    rules: FrameRules

    def __new__(cls, xid: int, rules: FrameRules) -> Hit:
        hit = super().__new__(cls, xid)
        hit.rules = rules
        return hit

    def __reduce__(self) -> tuple[type[int], tuple[int]]:
        return int, (int(self),)  # copied or pickled, it is the id it stands for


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
        advice: Advice = CLI_ADVICE,
        name: Callable[[int], str] = store_name,
        keep_misses: bool = False,
        rerecord_cut: bool = False,
    ) -> None:
        """``advice``: what a miss tells the user to do; ``name``: how a miss names a
        recording (its cassette line, in a test); ``keep_misses``: remember every miss in
        :attr:`misses` (for a test's report); ``rerecord_cut``: a request whose only
        recordings are cut is a miss (recording new episodes records it again)."""
        self.store = store
        self.redactor = redactor
        self.ignore = tuple(ignore)
        self.match_host = match_host
        self.repeat = repeat
        self._by_fp: dict[str, list[int]] = {}  # whole recordings by request
        self._cut_by_fp: dict[str, list[int]] = {}  # cut ones, served only if no whole one
        self._own_bad: dict[str, list[Unreplayable]] = {}  # those that cannot be served
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
        self.advice = advice
        self.name = name
        self.keep_misses = keep_misses
        self.rerecord_cut = rerecord_cut
        self.misses: list[Miss] = []
        self.frame_rules = FrameRules(
            self.ignore, name, advice, self.misses if keep_misses else None
        )

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
        newest, rows = TapeReads(self.store).entries_after(self._floor, self._newest)
        if newest is None or rows is None:
            return
        with self._lock:
            self._merge(rows)
            self._newest = max(self._newest, newest)

    def _merge(self, rows: Sequence[TapeEntry]) -> None:  # with the lock held
        floor = None
        for xid, state, status, error, method, scheme, host, port, path, query, body, gap in rows:
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
            canon = self._canonical(method, host, path, query, body)
            if state not in REPLAYABLE_STATES or status is None or not faithful:
                self._unreplayable += 1
                why = (
                    f"failed ({error or 'no response'})" if state == ExchangeState.FAILED
                    else "was not recorded whole" if not faithful
                    else f"has no stored response ({state})"
                )  # fmt: skip
                bad = Unreplayable(xid, self.name(xid), state, why)
                self._own_bad.setdefault(fingerprint(canon), []).append(bad)
                continue
            # Cut by the upstream, or left unfinished by the recorder: served only when the
            # request has no whole recording.
            by_fp = self._cut_by_fp if state in TRANSPORT_ERRORS else self._by_fp
            ids = by_fp.setdefault(fingerprint(canon), [])
            ids.append(xid)
            ids.sort()
            at = host if port in (None, _DEFAULT_PORT.get(scheme)) else f"{host}:{port}"
            url = f"{scheme}://{at}{path}" + (f"?{query}" if query else "")
            endpoint = (canon["method"], canon["host"], canon["path"])
            entry = _Entry(xid, f"{method} {url}", canon, endpoint)
            self._entries.append(entry)
            self._by_endpoint.setdefault((method.upper(), path), []).append(entry)
        if rows:
            self._floor = floor if floor is not None else rows[-1][0]

    def recording_ids(self) -> list[int]:
        """Every replayable recording indexed so far, oldest first."""
        with self._lock:
            both = (*self._by_fp.values(), *self._cut_by_fp.values())
            return sorted(xid for ids in both for xid in ids)

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
        path = full_path.partition("?")[0]
        canon = self._request(method, host, full_path, body)
        fp = fingerprint(canon)
        if not may_query:
            # On the event loop: never wait for a lookup that holds the lock in a thread.
            if not self._lock.acquire(blocking=False):
                return None
            try:
                return self._take(fp, f"{method} {where}{path}")
            finally:
                self._lock.release()
        with self._lock:
            known = fp in self._by_fp
        if not known:
            self.refresh(after=arrived)
        with self._lock:
            found = self._take(fp, f"{method} {where}{path}")
            candidates = self._candidates(method, path) if found is None else []
            own = tuple(self._own_bad.get(fp, ()))
        if found is None:
            # Out of the lock: the nearest search compares with many recordings.
            with self._searching:
                found = self._miss(f"{method} {where}{path}", canon, candidates, own)
        if isinstance(found, Miss) and self.keep_misses:
            self.misses.append(found)
        return found

    def _request(
        self, method: str, host: str, full_path: str, body: bytes | None
    ) -> dict[str, Any]:
        """The request as recordings are compared with it (redacted, canonical)."""
        path, _, raw_query = full_path.partition("?")
        query = self.redactor.query(raw_query)
        # A body over MAX_BODY was never stored nor redacted: its stand-in is compared.
        big = body is not None and len(body) > MAX_BODY
        return self._canonical(method, host, path, query, body if big else self.redactor.body(body))

    def key(self, method: str, host: str, full_path: str, body: bytes | None) -> str:
        """What a request is matched by: requests with the same key get the same recordings."""
        return fingerprint(self._request(method, host, full_path, body))

    def recordings(self, key: str) -> int:
        """How many recordings of requests with this key are indexed, replayable or not."""
        with self._lock:
            return sum(len(d.get(key, ())) for d in (self._by_fp, self._cut_by_fp, self._own_bad))

    def _candidates(self, method: str, path: str) -> list[_Entry]:  # with the lock held
        """The recordings a miss is compared with: the same endpoint's first, at most
        NEAREST_SCAN in all, so a miss costs the same on a tape of a million."""
        same = self._by_endpoint.get((method.upper(), path), [])[-NEAREST_SCAN:]
        ids = {e.id for e in same}
        rest = self._entries[-(NEAREST_SCAN - len(same)) :] if len(same) < NEAREST_SCAN else []
        return [*same, *(e for e in rest if e.id not in ids)]

    def _take(self, fp: str, what: str) -> int | Miss | None:
        """The next recording of ``fp`` to serve; None if it has none."""  # with the lock held
        ids = self._by_fp.get(fp)
        if ids is None and (ids := self._cut_by_fp.get(fp)) is not None and self.rerecord_cut:
            cut = tuple(Unreplayable(x, self.name(x), "cut", "was cut") for x in ids)
            return Miss(MissKind.CUT, what, self.advice, own=cut)
        if ids is None:
            return None
        n = self._served.get(fp, 0)
        if n < len(ids) or self.repeat:
            self._served[fp] = n + 1
            return Hit(ids[min(n, len(ids) - 1)], self.frame_rules)
        return Miss(MissKind.EXHAUSTED, what, self.advice, count=len(ids))

    def _miss(
        self,
        what: str,
        canon: dict[str, Any],
        candidates: list[_Entry],
        own: tuple[Unreplayable, ...],
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
        ranked = sorted(score)
        # Field by field: the best few, and those as rough-near as the last of them (a rough
        # tie says nothing of which differs least), NEAREST_FINE at most.
        if len(ranked) > NEAREST * 3:
            tie = ranked[NEAREST * 3 - 1] // _ID_SPAN
            ranked = [s for s in ranked[:NEAREST_FINE] if s // _ID_SPAN <= tie]
        scored = []
        for s in ranked:
            e = by_id[-s % _ID_SPAN]
            diffs = differences(e.canonical, canon)
            # A different endpoint is a worse neighbour than a different body field; of those
            # differing in as many fields, the one whose values differ least is nearest.
            weight = sum(10 if d.field in ("method", "host", "path") else 1 for d in diffs)
            scored.append((weight, sum(map(_unlike, diffs)), -e.id, e, diffs))
        scored.sort(key=lambda t: t[:3])
        nearest = tuple(
            Candidate(e.id, self.name(e.id), e.url, tuple(diffs))
            for *_, e, diffs in scored[:NEAREST]
        )
        if own:  # this very request was recorded, and that is what the user must hear
            return Miss(MissKind.FAILED, what, self.advice, own=own)
        kind = MissKind.DIFFERS if nearest else MissKind.EMPTY
        if not nearest and self._unreplayable:
            kind = MissKind.UNREPLAYABLE
        return Miss(kind, what, self.advice, nearest, own, count=self._unreplayable)


def _unlike(d: Difference) -> float:
    """How unlike a differing field's two values are, from 0 (alike) to 1."""
    a, b = str(d.recorded), str(d.requested)
    match = difflib.SequenceMatcher(None, a, b, autojunk=False)
    # Long values: the cheap bound (characters in common), not the quadratic alignment.
    return 1.0 - (match.ratio() if len(a) + len(b) <= 2000 else match.quick_ratio())


def _rough(canonical: dict[str, Any]) -> frozenset[int]:
    """A request's leaves (``matching.leaves``) by their hashes: a tuple's hash is computed
    anew each time a set operation meets it, an int's is itself, so comparing a miss with
    500 recordings costs a tenth. A collision only makes the rough distance rougher: the
    nearest few are then compared field by field."""
    return frozenset(map(hash, leaves(canonical)))
