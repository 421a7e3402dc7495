"""How the health checks read a recording process over time (``recording.health``), on a
clock the test moves: silent past SILENT is not alive, bytes its pipe does not take for
STALL are a stall, a failed write after the last stored rows is a failing store until rows
are stored again, a full buffer is not ready."""

from __future__ import annotations

import dataclasses

from ssetape.recording.health import SILENT, STALL, Health
from ssetape.recording.link_health import LinkHealth
from ssetape.recording.protocol import Counts

LIVE = LinkHealth(True, 42, True, True, Counts(), 0, 1 << 20)


def states(health: Health, link: LinkHealth, now: float) -> dict[str, tuple[bool, str]]:
    return {c.name: (c.ok, c.state) for c in health.checks(link, now)}


def test_a_silent_recording_process_is_not_alive_and_a_reporting_one_is() -> None:
    h = Health()
    assert all(ok for ok, _ in states(h, LIVE, 0.0).values())
    report = dataclasses.replace(LIVE, counts=Counts(events_recorded=1))
    assert states(h, report, SILENT - 1)["recording_process"][0]  # a new report
    got = states(h, report, 2 * SILENT)  # and none since
    assert got["recording_process"] == (False, f"no report for {SILENT + 1:.0f} s")


def test_bytes_its_pipe_does_not_take_are_a_stall_a_full_buffer_is_not_ready() -> None:
    h = Health()
    h.sample(LIVE, 0.0)
    waiting = dataclasses.replace(LIVE, waiting=5000)
    for t in range(0, int(STALL), 1):  # fresh reports: it is alive, it just does not read
        waiting = dataclasses.replace(waiting, counts=Counts())
        assert states(h, waiting, float(t))["writing"][0]
    waiting = dataclasses.replace(waiting, counts=Counts())
    assert states(h, waiting, STALL + 1)["writing"] == (
        False,
        f"stalled: 5000 bytes waiting for {STALL + 1:.0f} s",
    )
    taken = dataclasses.replace(waiting, waiting=100)  # it took some
    assert states(h, taken, STALL + 2)["writing"][0]
    full = dataclasses.replace(taken, waiting=(1 << 20) + 1)
    assert not states(h, full, STALL + 3)["backlog"][0]


def test_a_failed_write_after_the_last_stored_rows_is_a_failing_store_until_rows_are_stored() -> (
    None
):
    h = Health()
    stored = dataclasses.replace(LIVE, counts=Counts(events_recorded=10))
    assert states(h, stored, 0.0)["store"] == (True, "writing")
    failing = dataclasses.replace(
        LIVE, counts=Counts(events_recorded=10, store_errors=1, last_error="database is locked")
    )
    assert states(h, failing, 1.0)["store"] == (
        False,
        "failing, retrying: database is locked",
    )
    same = dataclasses.replace(failing, counts=dataclasses.replace(failing.counts))
    assert not states(h, same, 2.0)["store"][0]  # no news is still a failure
    back = dataclasses.replace(
        LIVE, counts=Counts(events_recorded=30, store_errors=1, last_error="database is locked")
    )
    assert states(h, back, 3.0)["store"] == (True, "writing")
    restarted = dataclasses.replace(failing, pid=43)  # a new process starts with a clean slate
    assert states(h, restarted, 4.0)["store"][0]
