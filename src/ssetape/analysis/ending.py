"""How an exchange ended: its outcome, from what the stream said and how its transport ended.

The stream's own terminal wins over the transport. A stream whose transport completed
without a terminal was cut by its upstream, unless the recording has a gap (``gap_seq``: the
recording process fell behind, or the store dropped events): the proxy relayed it whole, so
the terminal may be in what was not recorded, and the provider did not cut it.
"""

from __future__ import annotations

from ssetape.analysis.apis import UNKNOWN
from ssetape.analysis.tally import Tally
from ssetape.vocabulary import ExchangeState, Outcome

__all__ = ["NOT_RECORDED", "TRANSPORT_OUTCOMES", "fallback_outcome", "outcome_of"]

# How the transport ended, when the stream itself said nothing.
TRANSPORT_OUTCOMES: dict[str, Outcome] = {
    ExchangeState.ABORTED: Outcome.ABORTED,
    ExchangeState.FAILED: Outcome.NO_RESPONSE,
    ExchangeState.INTERRUPTED: Outcome.INTERRUPTED,
    ExchangeState.RECORDING: Outcome.RECORDING,
}
# The reason of a stream relayed whole whose terminal the recording does not have.
NOT_RECORDED = "terminal event not recorded (gap)"


def outcome_of(
    tally: Tally, status: int | None, state: str, body_read: bool, gap_seq: int | None
) -> tuple[str, str | None]:
    """The outcome and its reason; ``body_read``: a whole body was read, not a stream."""
    if status is not None and status >= 400:
        return Outcome.HTTP_ERROR, None
    if state == ExchangeState.RECORDING:
        return Outcome.RECORDING, None
    # The exchange's own terminal wins over how the connection ended.
    if tally.outcome is not None:
        return tally.outcome, tally.reason
    if state in TRANSPORT_OUTCOMES:
        return TRANSPORT_OUTCOMES[state], None
    if state == ExchangeState.TRUNCATED:
        return Outcome.CUT, "truncated"
    if state != ExchangeState.COMPLETED:
        return Outcome.INTERRUPTED, None
    if tally.api == UNKNOWN:
        return Outcome.COMPLETED, None
    if gap_seq is not None and not body_read:
        return Outcome.COMPLETED, NOT_RECORDED
    return Outcome.CUT, "invalid JSON body" if body_read else "no terminal event"


def fallback_outcome(status: int | None, state: str) -> str:
    """The outcome when the analysis itself failed: what the transport tells."""
    if isinstance(status, int) and status >= 400:
        return Outcome.HTTP_ERROR
    outcome = TRANSPORT_OUTCOMES.get(str(state))
    if outcome is not None:
        return outcome
    if state == ExchangeState.COMPLETED:
        return Outcome.COMPLETED
    return Outcome.CUT if state == ExchangeState.TRUNCATED else Outcome.INTERRUPTED
