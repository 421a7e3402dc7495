"""The handshake slots of replay through mitmproxy (record modes that forward): a CONNECT
from this machine is answered when a slot is free, the slot comes back when the client's
handshake ends, fails or its connection closes, and a client elsewhere never waits. Driven
through mitmproxy's own hook objects, as the proxy calls them."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from mitmproxy import http, tls
from mitmproxy.proxy.context import Context
from mitmproxy.test import taddons, tflow

from ssetape.addons.handshakes import HandshakeSlots
from ssetape.replay.admission import Admission


def connect_from(peer: str) -> http.HTTPFlow:
    flow = tflow.tflow()
    flow.client_conn = tflow.tclient_conn()
    flow.client_conn.peername = (peer, 40000)
    flow.client_conn.timestamp_end = None  # still connected
    flow.request.method = "CONNECT"
    return flow


def tls_of(flow: http.HTTPFlow, opts: Any) -> tls.TlsData:
    return tls.TlsData(flow.client_conn, Context(flow.client_conn, opts))


async def answered(call: Coroutine[Any, Any, None], within: float = 0.2) -> bool:
    """Whether a CONNECT hook returns (the proxy would answer it) within ``within`` seconds;
    one that does not stays pending."""
    task = asyncio.ensure_future(call)
    done, _ = await asyncio.wait({task}, timeout=within)
    return bool(done)


def run(body: Any) -> Any:
    with taddons.context() as tctx:
        return asyncio.run(body(tctx.options))


def test_a_local_connect_waits_for_a_slot_that_the_end_of_a_handshake_gives_back() -> None:
    async def body(opts: Any) -> list[bool]:
        slots = HandshakeSlots(Admission(slots=2, hold=30))
        a, b, c, d = (connect_from("127.0.0.1") for _ in range(4))
        seen = [await answered(slots.http_connect(a)), await answered(slots.http_connect(b))]
        third = asyncio.ensure_future(slots.http_connect(c))
        seen.append(await answered(asyncio.shield(third)))  # both slots taken: it waits
        slots.tls_established_client(tls_of(a, opts))  # a's handshake ended
        seen.append(await answered(third, within=5))
        fourth = asyncio.ensure_future(slots.http_connect(d))
        seen.append(await answered(asyncio.shield(fourth)))
        slots.tls_failed_client(tls_of(b, opts))  # a client that refused the certificate
        seen.append(await answered(fourth, within=5))
        return seen

    assert run(body) == [True, True, False, True, False, True]


def test_a_closed_connection_and_a_stalled_handshake_give_their_slots_back() -> None:
    async def body(opts: Any) -> list[bool]:
        slots = HandshakeSlots(Admission(slots=1, hold=30))
        a, b = connect_from("127.0.0.1"), connect_from("::1")
        await slots.http_connect(a)
        second = asyncio.ensure_future(slots.http_connect(b))
        seen = [await answered(asyncio.shield(second))]
        slots.client_disconnected(a.client_conn)  # it left before its handshake
        seen.append(await answered(second, within=5))
        # One that never finishes its handshake holds the slot for the hold only.
        stalled = HandshakeSlots(Admission(slots=1, hold=0.05))
        await stalled.http_connect(connect_from("127.0.0.1"))
        seen.append(await answered(stalled.http_connect(connect_from("127.0.0.1")), within=5))
        return seen

    assert run(body) == [False, True, True]


def test_a_client_that_leaves_while_it_waits_keeps_nothing_and_delays_no_one() -> None:
    async def body(opts: Any) -> list[bool]:
        slots = HandshakeSlots(Admission(slots=1, hold=30))
        a, b, c = (connect_from("127.0.0.1") for _ in range(3))
        await slots.http_connect(a)
        waiting = asyncio.ensure_future(slots.http_connect(b))
        await asyncio.sleep(0.01)
        b.client_conn.timestamp_end = 1.0  # as mitmproxy marks a client that went away
        slots.client_disconnected(b.client_conn)  # its hook is not cancelled: it waits on
        slots.tls_established_client(tls_of(a, opts))
        seen = [await answered(waiting, within=5), b.client_conn.id in slots._held]
        seen.append(await answered(slots.http_connect(c)))  # the slot came back at once
        return seen

    assert run(body) == [True, False, True]


def test_a_tunnel_without_a_handshake_gives_its_slot_back() -> None:
    async def body(opts: Any) -> list[bool]:
        seen = []
        for ends in (
            lambda s, c: s.requestheaders(tflow.tflow(client_conn=c)),  # plain HTTP inside
            lambda s, c: s.tcp_start(tflow.ttcpflow(client_conn=c)),  # passed through
            lambda s, c: s.http_connect_error(tflow.tflow(client_conn=c)),
        ):
            slots = HandshakeSlots(Admission(slots=1, hold=30))
            flow = connect_from("127.0.0.1")
            await slots.http_connect(flow)
            ends(slots, flow.client_conn)
            seen.append(await answered(slots.http_connect(connect_from("127.0.0.1"))))
        return seen

    assert run(body) == [True, True, True]


def test_a_refused_connect_takes_no_slot() -> None:
    async def body(opts: Any) -> bool:
        slots = HandshakeSlots(Admission(slots=1, hold=30))
        refused = connect_from("127.0.0.1")
        refused.response = http.Response.make(407)  # proxy authentication, before this addon
        await slots.http_connect(refused)
        return await answered(slots.http_connect(connect_from("127.0.0.1")))

    assert run(body) is True


def test_a_client_on_another_machine_never_waits() -> None:
    async def body(opts: Any) -> list[bool]:
        slots = HandshakeSlots(Admission(slots=1, hold=30))
        await slots.http_connect(connect_from("127.0.0.1"))
        return [await answered(slots.http_connect(connect_from(p))) for p in
                ("203.0.113.7", "2001:db8::1", "10.1.2.3")]  # fmt: skip

    assert run(body) == [True, True, True]
    # This machine through a dual-stack listener is local: it waits like 127.0.0.1.
    held = HandshakeSlots(Admission(slots=1, hold=30))

    async def mapped(opts: Any) -> bool:
        await held.http_connect(connect_from("127.0.0.1"))
        return await answered(held.http_connect(connect_from("::ffff:127.0.0.1")))

    assert run(mapped) is False


def test_the_replay_proxy_holds_a_connect_after_the_guard_has_seen_it() -> None:
    """The guard's idle deadline starts at the CONNECT, so a client left waiting for a slot
    can still be closed by it."""
    from ssetape.addons import replayer

    names = [type(a).__name__ for a in replayer.addons]
    assert names.index("ConnectionGuard") < names.index("HandshakeSlots")
