"""The closed vocabularies, and every place that offers a choice of them offering the same."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from mitmproxy.test import taddons

from ssetape.addons.replayer import Replayer
from ssetape.cli.main import main
from ssetape.testing.tape_session import TapeSession
from ssetape.vocabulary import ERROR_OUTCOMES, Header, Outcome, RecordMode

NAMES = ["none", "once", "new_episodes", "all"]


def test_record_modes_and_their_one_line_error() -> None:
    assert RecordMode.names() == NAMES
    assert RecordMode.parse("once") is RecordMode.ONCE
    with pytest.raises(ValueError) as e:
        RecordMode.parse("sometimes", "--record-mode")
    assert str(e.value) == (
        "--record-mode: 'sometimes' is not one of none, once, new_episodes, all"
    )


@pytest.mark.parametrize(
    ("mode", "empty", "replays"),
    [
        ("none", True, True),
        ("none", False, True),
        ("once", True, False),  # an empty tape is recorded
        ("once", False, True),
        ("new_episodes", False, True),
        ("all", False, False),
    ],
)
def test_which_modes_replay(mode: str, empty: bool, replays: bool) -> None:
    assert RecordMode(mode).replays(tape_empty=empty) is replays
    assert RecordMode(mode).forwards_misses is (mode == "new_episodes")


def test_every_place_offers_the_same_record_modes(tmp_path: Path) -> None:
    replay = main.get_command(click.Context(main), "replay")
    assert replay is not None
    (option,) = [p for p in replay.params if p.name == "record_mode"]
    assert isinstance(option.type, click.Choice) and list(option.type.choices) == NAMES
    with taddons.context() as tctx:
        tctx.master.addons.register(Replayer())
        assert tctx.options._options["ssetape_record_mode"].choices == NAMES
    with pytest.raises(ValueError, match="record_mode: 'later' is not one of"):
        TapeSession(tmp_path / "x.jsonl", confdir=tmp_path, record_mode="later")


def test_outcomes_and_headers() -> None:
    assert {o.value for o in Outcome} > ERROR_OUTCOMES
    assert Outcome.COMPLETED not in ERROR_OUTCOMES and Outcome.CUT in ERROR_OUTCOMES
    assert all(h.value.startswith("x-ssetape-") and h.raw == h.value.encode() for h in Header)
