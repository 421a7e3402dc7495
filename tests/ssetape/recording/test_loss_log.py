"""The loss lines and the log format, on samples made up second by second (a recorder whose
recording process really falls behind: tests/addons/test_recorder_loss_log.py)."""

from __future__ import annotations

import logging
import re

import orjson
import pytest

from ssetape.recording.health import STALL
from ssetape.recording.link_health import LinkHealth
from ssetape.recording.log_format import FIELDS, LogLines, instance_name
from ssetape.recording.loss_log import QUIET, REPEAT, LossLog
from ssetape.recording.protocol import Counts
from ssetape.vocabulary import LogFormat, check_name

BOUND = 1 << 20


def link(waiting: int, counts: Counts, pid: int = 42) -> LinkHealth:
    return LinkHealth(True, pid, True, True, counts, waiting, BOUND)


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, dict[str, object]]]:
    return [(r.getMessage(), getattr(r, FIELDS, {})) for r in caplog.records]


def test_a_drop_is_said_once_then_every_repeat_then_at_its_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "ssetape.recorder")
    losses, counts = LossLog(), Counts()
    t = 0.0
    losses.sample(link(0, counts), 0, t)
    lost = 0
    while t < 35:  # 100 events dropped every half second for 35 s; it moves all along
        t += 0.5
        lost += 100
        losses.sample(link(BOUND + 1 + int(t) % 2 * 1000, counts := Counts()), lost, t)
    while t < 35 + QUIET + 1:
        t += 0.5
        losses.sample(link(0, counts := Counts()), lost, t)
    got = lines(caplog)
    # Said after 10 s, then after 20 s (twice as long each time): at 10 s and 30 s.
    assert [f["event"] for _, f in got] == ["drop_start"] + ["drop_continues"] * 2 + ["drop_end"]
    assert "dropping events (100 so far; its input is full" in got[0][0]
    assert got[1][1]["events_dropped"] == 100 * (1 + int(REPEAT / 0.5))
    assert got[-1][0] == "ssetape: dropping ended: 7,000 events dropped over 34 s"
    assert got[-1][1]["events_dropped"] == got[-1][1]["events_lost"] == 7_000


def test_a_stall_starts_after_the_threshold_and_ends_when_it_moves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "ssetape.recorder")
    losses = LossLog()
    frozen = Counts()
    t = 0.0
    losses.sample(link(5_000, frozen), 0, t)
    while t < STALL + 12:  # no report, bytes waiting: nothing moves
        t += 0.5
        losses.sample(link(5_000, frozen), 0, t)
    losses.sample(link(0, Counts()), 0, t + 0.5)  # it reports and takes its pipe again
    got = lines(caplog)
    assert [f["event"] for _, f in got] == ["stall_start", "stall_continues", "stall_end"]
    assert got[0][0] == "ssetape: the recording process stalled: no progress for 15 s (5,000 " \
        "bytes waiting for it)"  # fmt: skip
    assert re.fullmatch(r"ssetape: the recording process resumed: stalled for 2\d s .*", got[2][0])


def test_an_episode_under_way_ends_when_the_proxy_stops(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "ssetape.recorder")
    losses = LossLog()
    losses.sample(link(0, Counts()), 0, 0.0)
    losses.sample(link(BOUND + 1, Counts()), 50, 0.5)
    losses.close(80, 1.0, "the proxy stops")
    msgs = [m for m, _ in lines(caplog)]
    assert msgs[-1] == "ssetape: dropping ended as the proxy stops: 80 events dropped over 0.5 s"


def test_both_formats() -> None:
    record = logging.LogRecord("ssetape.recorder", logging.WARNING, "", 0, "lost %d", (3,), None)
    record.created = 1796524234.5
    setattr(record, FIELDS, {"event": "drop_start", "events_dropped": 3, "msg": "not this"})
    text = LogLines("api-1").format(record)
    assert text == "2026-12-06T02:30:34.500Z WARNING ssetape[api-1] lost 3"
    obj = orjson.loads(LogLines("api-1", LogFormat.JSON).format(record))
    assert obj == {
        "ts": "2026-12-06T02:30:34.500Z", "level": "WARNING", "name": "api-1",
        "logger": "ssetape.recorder", "msg": "lost 3", "event": "drop_start",
        "events_dropped": 3,
    }  # fmt: skip
    # mitmproxy's lines about one client name it.
    mitm = logging.LogRecord("mitmproxy.proxy.server", logging.INFO, "", 0, "connect", (), None)
    mitm.client = ("127.0.0.1", 5555)  # type: ignore[attr-defined]
    assert LogLines("n").format(mitm).endswith("INFO ssetape[n] [127.0.0.1:5555] connect")
    assert orjson.loads(LogLines("n", LogFormat.JSON).format(mitm))["client"] == "127.0.0.1:5555"


def test_names() -> None:
    assert instance_name(8080, "edge-1") == "edge-1"
    assert instance_name(8080).endswith(":8080") and ":" not in instance_name(0)
    for bad in ("a b", "x" * 65, "tab\there", "[x]"):
        with pytest.raises(ValueError):
            check_name(bad)
    assert check_name(" api-1 ") == "api-1"
