"""The official SDKs (openai, anthropic, google-genai; sync and async) replayed through forward
HTTPS: HTTPS_PROXY-style, with the CA of `ssetape ca`, from ssetape's own replay server (no
mitmproxy in the data path), with the recorded timing, and at speed 0 at once."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anthropic
import openai
import pytest

from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.conftest import Proc, tls_simulator

PROMPT = [{"role": "user", "content": "forward me"}]
T = TypeVar("T")


class Sdks:
    """One client of each SDK through ``proxy``, trusting ``cafile``; each call returns what
    the SDK parsed from the stream (its own objects, dumped) in order."""

    def __init__(self, base: str, proxy: str, cafile: Path) -> None:
        self.base, self.proxy = base, proxy
        self.verify = ssl.create_default_context(cafile=cafile)

    def openai_sync(self) -> list[Any]:
        with openai.DefaultHttpxClient(proxy=self.proxy, verify=self.verify) as http:
            c = openai.OpenAI(base_url=self.base + "/v1", api_key="sk-x", max_retries=0,
                              http_client=http)  # fmt: skip
            return [x.model_dump() for x in c.chat.completions.create(
                model="sim-fwd", stream=True, messages=PROMPT)]  # fmt: skip

    async def openai_async(self) -> list[Any]:
        http = openai.DefaultAsyncHttpxClient(proxy=self.proxy, verify=self.verify)
        c = openai.AsyncOpenAI(base_url=self.base + "/v1", api_key="sk-x", max_retries=0,
                               http_client=http)  # fmt: skip
        s = await c.chat.completions.create(model="sim-fwd", stream=True, messages=PROMPT)
        out = [x.model_dump() async for x in s]
        await c.close()
        return out

    def anthropic_sync(self) -> list[Any]:
        with anthropic.DefaultHttpxClient(proxy=self.proxy, verify=self.verify) as http:
            c = anthropic.Anthropic(base_url=self.base, api_key="sk-ant-x", max_retries=0,
                                    http_client=http)  # fmt: skip
            return [x.model_dump() for x in c.messages.create(
                model="sim-fwd", max_tokens=20, stream=True, messages=PROMPT)]  # fmt: skip

    async def anthropic_async(self) -> list[Any]:
        http = anthropic.DefaultAsyncHttpxClient(proxy=self.proxy, verify=self.verify)
        c = anthropic.AsyncAnthropic(base_url=self.base, api_key="sk-ant-x", max_retries=0,
                                     http_client=http)  # fmt: skip
        s = await c.messages.create(model="sim-fwd", max_tokens=20, stream=True, messages=PROMPT)
        out = [x.model_dump() async for x in s]
        await c.close()
        return out

    def _genai(self) -> Any:
        from google import genai
        from google.genai import types

        args = {"proxy": self.proxy, "verify": self.verify}
        opts = types.HttpOptions(base_url=self.base, client_args=args, async_client_args=args)
        return genai.Client(api_key="AIza-test", http_options=opts)

    def genai_sync(self) -> list[Any]:
        client = self._genai()
        stream = client.models.generate_content_stream(model="gemini-2.5-flash", contents="fw")
        return [c.model_dump(exclude={"sdk_http_response"}) for c in stream]

    async def genai_async(self) -> list[Any]:
        client = self._genai()
        stream = await client.aio.models.generate_content_stream(
            model="gemini-2.5-flash", contents="fw"
        )
        return [c.model_dump(exclude={"sdk_http_response"}) async for c in stream]

    def each(self) -> dict[str, Callable[[], list[Any]]]:
        return {
            "openai": self.openai_sync,
            "openai async": lambda: asyncio.run(self.openai_async()),
            "anthropic": self.anthropic_sync,
            "anthropic async": lambda: asyncio.run(self.anthropic_async()),
            "google-genai": self.genai_sync,
            "google-genai async": lambda: asyncio.run(self.genai_async()),
        }


def record_sdks(
    ssetape_proc: Callable[..., Proc], tmp_path: Path, confdir: Path, calls: Callable[[Sdks], T]
) -> tuple[str, T]:
    """``calls`` made through a recording proxy (to tmp_path/tape.db) from a TLS simulator
    that is gone afterwards: (the base URL they used, what they returned)."""
    with tls_simulator(tmp_path) as (sim, upstream_cert):
        base = sim.url.replace("127.0.0.1", "localhost")
        rec = ssetape_proc("record", "--set", f"ssl_verify_upstream_trusted_ca={upstream_cert}",
                           db=str(tmp_path / "tape.db"))  # fmt: skip
        got = calls(Sdks(base, rec.url, confdir / "mitmproxy-ca-cert.pem"))
        assert rec.stop() == 0, rec.log.decode()
    return base, got


def test_every_sdk_replays_through_forward_https_with_its_timing(
    ssetape_proc: Callable[..., Proc], tmp_path: Path, confdir: Path
) -> None:
    ca = confdir / "mitmproxy-ca-cert.pem"
    db = str(tmp_path / "tape.db")
    base, recorded = record_sdks(
        ssetape_proc, tmp_path, confdir, lambda sdks: {n: call() for n, call in sdks.each().items()}
    )
    # The simulator is gone: every answer below comes from the tape.
    with Store.open(db, create=False) as store:
        xs = Queries(store).exchanges(newest_first=False)
        assert {x.api for x in xs} == {"chat_completions", "messages", "gemini"}
        took_then = {x.api: (x.duration_us or 0) / 1e6 for x in xs}
    assert all(len(r) > 3 for r in recorded.values()), recorded
    proc = ssetape_proc("replay", "--speed", "1", db=db)
    assert b"HTTPS_PROXY" in proc.log  # forward mode, answered by ssetape's own server
    api = {"openai": "chat_completions", "anthropic": "messages", "google-genai": "gemini"}
    for name, call in Sdks(base, proc.url, ca).each().items():
        t0 = time.perf_counter()
        got = call()
        took = time.perf_counter() - t0
        assert got == recorded[name], name
        # Played with the recorded pace: not at once (a wide margin for a busy machine).
        assert took >= 0.8 * took_then[api[name.split()[0]]], (name, took)
    assert proc.stop() == 0
    assert b"replayed 6, missed 0" in proc.log, proc.log.decode()


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "http2"])
def test_speed_zero_through_forward_https_is_at_once(
    ssetape_proc: Callable[..., Proc], tmp_path: Path, confdir: Path, http2: bool
) -> None:
    """A recording of seconds comes whole, at once, through a tunnel the replay server ends
    itself (HTTP/1.1 or HTTP/2, as the client chooses)."""
    import httpx

    ca = ssl.create_default_context(cafile=confdir / "mitmproxy-ca-cert.pem")
    db = str(tmp_path / "tape.db")
    body = {"model": "sim-pause", "stream": True, "max_tokens": 40, "messages": PROMPT}
    with tls_simulator(tmp_path) as (sim, upstream_cert):
        base = sim.url.replace("127.0.0.1", "localhost")
        rec = ssetape_proc(
            "record", "--set", f"ssl_verify_upstream_trusted_ca={upstream_cert}", db=db
        )
        with httpx.Client(proxy=rec.url, verify=ca, timeout=60) as c:
            recorded = c.post(base + "/v1/chat/completions", json=body).content
        assert rec.stop() == 0
    with Store.open(db, create=False) as store:
        (x,) = Queries(store).exchanges()
        recorded_s = (x.duration_us or 0) / 1e6
    proc = ssetape_proc("replay", "--speed", "0", db=db)
    with httpx.Client(proxy=proc.url, verify=ca, http2=http2, timeout=60) as c:
        c.post(base + "/v1/models/warm", json={})  # the tunnel and its handshake, once
        t0 = time.perf_counter()
        r = c.post(base + "/v1/chat/completions", json=body)
        took = time.perf_counter() - t0
    assert r.content == recorded and r.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
    assert recorded_s > 0.5 and took < recorded_s / 2, (took, recorded_s)


def test_a_burst_of_sdk_clients_replays_through_mitmproxy_when_misses_may_be_recorded(
    ssetape_proc: Callable[..., Proc], tmp_path: Path, confdir: Path
) -> None:
    """Record mode new_episodes (the replay server in front, a miss relayed to the recording
    proxy): 24 clients that tunnel at once each take a handshake slot in turn, and each gets
    the recorded stream."""
    ca = confdir / "mitmproxy-ca-cert.pem"
    db = str(tmp_path / "tape.db")
    base, recorded = record_sdks(ssetape_proc, tmp_path, confdir, Sdks.openai_sync)
    proc = ssetape_proc("replay", "--speed", "0", "--record-mode", "new_episodes", db=db)
    assert b"HTTPS_PROXY" in proc.log

    async def burst() -> list[list[Any]]:
        sdks = Sdks(base, proc.url, ca)  # each call its own client: its own tunnel
        return list(await asyncio.gather(*(sdks.openai_async() for _ in range(24))))

    assert asyncio.run(burst()) == [recorded] * 24
    assert proc.stop() == 0
    assert b"replayed 24, missed 0" in proc.log, proc.log.decode()
