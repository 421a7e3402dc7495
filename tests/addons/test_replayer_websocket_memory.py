"""Replay behind mitmproxy (`--set`): a session the timed server plays keeps none of its
messages in the proxy past the one being relayed (an hour of audio would otherwise be held)."""

from __future__ import annotations

from mitmproxy.test import tflow
from mitmproxy.websocket import WebSocketMessage
from wsproto.frame_protocol import Opcode

from ssetape.addons.recorder import REPLAYED
from ssetape.addons.replayer import Replayer


def test_a_replayed_session_keeps_only_the_message_being_relayed() -> None:
    flow = tflow.twebsocketflow(messages=False)
    assert flow.websocket is not None
    flow.metadata[REPLAYED] = 7  # a hit: the timed server plays recording 7
    replayer = Replayer()
    for n in range(1000):
        flow.websocket.messages.append(
            WebSocketMessage(Opcode.TEXT, n % 2 == 0, b'{"type":"response.output_audio.delta"}')
        )
        replayer.websocket_message(flow)
    assert len(flow.websocket.messages) == 1
    assert flow.websocket.messages[0].from_client is False  # the last one, for the next addon
    assert replayer.misses == 0
