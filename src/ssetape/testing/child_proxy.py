"""A proxy process the pytest plugin starts to record: `ssetape record` or `ssetape replay`.

It is ready once it prints ``listening on http://HOST:PORT``; its output is kept so that a
failure can say what the proxy said.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

LISTEN = re.compile(rb"listening on (http://[\d.]+:\d+)")
SSETAPE = [sys.executable, "-c", "from ssetape.cli.main import main; main(prog_name='ssetape')"]


class ChildProxyError(RuntimeError):
    pass


class ChildProxy:
    def __init__(
        self,
        args: list[str],
        *,
        what: str,
        cwd: Path | None = None,
        timeout: float = 60,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.what = what
        self.output: list[bytes] = []
        self.url = ""
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=preexec_fn,  # only a prctl call, before exec
        )
        ready = threading.Event()
        threading.Thread(target=self._pump, args=(ready,), daemon=True).start()
        if not ready.wait(timeout) or not self.url:
            self.proc.kill()
            self.proc.wait()
            raise ChildProxyError(f"{what} did not start: {self.tail() or 'no output'}")

    def _pump(self, ready: threading.Event) -> None:
        # Always drained, or a chatty proxy would block on a full pipe.
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            m = LISTEN.search(line)
            if m and not self.url:
                self.url = m.group(1).decode()
                ready.set()
        ready.set()

    def tail(self, lines: int = 5) -> str:
        text = b"".join(self.output[-lines:]).decode("utf-8", "replace").strip()
        return " | ".join(text.splitlines())

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (the recorder then stores what is in flight), wait, and return the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        return rc
