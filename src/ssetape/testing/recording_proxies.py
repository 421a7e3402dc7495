"""The recording proxies a test process shares between its tests, and the store they fill.

Starting a recording proxy (mitmproxy and its recording process) takes 3-4 s; a suite that
records twenty tests paid that twenty times. Here each kind of proxy (its mode, upstream and
settings) starts once per test process (so once per pytest-xdist worker) and serves every
test that records with those settings, all of them writing into one SQLite file of the
process. Tests run one after another in a process, so a test's exchanges are those stored
after the last one before it began; before writing its cassette the test asks each proxy it
used to *settle* (``recording.control``): everything it sent is then stored, or the test is
told what was lost.

The proxies stop when the pytest session ends (``pytest_unconfigure``), else when the process
exits. On Linux they also get SIGTERM if the test process dies without a word
(``PR_SET_PDEATHSIG``), so none outlives a killed run.

Control requests go out with the standard library's ``http.client``, not httpx: httpx imports
httpcore on first use, and a first use inside a pytester run would leave later tests a second
copy of httpcore whose exceptions httpx no longer recognises.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import http.client
import secrets
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

from ssetape.recording.control import (
    Command,
    ControlAnswer,
    ControlError,
    ControlRequest,
)
from ssetape.storage.store import Store
from ssetape.testing.child_proxy import ChildProxy, ChildProxyError
from ssetape.vocabulary import Header

__all__ = ["RecordingProxies", "SharedRecorder"]

# A forward proxy answers control requests sent through it to this name (.invalid is
# reserved: nothing there could be reached by mistake).
_CONTROL_HOST = "http://ssetape-control.invalid/"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """The child gets SIGTERM when the process that started it dies (Linux only)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class SharedRecorder:
    """One recording proxy that several tests use in turn."""

    def __init__(self, args: list[str], *, what: str, cwd: Path, forward: bool) -> None:
        self._secret = secrets.token_urlsafe(24)
        self.what = what
        self.forward = forward
        preexec = _die_with_parent if sys.platform.startswith("linux") else None
        # Stopped at the session's end, everything settled: a stream a test left open is
        # not waited for (`ssetape record` drains 30 s by default).
        self.child = ChildProxy(
            [*args, "--set", f"ssetape_control={self._secret}", "--set", "ssetape_drain_timeout=0"],
            what=what,
            cwd=cwd,
            preexec_fn=preexec,
        )
        self.url = self.child.url
        #: Its answer to the last settle: a test's losses are what the next one adds.
        self.last = ControlAnswer()

    def alive(self) -> bool:
        return self.child.proc.poll() is None

    def ask(self, asked: ControlRequest) -> ControlAnswer:
        """Send one control request; ChildProxyError if the proxy cannot answer it."""
        where = urlsplit(self.url)
        # Straight to the proxy (never the test's own HTTP(S)_PROXY); a forward proxy gets
        # the absolute form, as from any client it forwards for.
        conn = http.client.HTTPConnection(
            where.hostname or "127.0.0.1", where.port, timeout=asked.timeout + 10
        )
        body = asked.to_json()
        headers = {Header.CONTROL.value: self._secret, "content-type": "application/json"}
        try:
            conn.request("POST", _CONTROL_HOST if self.forward else "/", body, headers)
            answer = ControlAnswer.from_json(conn.getresponse().read())
        except (OSError, http.client.HTTPException, ControlError) as e:
            tail = self.child.tail() if not self.alive() else ""
            raise ChildProxyError(
                f"{self.what} did not answer {asked.command}: {e}" + (f" ({tail})" if tail else "")
            ) from None
        finally:
            conn.close()
        if answer.error:
            raise ChildProxyError(f"{self.what} refused {asked.command}: {answer.error}")
        return answer

    def begin(self, session: str) -> None:
        """The exchanges from now on belong to ``session``."""
        self.ask(ControlRequest(Command.SESSION, session=session))

    def settle(self, timeout: float) -> tuple[ControlAnswer, str]:
        """Wait (``timeout`` at most) until all that was sent through it is stored; the
        answer, and what was lost since the last settle ("" if nothing)."""
        answer = self.ask(ControlRequest(Command.SETTLE, timeout=timeout))
        lost, self.last = answer.lost_since(self.last), answer
        return answer, lost

    def stop(self) -> int:
        return self.child.stop()


class RecordingProxies:
    """This process's shared recording proxies, by their command line."""

    _shared: ClassVar[RecordingProxies | None] = None
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="ssetape-recording-"))
        self._stores: dict[str, tuple[Path, Store]] = {}
        self._proxies: dict[tuple[str, ...], SharedRecorder] = {}
        self._lock = threading.Lock()

    @classmethod
    def shared(cls) -> RecordingProxies:
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
                atexit.register(cls._shared.close)
            return cls._shared

    @classmethod
    def close_shared(cls) -> None:
        """Stop this process's proxies (the pytest session ended)."""
        with cls._shared_lock:
            shared, cls._shared = cls._shared, None
        if shared is not None:
            shared.close()

    def store(self, template: Path, redaction_key: str | None) -> tuple[Path, Store]:
        """The store the proxies with this redaction key record into (made from
        ``template``, an empty migrated store), and its path."""
        key = redaction_key or ""
        with self._lock:
            known = self._stores.get(key)
            if known is None:
                path = self._dir / f"shared-{len(self._stores)}.db"
                shutil.copyfile(template, path)
                path.chmod(0o600)
                store = Store.open(str(path), create=False)
                if redaction_key:
                    # Stable masks across re-recordings: an unchanged interaction, no diff.
                    store.set_setting("redaction_key", redaction_key)
                known = self._stores[key] = (path, store)
            return known

    def recorder(self, args: list[str], *, what: str, forward: bool) -> SharedRecorder:
        """The proxy started with ``args`` (started now if none is running)."""
        key = tuple(args)
        with self._lock:
            proxy = self._proxies.get(key)
            if proxy is not None and not proxy.alive():
                proxy.stop()
                proxy = None
            if proxy is None:
                proxy = SharedRecorder(args, what=what, cwd=self._dir, forward=forward)
                self._proxies[key] = proxy
            return proxy

    def close(self) -> None:
        with self._lock:
            for proxy in self._proxies.values():
                proxy.stop()
            self._proxies.clear()
            for _, store in self._stores.values():
                store.close()
            self._stores.clear()
        shutil.rmtree(self._dir, ignore_errors=True)
