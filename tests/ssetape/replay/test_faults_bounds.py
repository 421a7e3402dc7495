"""A fault's numbers past what a replay can serve (`ms=inf`, `event=1e400`, `times=inf`,
`retry_after=inf`) are a one-line error of `ssetape replay`, never an OverflowError; and the
retry-after a status fault sends is a number every SDK reads."""

from __future__ import annotations

import pytest

from ssetape.replay.faults import Fault, Faults
from ssetape.replay.response_parts import Head
from tests.ssetape.cli.test_cli import assert_one_line_error, run


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("cut:ms=inf", "ms 'inf' is not a whole number from 0 to 2147483647"),
        ("cut:event=1e400", "'1e400' is not a whole number"),
        ("cut:event=1,times=inf", "times 'inf' is not a whole number"),
        ("stall:event=1,ms=" + "9" * 400, "is not a whole number"),
        ("status:429,retry_after=inf", "retry_after 'inf' is not a number of seconds"),
        ("status:429,retry_after=nan", "retry_after 'nan' is not a number of seconds"),
    ],
)
def test_a_number_past_what_a_replay_serves_is_a_one_line_error(spec: str, said: str) -> None:
    assert_one_line_error(run("replay", "--port", "0", "--fault", spec), said)


@pytest.mark.parametrize(
    ("given", "header"),
    [("1.5", b"1.5"), ("1234567", b"1234567"), ("0.0000001", b"0")],
)  # fmt: skip
def test_retry_after_is_sent_as_a_plain_number(given: str, header: bytes) -> None:
    fault = Fault.parse(f"status:429,retry_after={given}")
    answer = Faults([fault]).refusal("/v1/chat/completions")
    assert answer is not None and isinstance(head := answer[0], Head)
    assert (b"retry-after", header) in head.headers
    assert Fault.parse(fault.spec()) == fault
