"""The recorder's bounds are options: validated in ``configure``, honoured by the recording
process. In process (``mitmproxy.test.taddons``): real addon, real recording process, real
SQLite."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

import pytest
from mitmproxy import exceptions

from ssetape.addons.recorder import Recorder
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.addons.test_recorder_crash import recording, streamed


@pytest.mark.parametrize(
    ("option", "value", "least"),
    [
        ("ssetape_max_event", 100, "1024"),
        ("ssetape_max_decoded", 1000, "1048576"),
        ("ssetape_max_response_body", 100, "1024"),
        ("ssetape_max_pending", 0, "1"),
    ],
)
def test_a_bound_below_its_least_is_an_option_error(
    tmp_path: Path, option: str, value: int, least: str
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from mitmproxy.test import taddons

    rec = Recorder()
    with taddons.context(rec) as tctx:
        tctx.configure(rec, ssetape_db=str(tmp_path / "tape.db"))
        link = rec.link
        with pytest.raises(exceptions.OptionsError, match=f"{option}: {value} .* {least}"):
            tctx.configure(rec, **{option: value})
        # As in mitmweb's options editor: the old value is back, recording goes on as it was.
        assert getattr(tctx.options, option) != value
        assert rec.link is link and link is not None
        rec.done()


def test_an_event_over_ssetape_max_event_is_passed_on_and_named_not_stored(
    tmp_path: Path,
) -> None:
    big = b"data: " + b"x" * 3000 + b"\n\n"
    chunks = [b"data: 1\n\n", big, b"data: 3\n\n"]

    exit_lines: list[str | None] = []

    async def session() -> list[bytes]:
        from mitmproxy import ctx

        rec = Recorder()
        with recording(rec, tmp_path) as flow:
            ctx.options.update(ssetape_max_event=2048)
            flow = await streamed(rec, flow)
            stream = flow.response.stream
            assert callable(stream)
            relayed = [bytes(stream(c)) for c in chunks]
            stream(b"")  # end of stream
            rec.response(flow)
            rec.done()
            exit_lines.append(rec.exit_line)
        return relayed

    relayed = asyncio.run(session())
    assert relayed == chunks  # the client got every byte
    with Store.open(str(tmp_path / "tape.db"), create=False) as store:
        [x] = Queries(store).exchanges()
        assert [e.data for e in Queries(store).events(x.id)] == ["1", "3"]
        assert x.error is not None and "an event over 2048 bytes at #1 not stored" in x.error
        assert x.gap_seq == 1  # a replay of it stops there and says so
    # Relayed, not stored: counted as lost, so stored + lost is what the client got.
    assert exit_lines == ["ssetape: 2 events in 1 exchange stored, 1 event and 0 exchanges lost"]
