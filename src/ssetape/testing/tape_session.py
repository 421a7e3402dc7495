"""What the pytest plugin's ``ssetape`` fixture gives a test: a cassette behind a proxy.

Replaying (record mode ``none``, or ``once`` with a cassette) needs no proxy process: the
cassette is imported into a private SQLite file and served from a thread of the test process,
one server per upstream for ``base_url`` (reverse mode), and one for ``proxy_url`` (forward
mode) that ends HTTPS tunnels itself with leaf certificates of mitmproxy's CA (so that one
needs mitmproxy installed, though it never runs it).

Recording (``once`` without a cassette, ``new_episodes``, ``all``) runs real recording proxies
(see :mod:`ssetape.testing.tape_recording`; most are shared by the tests of a process) and
writes the cassette when the test ends, under a per-cassette lock and by atomic replace, so
parallel workers (pytest-xdist) never corrupt a cassette nor lose each other's recordings.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from ssetape.cassettes.cassette import Cassette
from ssetape.matching import canonical_request, one_line
from ssetape.redactor import Redactor, unmask
from ssetape.replay.direct_front import DirectFront
from ssetape.replay.faults import Fault, Faults
from ssetape.replay.miss import Advice, Miss
from ssetape.replay.request_index import RequestIndex
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from ssetape.testing.age import read_lines
from ssetape.testing.cassette_lock import cassette_lock, default_lock_dir
from ssetape.testing.child_proxy import SSETAPE, ChildProxyError
from ssetape.testing.drift import RequestDrift, content_changes, field_drift, recordings
from ssetape.testing.loop_thread import LoopThread
from ssetape.testing.stream_record import ServedIndex as _ServedIndex
from ssetape.testing.stream_record import StreamRecord, read_records, recorded_ids
from ssetape.testing.tape_recording import FORWARD, RecordingSettings, TapeRecording
from ssetape.vocabulary import MAX_BODY, RecordMode

if TYPE_CHECKING:  # imported where a forward proxy needs it: mitmproxy's CA store
    from ssetape.replay.leaf_certificates import LeafCertificates


def pytest_advice(cassette: Path) -> Advice:
    """What a miss tells the test's author to do, in pytest's words."""
    return Advice(
        "--ssetape-record-mode=new_episodes",
        "@pytest.mark.ssetape(ignore_fields=[...])",
        f"ssetape list --db {cassette}",
    )


def _asked(
    method: str, host: str, full_path: str, body: bytes | None, **_: Any
) -> tuple[str, str, str, bytes | None]:
    return method, host, full_path, body


class _DriftIndex(_ServedIndex):
    """Also remembers, for the drift report, each request that missed or that matched only
    because fields were ignored: redacted as the index redacts it, no field ignored."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.drifted: list[tuple[dict[str, Any], int | Miss]] = []

    def lookup(self, *args: Any, **kwargs: Any) -> int | Miss | None:
        found = super().lookup(*args, **kwargs)
        if isinstance(found, Miss) or (found is not None and self.ignore):
            method, host, full_path, body = _asked(*args, **kwargs)
            path, _, query = full_path.partition("?")
            big = body is not None and len(body) > MAX_BODY
            canon = canonical_request(
                method, host, path, self.redactor.query(query),
                body if big else self.redactor.body(body), match_host=self.match_host,
            )  # fmt: skip
            self.drifted.append((unmask(canon), found))
        return found


class TapeSession:
    _template: ClassVar[Path | None] = None
    _template_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        cassette: Path,
        *,
        confdir: Path,
        record_mode: str = RecordMode.NONE,
        speed: float = 0.0,
        ignore_fields: Sequence[str] = (),
        match_host: bool = True,
        allow_gaps: bool = False,
        redact_headers: Sequence[str] = (),
        redact_fields: Sequence[str] = (),
        redaction_key: str | None = None,
        profiles: Mapping[str, str] | None = None,
        run_id: str = "",
        lock_dir: Path | None = None,
        ssetape_bin: str = "",
        session: str = "",
        faults: Sequence[Fault | str] = (),
    ) -> None:
        mode = RecordMode.parse(record_mode, "record_mode")
        #: Outages served on purpose when replaying (FaultError here for a bad one).
        self.faults = Faults(faults)
        if not speed >= 0:
            raise ValueError(f"speed {speed!r}: use 0 (instant), 1 (recorded timing) or more")
        self.cassette = cassette
        # Recording runs `ssetape` in a process of its own: this installation's, or the one
        # named (installed apart, e.g. with pipx, where this environment cannot hold mitmproxy).
        self.command = [ssetape_bin] if ssetape_bin else SSETAPE
        self.record_mode = mode
        self.speed = speed
        self.ignore_fields = tuple(ignore_fields)
        self.match_host = match_host
        self.allow_gaps = allow_gaps
        self.redact_headers = tuple(redact_headers)
        self.redact_fields = tuple(redact_fields)
        self.confdir = confdir
        self.redaction_key = redaction_key
        # HOST=NAME provider profiles the streams are read under, recorded and replayed.
        self.profiles = dict(profiles or {})
        self.run_id = run_id
        #: The session the exchanges it records belong to (the plugin: the test's node id).
        self.session = session
        #: True when this test replays the cassette (from this process); False when it
        #: records, new_episodes included (its proxy replays what the cassette holds).
        self.lock_dir = lock_dir or default_lock_dir()
        # `once` replays a cassette that was there when the run began; one that this run
        # wrote (another test sharing it recorded first) is recorded into, as it was empty
        # at the start: the tests sharing it add up.
        fresh = mode is RecordMode.ONCE and self._written_this_run()
        self.replaying = mode.replays(tape_empty=fresh or not cassette.exists())
        self.replaying &= not mode.forwards_misses
        self._tmp: Path | None = None
        self._store: Store | None = None
        self._index: RequestIndex | None = None
        self._fronts: dict[str, tuple[DirectFront, int]] = {}  # origin -> (server, port)
        self._leaves: LeafCertificates | None = None  # the forward proxy's certificates
        self._recording: TapeRecording | None = None
        self._lines: dict[int, int] = {}
        self._incomplete: dict[int, str] = {}  # recordings replayed that miss something
        self._lock = threading.Lock()
        #: Recording over a cassette: how it changed beyond timing (None: it did not).
        self.changes: str | None = None

    # -- life cycle ------------------------------------------------------------

    @classmethod
    def _empty_store(cls) -> Path:
        """A migrated empty store, made once per process: copying it beats migrating."""
        with cls._template_lock:
            if cls._template is None:
                tmp = Path(tempfile.mkdtemp(prefix="ssetape-template-"))
                atexit.register(shutil.rmtree, tmp, True)
                Store.open(str(tmp / "empty.db")).close()
                cls._template = tmp / "empty.db"
            return cls._template

    def start(self) -> None:
        """Load the cassette (raises CassetteError if it is malformed)."""
        self._tmp = Path(tempfile.mkdtemp(prefix="ssetape-"))
        db = self._tmp / "tape.db"
        shutil.copyfile(self._empty_store(), db)
        os.chmod(db, 0o600)
        self._store = store = Store.open(str(db), create=False)
        fields = list(self.redact_fields)
        if (self.replaying or self.record_mode.forwards_misses) and self.cassette.exists():
            report = Cassette(self.cassette).import_into(store, profiles=self.profiles)
            self._lines = report.lines
            fields += report.redact_fields
            if report.ignored:
                keys = ", ".join(f"{k} (line {n})" for k, n in sorted(report.ignored.items()))
                warnings.warn(f"{self.cassette}: ignored unknown field(s) {keys}", stacklevel=1)
        if self.replaying:
            # Any key will do: masks compare key-free (redactor.unmask).
            redactor = Redactor(secrets.token_bytes(32), headers=self.redact_headers, fields=fields)
            self._index = _DriftIndex(
                store,
                redactor,
                ignore=self.ignore_fields,
                match_host=self.match_host,
                advice=pytest_advice(self.cassette),
                name=self.line_name,
                keep_misses=True,
            )
            self._index.refresh()
        else:
            if self.redaction_key:
                # Stable masks across re-recordings: an unchanged interaction gives no diff.
                store.set_setting("redaction_key", self.redaction_key)
            settings = RecordingSettings(
                command=self.command, record_mode=self.record_mode, confdir=self.confdir,
                speed=self.speed, ignore_fields=self.ignore_fields, match_host=self.match_host,
                allow_gaps=self.allow_gaps, redact_headers=self.redact_headers,
                redact_fields=self.redact_fields, profiles=self.profiles,
                redaction_key=self.redaction_key,
            )  # fmt: skip
            self._recording = TapeRecording(
                settings, store=store, tmp=self._tmp, template=self._empty_store(),
                session=self.session, ensure_ca=lambda: self.ca_file,
            )  # fmt: skip

    def close(self) -> None:
        """Stop every server and proxy; when recording, write the cassette."""
        loop = LoopThread.shared() if self._fronts else None
        for front, _ in self._fronts.values():
            assert loop is not None
            loop.run(front.http.stop())
        if self._leaves is not None:
            self._leaves.close()
        problems, rec = [], self._recording
        if rec is not None and self.replaying:  # it failed to start: nothing to write
            rec.stop()
        elif rec is not None:
            problems = rec.finish()
        try:
            if rec is not None and self._store is not None and not problems:
                rec.take_into(self._store)
                self._save(self._store)
        finally:
            if self._store is not None:
                self._store.close()
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
        if problems:
            raise ChildProxyError("; ".join(problems) + f" (cassette {self.cassette} not written)")

    def _written_this_run(self) -> bool:
        """Whether this run wrote the cassette: the lock holds the id of the run that last
        wrote it (a cassette this run did not write is no concern of the lock's)."""
        if not self.run_id or not self.cassette.exists():
            return False
        with cassette_lock(self.cassette, self.lock_dir) as lock:
            return lock.read().strip() == self.run_id

    def _save(self, store: Store) -> None:
        self.cassette.parent.mkdir(parents=True, exist_ok=True)
        with cassette_lock(self.cassette, self.lock_dir) as lock:
            written_this_run = bool(self.run_id) and lock.read().strip() == self.run_id
            # `all` starts the cassette afresh, except that tests of the same run sharing it
            # add up; the other modes keep what is there (union by exchange uid).
            if (self.record_mode != RecordMode.ALL or written_this_run) and self.cassette.exists():
                Cassette(self.cassette).import_into(store, profiles=self.profiles)
            before = recordings(read_lines(self.cassette)) if self.cassette.exists() else None
            Cassette(self.cassette).export(store)
            if before is not None:
                self.changes = content_changes(before, recordings(read_lines(self.cassette)))
            lock.seek(0)
            lock.truncate()
            lock.write(self.run_id)
            lock.flush()

    # -- what a test uses --------------------------------------------------------

    @property
    def ca_file(self) -> str:
        """mitmproxy's CA certificate: trust it for HTTPS through ``proxy_url``."""
        pem = self.confdir / "mitmproxy-ca-cert.pem"
        if not pem.exists():
            # Parallel workers creating one CA at once could pair a key with another's cert.
            with cassette_lock(self.confdir / "ca", self.lock_dir):
                if importlib.util.find_spec("mitmproxy") is not None:
                    from mitmproxy.certs import CertStore

                    CertStore.from_store(self.confdir, "mitmproxy", 2048)
                else:
                    # A test environment without mitmproxy (replay needs none): the ssetape
                    # that records makes it, as its proxies will use it.
                    subprocess.run(
                        [*self.command, "ca", "--confdir", str(self.confdir)],
                        check=True,
                        stdout=subprocess.DEVNULL,
                        timeout=60,
                    )
        return str(pem)

    @property
    def proxy_url(self) -> str:
        """A forward proxy (``httpx.Client(proxy=...)``, ``HTTPS_PROXY``) for this cassette."""
        with self._lock:
            if self.replaying:
                if importlib.util.find_spec("mitmproxy") is None:
                    # Tunnels end with leaves of mitmproxy's CA, made by its CA store.
                    raise RuntimeError(
                        "ssetape.proxy_url makes its HTTPS certificates with mitmproxy, which "
                        "this test environment does not have: pass ssetape.base_url(upstream) "
                        "to the client instead (replay then needs no certificate)"
                    )
                self.ca_file  # noqa: B018 - the CA exists before a leaf is signed with it
                return f"http://127.0.0.1:{self._front(FORWARD)}"
            assert self._recording is not None
            return self._recording.url(FORWARD, "regular")

    def fault(self, kind: str, **options: float | None) -> Fault:
        """Serve a real outage in this test's replay, e.g. ``fault("cut", after_event=5)``,
        ``fault("status", status=429, retry_after=1)`` (see :mod:`ssetape.replay.faults`);
        recording never fakes one."""
        return self.faults.add(Fault.make(kind, **options))

    def base_url(self, upstream: str) -> str:
        """A plain-HTTP base URL that stands for ``upstream`` (reverse mode): pass it as the
        SDK's ``base_url`` and the client needs no proxy settings at all."""
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"ssetape.base_url: {upstream!r} is not an http(s) URL")
        origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
        with self._lock:
            if self.replaying:
                base = f"http://127.0.0.1:{self._front(origin)}"
            else:
                assert self._recording is not None
                base = self._recording.url(origin, f"reverse:{origin}")
        return base + parts.path

    def _front(self, origin: str) -> int:
        known = self._fronts.get(origin)
        if known is not None:
            return known[1]
        assert self._store is not None and self._index is not None
        tls = None
        if origin == FORWARD:  # the forward proxy: it ends HTTPS tunnels itself
            from ssetape.replay.leaf_certificates import LeafCertificates

            self._leaves = LeafCertificates(self.confdir)
            tls = self._leaves
        front = DirectFront(
            self._store,
            self._index,
            origin,
            self.speed,
            allow_gaps=self.allow_gaps,
            on_incomplete=self._incomplete.__setitem__,
            faults=self.faults,
            tls=tls,
        )
        front.preload()
        port = LoopThread.shared().run(front.http.start("127.0.0.1", 0))
        self._fronts[origin] = (front, port)
        return port

    def exchanges(self) -> list[StreamRecord]:
        """The exchanges this test was served from the cassette, then those it recorded, with
        their stream knowledge (see :mod:`ssetape.testing.stream_record`). Read while the
        test runs; recording, it waits (5 s at most) for the proxy to store what it sent."""
        if self._store is None:
            return []
        queries = Queries(self._store)
        ids = list(self._index.served) if isinstance(self._index, _ServedIndex) else []
        if self._recording is not None:
            queries = Queries(self._recording.store)
            ids += recorded_ids(queries, self._recording.after)
        return read_records(queries, ids, self._lines)

    # -- what went wrong -----------------------------------------------------------

    def served_lines(self) -> list[int]:
        """The cassette lines of the recordings this test was served."""
        served = self._index.served if isinstance(self._index, _ServedIndex) else []
        return sorted({self._lines[x] for x in served if x in self._lines})

    def drift(self, test: str) -> list[RequestDrift]:
        """The requests that missed or matched only with fields ignored, field by field
        against the nearest recording (see :mod:`ssetape.testing.drift`)."""
        if not isinstance(self._index, _DriftIndex) or self._store is None:
            return []
        out, queries = [], Queries(self._store)
        for canon, found in list(self._index.drifted):
            nearest = found if isinstance(found, int) else None
            if isinstance(found, Miss) and found.nearest:
                nearest = found.nearest[0].id
            x = queries.exchange(nearest) if nearest is not None else None
            recorded = unmask(canonical_request(
                x.method, x.host, x.path, x.query or "", x.request_body,
                match_host=self.match_host,
            )) if x is not None else {}  # fmt: skip
            fields = field_drift(recorded, canon, self.ignore_fields) if x is not None else ()
            if not fields and not isinstance(found, Miss):
                continue  # the ignored fields were the same: no drift
            request = one_line(f"{canon['method']} {canon['host'] or ''}{canon['path']}")
            line = self._lines.get(nearest) if nearest is not None else None
            out.append(RequestDrift(test, str(self.cassette), request,
                                    isinstance(found, Miss), line, fields))  # fmt: skip
        return out

    @property
    def misses(self) -> list[str]:
        """One line per request the cassette had no recording for."""
        if self._index is None:
            return []
        return [miss.render(advice=False) for miss in list(self._index.misses)]

    def line_name(self, xid: int) -> str:
        """How a test's report names a recording: by its cassette line."""
        return f"cassette line {self._lines.get(xid, '?')}"

    def explain(self) -> str:
        """Why the test must fail, though it passed: requests the cassette did not have, or
        recordings replayed that miss events (unless the test allows gaps)."""
        parts = [self._explain_misses()]
        if self._incomplete and not self.allow_gaps:
            head = (
                f"ssetape: {len(self._incomplete)} recording(s) of cassette {self.cassette} "
                "replayed incomplete, so the test saw a stream that never existed whole:"
            )
            lines = [
                f"  - cassette line {self._lines.get(xid, '?')}: {why}"
                for xid, why in sorted(self._incomplete.items())
            ]
            tail = (
                "Re-record them (--ssetape-record-mode=all), or accept the gaps with "
                "@pytest.mark.ssetape(allow_gaps=True)."
            )
            parts.append("\n".join([head, *lines, tail]))
        return "\n".join(p for p in parts if p)

    def _explain_misses(self) -> str:
        misses = self.misses
        if not misses:
            return ""
        head = f"ssetape: {len(misses)} request(s) not in cassette {self.cassette}"
        if not self.cassette.exists():
            head += " (it does not exist: record it with --ssetape-record-mode=once)"
        lines = [head + ":", *(f"  - {m}" for m in dict.fromkeys(misses))]
        a = pytest_advice(self.cassette)
        lines.append(
            f"Record them with {a.record}, or leave volatile fields out of matching with "
            f"{a.ignore}."
        )
        return "\n".join(lines)
