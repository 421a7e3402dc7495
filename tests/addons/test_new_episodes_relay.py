"""The relay of new_episodes when the recording proxy is not there to take a miss: a kept
connection it closed meanwhile is replaced, and a proxy that is down costs the misses one
quick 502 each, not a wait for a recording that never comes."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import h11
import httpx
import orjson

from ssetape.replay.episodes import JOIN_TIMEOUT
from ssetape.replay.relay import Relay, Relayed
from ssetape.replay.response_parts import END, Body, Head, Part
from ssetape.simulator.simulator import Simulator
from tests.addons.test_replay_new_episodes import PATH, exchanges, recording_proxy
from tests.addons.test_replayer import CHAT
from tests.conftest import SIM_SPEED, Proc


class Collected:
    """A response's way out that keeps what it was sent (the client's side of the relay)."""

    def __init__(self) -> None:
        self.parts: list[Part] = []
        self.aborted = False

    def frame(self, parts: Any) -> Any:
        return parts

    def write(self, framed: Any) -> None:
        self.parts.extend(framed)

    def send(self, parts: Any) -> None:
        self.parts.extend(parts)

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True

    async def drain(self) -> None:
        return None

    def body(self) -> bytes:
        return b"".join(p.data for p in self.parts if isinstance(p, Body))


async def _proxy_that_drops_its_first_connection(seen: list[int]) -> asyncio.Server:
    """Answers on every connection, but its first one it closes, unanswered, at its second
    request: as mitmproxy closes a connection that sat idle, just as a request is sent."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = len(seen) + 1
        seen.append(0)
        conn = h11.Connection(h11.SERVER)
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(1 << 16)
                if not data:
                    break
                conn.receive_data(data)
                continue
            if isinstance(event, h11.EndOfMessage):
                seen[number - 1] += 1
                if number == 1 and seen[0] == 2:
                    break  # dropped, unanswered
                body = b"answer %d.%d" % (number, seen[number - 1])
                writer.write(conn.send(h11.Response(status_code=200, headers=[
                    (b"content-length", b"%d" % len(body))])) or b"")  # fmt: skip
                writer.write(conn.send(h11.Data(data=body)) or b"")
                writer.write(conn.send(h11.EndOfMessage()) or b"")
                conn.start_next_cycle()
        writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


def test_a_kept_connection_the_proxy_closed_is_replaced_and_the_miss_sent_anew() -> None:
    async def main() -> tuple[list[Relayed], list[bytes], list[int]]:
        seen: list[int] = []
        server = await _proxy_that_drops_its_first_connection(seen)
        relay = Relay(server.sockets[0].getsockname()[1])
        results, bodies = [], []
        try:
            for _ in range(3):
                out = Collected()
                line = [b"POST", b"http://api.example/v1/chat/completions", b"HTTP/1.1"]
                results.append(await relay.send(out, line, {b"host": b"api.example"}, b"{}"))
                assert isinstance(out.parts[0], Head) and out.parts[-1] is END
                bodies.append(out.body())
        finally:
            relay.close()
            server.close()
        return results, bodies, seen

    results, bodies, seen = asyncio.run(main())
    # The second miss went out on the kept connection, which the proxy dropped: it was sent
    # again on a new one and answered there; the third went on that one, kept.
    assert bodies == [b"answer 1.1", b"answer 2.1", b"answer 2.2"]
    assert seen == [2, 2]
    assert results == [Relayed(going_on=True, reached=True)] * 3


def test_misses_while_the_recording_proxy_is_down_get_a_502_at_once(
    ssetape_proc: Callable[..., Proc], tmp_path: Path
) -> None:
    db = str(tmp_path / "tape.db")
    with Simulator(speed=SIM_SPEED).serve_in_thread() as sim:
        proc = ssetape_proc("replay", "--record-mode", "new_episodes", "--mode",
                            f"reverse:{sim.url}", db=db)  # fmt: skip
        child = recording_proxy(proc.proc.pid)
        os.kill(child, signal.SIGKILL)
        go = threading.Barrier(5)

        def post(_: int) -> tuple[int, str, float]:
            with httpx.Client(timeout=60) as c:
                go.wait()  # five identical misses at once
                t0 = time.monotonic()
                r = c.post(proc.url + PATH, content=orjson.dumps(CHAT))
                return r.status_code, r.text, time.monotonic() - t0

        with ThreadPoolExecutor(5) as pool:
            answers = list(pool.map(post, range(5)))
        # Each was relayed in turn and told the proxy is not there. None waited for a
        # recording: the four identical ones used to wait JOIN_TIMEOUT each, one after another.
        assert {status for status, _, _ in answers} == {502}
        assert all("the recording proxy cannot be reached" in text for _, text, _ in answers)
        assert max(took for _, _, took in answers) < JOIN_TIMEOUT / 2
        assert proc.stop() == 0
    assert exchanges(db) == []
    log = proc.log.decode()
    assert "ssetape: replayed 0, missed 5, recorded 0" in log, log
    assert log.count("a miss was not recorded: the recording proxy did not take it") == 5, log
