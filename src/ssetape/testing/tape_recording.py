"""The recording side of one test's cassette: its recording proxies, and where they store.

``once`` without a cassette and ``all`` use the proxies this process shares between its
tests (`ssetape record` children, see :mod:`ssetape.testing.recording_proxies`): the test's
exchanges are those stored after the last one before it began, copied into the test's own
store once the proxies have settled. ``new_episodes`` replays the cassette beside recording,
so each test starts its own `ssetape replay --record-mode new_episodes` on its own store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ssetape.cassettes.cassette import Cassette
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.testing.child_proxy import ChildProxy, ChildProxyError
from ssetape.testing.recording_proxies import RecordingProxies, SharedRecorder
from ssetape.vocabulary import RecordMode

__all__ = ["FORWARD", "SETTLE_WAIT", "RecordingSettings", "TapeRecording"]

FORWARD = ""  # the key of the forward proxy among the per-upstream ones
SETTLE_WAIT = 10.0  # seconds a shared recording proxy may take to store a test's exchanges


@dataclass(frozen=True)
class RecordingSettings:
    """What a recording proxy is started with (those that differ do not share a proxy)."""

    command: list[str]
    record_mode: RecordMode
    confdir: Path
    speed: float = 0.0
    ignore_fields: Sequence[str] = ()
    match_host: bool = True
    allow_gaps: bool = False
    redact_headers: Sequence[str] = ()
    redact_fields: Sequence[str] = ()
    profiles: Mapping[str, str] = field(default_factory=dict)
    redaction_key: str | None = None


class TapeRecording:
    def __init__(
        self,
        settings: RecordingSettings,
        *,
        store: Store,
        tmp: Path,
        template: Path,
        session: str,
        ensure_ca: Callable[[], object],
    ) -> None:
        self.settings = settings
        self.session = session
        self._tmp = tmp
        self._ensure_ca = ensure_ca
        self._own: dict[str, ChildProxy] = {}  # new_episodes: by origin
        self._shared: dict[str, SharedRecorder] = {}  # once/all: those this test used
        self._db = tmp / "tape.db"
        #: Where this test's recordings are stored: its own store, or the shared proxies'.
        self.store = store
        self.shares = settings.record_mode != RecordMode.NEW_EPISODES
        if self.shares:
            self._db, self.store = RecordingProxies.shared().store(template, settings.redaction_key)
        # Tests run one at a time in a process: what is stored after this is this test's.
        self.after = Queries(self.store).last_id()

    def url(self, origin: str, mode: str) -> str:
        """The URL of the recording proxy for ``origin``, started or shared."""
        what = f"ssetape recording proxy ({mode})"
        if not self.shares:
            child = self._own.get(origin)
            if child is None:
                child = ChildProxy(self._args(mode), what=what, cwd=self._tmp)
                self._own[origin] = child
            return child.url
        shared = self._shared.get(origin)
        if shared is None:
            shared = RecordingProxies.shared().recorder(
                self._args(mode), what=what, forward=origin == FORWARD
            )
            shared.begin(self.session)
            self._shared[origin] = shared
        return shared.url

    def _args(self, mode: str) -> list[str]:
        s = self.settings
        if s.record_mode == RecordMode.NEW_EPISODES:
            args = [*s.command, "replay", "--record-mode", RecordMode.NEW_EPISODES.value,
                    "--speed", repr(s.speed)]  # fmt: skip
            for name in s.ignore_fields:
                args += ["--ignore-field", name]
            if not s.match_host:
                args.append("--no-match-host")
            if s.allow_gaps:
                args.append("--allow-gaps")
        else:
            args = [*s.command, "record"]  # no replayer: one process less to start
        args += ["--db", str(self._db), "--port", "0", "--mode", mode,
                 "--confdir", str(s.confdir)]  # fmt: skip
        for name in s.redact_fields:
            args += ["--redact-field", name]
        for host, profile in s.profiles.items():
            args += ["--profile", f"{host}={profile}"]
        for header in s.redact_headers:
            args += ["--redact-header", header]
        if self.session and not self.shares:  # a shared proxy is told each test's session
            args += ["--session", self.session]
        self._ensure_ca()  # created before mitmproxy starts (see TapeSession.ca_file)
        return args

    def finish(self) -> list[str]:
        """Stop this test's own proxies, settle the shared ones: what went wrong, one phrase
        each (then its cassette must not be written)."""
        problems = []
        for child in self._own.values():
            rc = child.stop()
            if rc != 0:
                problems.append(f"{child.what} exited with {rc}: {child.tail()}")
        for proxy in self._shared.values():
            try:
                answer, lost = proxy.settle(SETTLE_WAIT)
            except ChildProxyError as e:
                problems.append(str(e))
                continue
            if lost:
                problems.append(f"{proxy.what} lost what this test sent: {lost}")
            elif not answer.settled:
                # Written now, the cassette would silently miss what is not stored yet.
                why = (
                    f"{answer.in_flight} exchange(s) still in flight (a stream left open?)"
                    if answer.in_flight
                    else "the store did not take what it sent"
                )
                problems.append(f"{proxy.what}: {why} {SETTLE_WAIT:g} s after the test ended")
        return problems

    def take_into(self, store: Store) -> None:
        """Copy this test's exchanges from the shared proxies' store into ``store`` (its own
        proxies recorded into it already)."""
        if not self._shared:
            return
        part = Cassette(self._tmp / "recorded.jsonl")
        part.export(self.store, Queries.after(self.after))
        part.import_into(store, profiles=self.settings.profiles)

    def stop(self) -> None:
        """Stop this test's own proxies (a test that failed to start)."""
        for child in self._own.values():
            child.stop()
