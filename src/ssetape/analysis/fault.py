"""Who made an exchange fail: the rule behind ``exchanges.fault`` (vocabulary.Fault).

One pure function of what the recorder stored (outcome, transport state, HTTP status, error
text), applied wherever an outcome is written: the analysis of a finished stream, `ssetape
reindex`, and the sweep that ends the exchanges of a recorder that died (``ssetape``).

The error texts read here are mitmproxy's (``flow.error.msg``). A stream the upstream cut
reads alike however it was cut (HTTP/1: ``peer closed connection without sending complete
message body``, whether the peer closed or reset), so a cut is the provider's; only an
upstream that never answered is the network's.
"""

from __future__ import annotations

from ssetape.vocabulary import ExchangeState, Fault, Outcome, is_failed

__all__ = ["fault_of"]

# Statuses of 4xx that are the provider's doing, not the request's: rate limits (and
# Anthropic's 529 "overloaded" is a 5xx already).
_PROVIDER_4XX = frozenset({429})
# No response, yet the upstream was reached: it answered something mitmproxy could not read,
# or closed or reset the request's stream. (A connection refused, a name not resolved, a TLS
# handshake that failed, a connect that timed out: the network's.)
_UPSTREAM_SPOKE = (
    "Cannot parse HTTP response",
    "unexpected server response",
    "protocol error",
    "server closed connection",
    "peer closed connection",
    "stream reset",
)
# The proxy's own bound (mitmproxy's body_size_limit) cut the response: ssetape's doing.
_PROXY_BOUND = "body_size_limit"


def fault_of(
    outcome: str | None, state: str, status: int | None, error: str | None = None
) -> Fault | None:
    """Who made the exchange fail, or end before its answer did (the client that went
    away); None when it did neither. ``outcome`` None: not analysed, read from the transport."""
    if outcome == Outcome.ABORTED or (outcome is None and state == ExchangeState.ABORTED):
        return Fault.CLIENT
    if not is_failed(outcome, status, state):
        return None
    if status is not None and status >= 400:  # an HTTP error wins, as it does the outcome
        return Fault.PROVIDER if status >= 500 or status in _PROVIDER_4XX else Fault.CLIENT
    ended = outcome or state
    if ended == Outcome.INTERRUPTED:  # the recorder stopped (or died) before the stream did
        return Fault.SSETAPE
    text = error or ""
    if _PROXY_BOUND in text:
        return Fault.SSETAPE
    if ended in (Outcome.NO_RESPONSE, ExchangeState.FAILED):
        return Fault.PROVIDER if any(s in text for s in _UPSTREAM_SPOKE) else Fault.NETWORK
    # An error event, a response_unresolved, a stream cut or ended without its terminal.
    return Fault.PROVIDER
