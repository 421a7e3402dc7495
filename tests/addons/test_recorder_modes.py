"""Recording HTTPS through the forward proxy with mitmproxy's CA, and inside plain mitmdump."""

from __future__ import annotations

import asyncio
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.conftest import LISTEN, Proc

ROOT = Path(__file__).resolve().parents[2]


def test_https_forward_proxy_with_the_ca(
    tls_sim: tuple[Simulator, Path], ssetape_proc: Callable[..., Proc], confdir: Path
) -> None:
    sim, upstream_cert = tls_sim
    proc = ssetape_proc("record", "--set", f"ssl_verify_upstream_trusted_ca={upstream_cert}")
    ca = confdir / "mitmproxy-ca-cert.pem"
    base = sim.url.replace("127.0.0.1", "localhost") + "/v1"
    verify = ssl.create_default_context(cafile=ca)
    with openai.DefaultHttpxClient(proxy=proc.url, verify=verify) as http:
        client = openai.OpenAI(base_url=base, api_key="sk-x", max_retries=0, http_client=http)
        chunks = list(
            client.chat.completions.create(
                model="sim-chat",
                stream=True,
                messages=[{"role": "user", "content": "tls"}],
            )
        )
    assert chunks[-1].usage is not None
    assert proc.stop() == 0
    store = Store.open(proc.db, create=False)
    (x,) = Queries(store).exchanges()
    assert (x.scheme, x.host) == ("https", "localhost")
    assert [e.data for e in Queries(store).events(x.id)][-1] == "[DONE]"
    # The SDK closes the connection once it has read [DONE]; when that beats the end of the
    # chunked body to the proxy, the transport state is "aborted" (which is true), while
    # the stream itself ended properly: the outcome says so either way.
    assert x.state in ("completed", "aborted")
    assert (x.outcome, x.outcome_reason) == ("completed", "stop")
    store.close()


def test_addon_loads_into_plain_mitmdump(sim: Simulator, tmp_path: Path, confdir: Path) -> None:
    db = tmp_path / "tape.db"
    mitmdump = str(Path(sys.executable).parent / "mitmdump")
    p = subprocess.Popen(
        [
            mitmdump,
            "-s",
            str(ROOT / "addons" / "recorder.py"),
            "--set",
            f"ssetape_db={db}",
            "--mode",
            f"reverse:{sim.url}",
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            "0",
            "--set",
            f"confdir={confdir}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert p.stdout is not None
    port = None
    for line in p.stdout:
        if b"listening at" in line:
            port = int(line.rsplit(b":", 1)[1].strip().rstrip(b"."))
            break
    assert port, "mitmdump did not start"
    r = httpx.post(
        f"http://127.0.0.1:{port}/v1/messages",
        json={
            "model": "sim-m",
            "stream": True,
            "max_tokens": 20,
            "messages": [{"role": "user", "content": "hi"}],
        },
        timeout=30,
    )
    assert r.status_code == 200 and b"message_stop" in r.content
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0
    store = Store.open(str(db), create=False)
    (x,) = Queries(store).exchanges()
    assert x.state == "completed" and x.event_count > 5
    store.close()


def test_record_prints_its_address_and_exits_zero_on_sigint(tmp_path: Path) -> None:
    from tests.conftest import start_ssetape

    db = str(tmp_path / "t.db")
    p = start_ssetape(["record", "--db", db, "--port", "0", "--confdir", str(tmp_path)], db=db)
    assert LISTEN.search(p.log)
    p.proc.send_signal(signal.SIGINT)
    assert p.proc.wait(20) == 0


def test_streams_flow_at_once_even_when_not_recording(
    sim: Simulator, ssetape_proc: Callable[..., Proc]
) -> None:
    proc = ssetape_proc("record", "--mode", f"reverse:{sim.url}", "--set", "ssetape_record=false")
    body = {"model": "sim-pause", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    with httpx.Client(timeout=30) as c:
        t0 = time.perf_counter()
        with c.stream("POST", proc.url + "/v1/chat/completions", json=body) as r:
            first = None
            for _ in r.iter_raw():
                first = first or time.perf_counter() - t0
            total = time.perf_counter() - t0
    assert first is not None and total - first > 0.5  # the 0.75 s pause came after it
    assert proc.stop() == 0
    assert not Path(proc.db).exists()  # nothing recorded, nothing created


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd"])
def test_both_sdks_async_through_the_https_forward_proxy_in_each_encoding(
    tls_sim: tuple[Simulator, Path],
    ssetape_proc: Callable[..., Proc],
    confdir: Path,
    encoding: str,
) -> None:
    """The newest SDKs' async clients (httpx2 on Python 3.12+) through `ssetape record` in
    forward mode, the answer compressed as they ask for it: they get what they get without
    the proxy, and every event is stored."""
    sim, upstream_cert = tls_sim
    proc = ssetape_proc("record", "--set", f"ssl_verify_upstream_trusted_ca={upstream_cert}")
    base = sim.url.replace("127.0.0.1", "localhost")
    asked = {"accept-encoding": encoding}

    async def session(proxy: str | None) -> tuple[list[Any], list[Any]]:
        cafile = confdir / "mitmproxy-ca-cert.pem" if proxy else upstream_cert
        verify = ssl.create_default_context(cafile=cafile)
        oai = openai.AsyncOpenAI(
            base_url=base + "/v1", api_key="sk-x", max_retries=0, default_headers=asked,
            http_client=openai.DefaultAsyncHttpxClient(proxy=proxy, verify=verify),
        )  # fmt: skip
        ant = anthropic.AsyncAnthropic(
            base_url=base, api_key="sk-ant-x", max_retries=0, default_headers=asked,
            http_client=anthropic.DefaultAsyncHttpxClient(proxy=proxy, verify=verify),
        )  # fmt: skip
        model = f"sim-{encoding}"
        chat = await oai.chat.completions.create(
            model=model, stream=True, messages=[{"role": "user", "content": "zip it"}]
        )
        chunks = [c.model_dump() async for c in chat]
        msgs = await ant.messages.create(
            model=model, max_tokens=30, stream=True, messages=[{"role": "user", "content": "zip"}]
        )
        events = [e.model_dump() async for e in msgs]
        await oai.close()
        await ant.close()
        return chunks, events

    try:
        direct = asyncio.run(session(None))
    except (openai.APIError, anthropic.APIError, httpx.DecodingError) as e:
        pytest.skip(f"this SDK's HTTP client cannot decode {encoding}: {e}")
    assert asyncio.run(session(proc.url)) == direct
    assert any(c["choices"] and c["choices"][0]["finish_reason"] for c in direct[0])
    assert proc.stop() == 0, proc.log.decode()
    with Store.open(proc.db, create=False) as store:
        xs = Queries(store).exchanges(newest_first=False)
        assert [x.path for x in xs] == ["/v1/chat/completions", "/v1/messages"]
        for x in xs:
            headers = {k.lower(): v for k, v in x.response_headers or []}
            assert headers["content-encoding"] == encoding
            # An SDK may hang up right after the last event, before the body's final bytes:
            # then the exchange says it was aborted, and the stream still completed.
            assert x.state in ("completed", "aborted") and x.gap_seq is None
            assert x.event_count > 3 and x.outcome == "completed"
