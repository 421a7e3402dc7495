"""Peak memory of one large response that is not a stream (a JSON answer with a length),
through `ssetape record` and through mitmdump alone, in one run.

    python -m bench.bench_big_body [--mib 300] [--chunked]

A local upstream (a child process of this script) answers ``POST /big`` with ``--mib`` MiB
of JSON, ``content-type: application/json`` and a ``content-length`` (``--chunked``: chunked,
no length), written 1 MiB at a time and never held whole. Each proxy is a reverse proxy in
front of it, started afresh: `mitmdump` as it comes (it buffers a body whole), `mitmdump
--set stream_large_bodies=1m` (the floor: it only relays) and `ssetape record` (SQLite in a
temporary folder; ``ssetape_max_response_body`` at its default, 16 MiB, then past the body:
stored whole, as every body was before the bound). The client reads
the body and checks its SHA-256. Peak resident memory (VmHWM, /proc/<pid>/status) of the
proxy and, for ssetape, of its recording process, is read every 0.1 s until each exits (it
only grows, so the last reading is the peak); then the store's size and what it holds.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.bench_memory import proxy, ssetape_cmd
from bench.bench_record import free_port, wait_port
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store

BIN = Path(sys.executable).parent
BLOCK = 1 << 20


def block(i: int) -> bytes:
    """1 MiB of the body's filler, different for each ``i``."""
    return (b"%08d" % i) * (BLOCK // 8)


def body_sha(mib: int) -> str:
    digest = hashlib.sha256(b'{"data":"')
    for i in range(mib):
        digest.update(_piece(i, mib))
    return digest.hexdigest()


def _piece(i: int, mib: int) -> bytes:
    """Block ``i`` of the filler; the last one ends the JSON (so the body is ``mib`` MiB)."""
    data = block(i)
    return data[: -9 - 2] + b'"}' if i == mib - 1 else data


def serve(port: int, mib: int, chunked: bool) -> None:
    server = socket.create_server(("127.0.0.1", port), backlog=64)

    def one(conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as f:
            while line := f.readline():
                length = 0
                while (line := f.readline()).strip():
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                f.read(length)
                head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                if chunked:
                    conn.sendall(head + b'transfer-encoding: chunked\r\n\r\n9\r\n{"data":"\r\n')
                else:
                    conn.sendall(head + b'content-length: %d\r\n\r\n{"data":"' % (mib << 20))
                for i in range(mib):
                    data = _piece(i, mib)
                    conn.sendall(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                if chunked:
                    conn.sendall(b"0\r\n\r\n")

    while True:
        conn, _ = server.accept()
        threading.Thread(target=one, args=(conn,), daemon=True).start()


def vm_hwm_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(p) for p in (task / "children").read_text().split()]
    return out


class Peaks:
    """The last VmHWM read of a process and of its children, until they exit (a zombie's
    status has none: the reading before stands)."""

    def __init__(self, pid: int) -> None:
        self.proxy = 0.0
        self.children: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(pid,), daemon=True)
        self._thread.start()

    def _run(self, pid: int) -> None:
        while not self._stop.is_set():
            try:
                for child in children(pid):
                    self.children[child] = max(vm_hwm_mib(child), self.children.get(child, 0))
                self.proxy = max(vm_hwm_mib(pid), self.proxy)
            except OSError:  # a process just exited: its last reading stands
                pass
            self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Result:
    proxy: str
    proxy_peak: float
    recording_peak: float | None
    seconds: float
    intact: bool
    store: str = "-"


def fetch(url: str, mib: int, sha: str) -> tuple[float, bool]:
    digest, size, t = hashlib.sha256(), 0, time.monotonic()
    with httpx.stream("POST", url + "/big", json={"q": 1}, timeout=600) as r:
        for data in r.iter_raw(BLOCK):
            digest.update(data)
            size += len(data)
    return time.monotonic() - t, size == mib << 20 and digest.hexdigest() == sha


def run(name: str, cmd: list[str], port: int, tmp: str, mib: int, sha: str) -> Result:
    with proxy(cmd, port, f"{tmp}/proxy.log") as p:
        peaks = Peaks(p.pid)
        seconds, intact = fetch(f"http://127.0.0.1:{port}", mib, sha)
        time.sleep(1.0)  # the recording process stores what it was handed
    p.wait()
    time.sleep(0.2)
    peaks.stop()
    recording = max(peaks.children.values()) if peaks.children else None
    return Result(name, peaks.proxy, recording, seconds, intact)


def stored(db: str) -> str:
    with Store.open(db, create=False) as store:
        [x] = Queries(store).exchanges()
        kept = len(x.response_body or b"")
        whole = "whole" if x.response_body_bytes is None else f"{x.response_body_bytes} B hashed"
    return f"{Path(db).stat().st_size / 2**20:.1f} MiB file; {kept} B kept, {whole}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=300)
    ap.add_argument("--chunked", action="store_true", help="no content-length")
    args = ap.parse_args()
    up_port = free_port()
    upstream = multiprocessing.Process(
        target=serve, args=(up_port, args.mib, args.chunked), daemon=True
    )
    upstream.start()
    wait_port(up_port)
    up = f"http://127.0.0.1:{up_port}"
    sha = body_sha(args.mib)
    results: list[Result] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            conf = f"{tmp}/conf"
            port = free_port()
            plain = [str(BIN / "mitmdump"), "-q", "--mode", f"reverse:{up}", "--set",
                     f"confdir={conf}", "--listen-host", "127.0.0.1",
                     "--listen-port", str(port)]  # fmt: skip
            results.append(run("mitmdump", plain, port, tmp, args.mib, sha))
            streaming = [*plain, "--set", "stream_large_bodies=1m"]
            results.append(run("mitmdump stream_large_bodies=1m", streaming, port, tmp,
                               args.mib, sha))  # fmt: skip
            db = f"{tmp}/tape.db"
            results.append(run("ssetape record", ssetape_cmd(up, port, db, conf), port, tmp,
                               args.mib, sha))  # fmt: skip
            results[-1].store = stored(db)
            # The bound past the body: buffered, handed on and stored whole, as before it.
            db, whole = f"{tmp}/whole.db", ["--set", f"ssetape_max_response_body={1 << 40}"]
            results.append(run("ssetape record, bound past the body (as before)",
                               [*ssetape_cmd(up, port, db, conf), *whole], port, tmp,
                               args.mib, sha))  # fmt: skip
            results[-1].store = stored(db)
    finally:
        upstream.terminate()
    framing = "chunked" if args.chunked else "content-length"
    print(f"\n{args.mib} MiB application/json body ({framing}), one request per proxy\n")
    print("| proxy | proxy peak RSS | recording process peak RSS | client got it intact | "
          "transfer | store |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for r in results:
        rec = f"{r.recording_peak:.0f} MiB" if r.recording_peak is not None else "-"
        print(f"| {r.proxy} | {r.proxy_peak:.0f} MiB | {rec} | {'yes' if r.intact else 'NO'} | "
              f"{r.seconds:.1f} s | {r.store} |")  # fmt: skip


if __name__ == "__main__":
    main()
