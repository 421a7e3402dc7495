"""ssetape's closed vocabularies, each spelled out here and nowhere else.

Record modes, exchange states, outcomes and faults are stored, printed and typed by users, so their
values are part of the product; the ``x-ssetape-*`` headers are the words the proxy, the timed
server and the test forwarder exchange. Everything else imports them from this module.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ANY_FAULT",
    "DEFAULT_FAULT",
    "ERROR_OUTCOMES",
    "FAILED",
    "INLINE_BODY",
    "MAX_BODY",
    "MAX_NAME",
    "MAX_SESSION",
    "TRANSPORT_ERRORS",
    "Direction",
    "ExchangeState",
    "Fault",
    "Header",
    "LogFormat",
    "MatchedIn",
    "Opcode",
    "Outcome",
    "RecordMode",
    "RunState",
    "Transport",
    "check_name",
    "check_session",
    "counted_fault",
    "fault_choices",
    "faults_of",
    "is_failed",
    "outcome_choices",
    "parse_fault",
    "parse_outcome",
    "session_of",
]


class RecordMode(StrEnum):
    """VCR.py's record modes: what happens to a request the tape has no recording for."""

    NONE = "none"  # replay only; a request not on the tape is a miss
    ONCE = "once"  # record everything while the tape is empty, then as none
    NEW_EPISODES = "new_episodes"  # replay hits, forward and record misses
    ALL = "all"  # forward and record everything, replay nothing

    @classmethod
    def parse(cls, value: str, what: str = "record mode") -> RecordMode:
        """The mode named ``value``; ValueError in one line naming the choices otherwise."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"{what}: {value!r} is not one of {', '.join(cls.names())}") from None

    @classmethod
    def names(cls) -> list[str]:
        return [m.value for m in cls]

    def replays(self, *, tape_empty: bool) -> bool:
        """Whether requests are answered from the tape (``once`` records an empty tape)."""
        if self is RecordMode.ONCE:
            return not tape_empty
        return self in (RecordMode.NONE, RecordMode.NEW_EPISODES)

    @property
    def forwards_misses(self) -> bool:
        """A request the tape does not have goes upstream instead of being a miss."""
        return self is RecordMode.NEW_EPISODES


class ExchangeState(StrEnum):
    """How the transport of one exchange ended, as the recorder saw it."""

    RECORDING = "recording"  # in flight
    COMPLETED = "completed"
    ABORTED = "aborted"  # the client went away
    FAILED = "failed"  # no response
    TRUNCATED = "truncated"  # the upstream cut the stream
    INTERRUPTED = "interrupted"  # the recorder stopped first


class Outcome(StrEnum):
    """What the exchange itself said about how it ended (the stream's knowledge)."""

    COMPLETED = "completed"
    INCOMPLETE = "incomplete"  # a token or length limit, or a turn paused to be resumed
    REFUSED = "refused"
    ERROR = "error"  # an error event after the stream started
    UNRESOLVED = "unresolved"  # Responses' response_unresolved
    HTTP_ERROR = "http_error"
    ABORTED = "aborted"
    CUT = "cut"  # the upstream cut it, or no terminal event
    NO_RESPONSE = "no_response"
    INTERRUPTED = "interrupted"
    RECORDING = "recording"  # not over yet


# The outcomes counted as failed: `stats`' "failed" column, the web's red marks and the
# filter `--outcome failed` are this one set (docs/FIGURES.md).
ERROR_OUTCOMES: frozenset[str] = frozenset(
    {
        Outcome.ERROR,
        Outcome.UNRESOLVED,
        Outcome.HTTP_ERROR,
        Outcome.CUT,
        Outcome.NO_RESPONSE,
        Outcome.INTERRUPTED,
    }
)
# A filter value that stands for every outcome in ERROR_OUTCOMES (and, for an exchange not
# analysed yet, an HTTP error status or a transport that failed: see is_failed).
FAILED = "failed"


def outcome_choices() -> list[str]:
    """What an outcome filter takes: every outcome, then the group ``failed``."""
    return [o.value for o in Outcome] + [FAILED]


def parse_outcome(value: str) -> str:
    """``value`` as an outcome filter; ValueError in one line naming the choices otherwise."""
    if value in outcome_choices():
        return value
    raise ValueError(f"outcome {value!r} is not one of {', '.join(outcome_choices())}")


def is_failed(outcome: str | None, status: int | None, state: str) -> bool:
    """Whether an exchange counts as failed (storage.filters.failed_clause says it in SQL)."""
    if outcome is not None:
        return outcome in ERROR_OUTCOMES
    # Not analysed yet (`ssetape reindex` fills it): judged by its transport alone.
    return (status is not None and status >= 400) or state in TRANSPORT_ERRORS


# What counts as an error in an exchange not analysed yet (no outcome): its transport's end.
TRANSPORT_ERRORS: frozenset[str] = frozenset(
    {ExchangeState.FAILED, ExchangeState.TRUNCATED, ExchangeState.INTERRUPTED}
)


class Fault(StrEnum):
    """Who made an exchange fail, beside its outcome (analysis.fault has the rule); an
    exchange that did not fail has none."""

    PROVIDER = "provider"  # an error event, an HTTP 5xx or 429, a stream it cut
    CLIENT = "client"  # an HTTP 4xx (the request was refused), or the client went away
    NETWORK = "network"  # no response: the upstream could not be reached (DNS, refused, TLS)
    SSETAPE = "ssetape"  # the recorder stopped, or its recording process died, first


# A fault selection that stands for every fault.
ANY_FAULT = "any"
# What error rates count unless told otherwise: a model's rate is its provider's doing.
DEFAULT_FAULT = Fault.PROVIDER


def fault_choices() -> list[str]:
    """What a fault filter takes: every fault, then ``any``."""
    return [f.value for f in Fault] + [ANY_FAULT]


def parse_fault(value: str) -> str:
    """``value`` as a fault filter; ValueError in one line naming the choices otherwise."""
    if value in fault_choices():
        return value
    raise ValueError(f"fault {value!r} is not one of {', '.join(fault_choices())}")


def faults_of(selection: str) -> frozenset[str]:
    """The faults a selection (a fault, or ``any``) stands for; ValueError as parse_fault."""
    return frozenset(Fault) if parse_fault(selection) == ANY_FAULT else frozenset({selection})


def counted_fault(fault: str | None, state: str) -> str:
    """The fault a failed exchange counts under (storage.filters.counted_fault_column says it
    in SQL): its own; one stored before faults were (`ssetape reindex --stale` reads it
    again) counts as ssetape's if the recorder interrupted it, else as the provider's."""
    if fault is not None:
        return fault
    return Fault.SSETAPE if state == ExchangeState.INTERRUPTED else Fault.PROVIDER


class Header(StrEnum):
    """Headers ssetape adds: between the proxy and its timed server, and on replay misses;
    the one a client adds to name its session; and the pytest plugin's control requests."""

    EXCHANGE = "x-ssetape-exchange"  # the recording to play
    T0 = "x-ssetape-t0"  # when the proxy had the whole request (time.monotonic())
    SPEED = "x-ssetape-speed"
    TOKEN = "x-ssetape-token"  # only the proxy may ask the timed server for recordings
    MISS = "x-ssetape-miss"  # on a replay miss's 404
    INCOMPLETE = "x-ssetape-incomplete"  # on a replay of a recording that misses something
    GAPS = "x-ssetape-gaps"  # "serve": replay past the recording's gaps (default: stop there)
    # The session a request belongs to: read and stripped by the recorder, never sent upstream.
    SESSION = "x-ssetape-session"
    FAULT = "x-ssetape-fault"  # on an answer a replay fault made (its spec)
    # A request to the recording proxy itself (recording.control), holding its secret.
    CONTROL = "x-ssetape-control"

    @property
    def raw(self) -> bytes:
        """The name as the replay servers read it (lower-case bytes)."""
        return self.value.encode("ascii")


# Request bodies up to this size are redacted, fingerprinted and matched on the event loop;
# larger ones go to a worker thread so one upload never stalls every other stream.
INLINE_BODY = 64 * 1024
# Request bodies larger than this are neither stored nor parsed: their size and SHA-256 stand
# for them (in the store and in matching), so a huge upload costs no memory twice.
MAX_BODY = 16 << 20

# Characters a session name keeps: the width of its column (storage.models.Exchange.session).
MAX_SESSION = 200


def check_session(name: str) -> str:
    """A session name a user gives (an option): refused, with a one-line ValueError, when it
    is longer than MAX_SESSION or has a character that does not print; "" names none."""
    if len(name) > MAX_SESSION:
        raise ValueError(f"a session name has at most {MAX_SESSION} characters, not {len(name)}")
    if not name.isprintable():
        raise ValueError(f"session name {name[:40]!r} has a character that does not print")
    return name.strip()


def session_of(value: str) -> str | None:
    """A session name a request gives (its Header.SESSION): never fails the request, so what
    does not print is left out and a longer name is cut to MAX_SESSION characters; None if
    nothing is left."""
    name = "".join(c for c in value if c.isprintable()).strip()[:MAX_SESSION].rstrip()
    return name or None


class RunState(StrEnum):
    """Where a recorder run stands (``ssetape stats --runs``; storage.runs has the rule)."""

    RUNNING = "running"
    # Alive, but no heartbeat in its run row for storage.runs.STALL_AFTER seconds: frozen,
    # stopped (SIGSTOP), or its store takes none of its writes.
    STALLED = "stalled"
    STOPPED = "stopped"  # it exited cleanly
    GONE = "gone"  # it died, or has been silent for long (another host's)


class LogFormat(StrEnum):
    """How a proxy command writes its log lines (``--log-format``)."""

    TEXT = "text"  # 2026-12-06T10:11:12.345Z WARNING ssetape[NAME] message
    JSON = "json"  # one JSON object per line


# Characters an instance name (``--name``) keeps: its run rows' column is wider.
MAX_NAME = 64


def check_name(name: str) -> str:
    """An instance name a user gives (``--name``): refused, with a one-line ValueError, when
    it is longer than MAX_NAME or has a space, a bracket or a character that does not print
    (it stands between the brackets of each log line); "" names none."""
    name = name.strip()
    if len(name) > MAX_NAME:
        raise ValueError(f"a name has at most {MAX_NAME} characters, not {len(name)}")
    bad = next((c for c in name if not c.isprintable() or c.isspace() or c in "[]"), None)
    if bad is not None:
        raise ValueError(f"name {name[:40]!r} has {bad!r}: printable, no spaces or brackets")
    return name


class MatchedIn(StrEnum):
    """Where a text search (`list --grep`, the viewer's q, MCP's text) found its text in an
    exchange, as a match's snippet names it; the first of these that holds it."""

    PROMPT = "prompt"  # the request's text (exchanges.request_text)
    OUTPUT = "output"  # the model's output text
    PATH = "path"  # the request path


class Transport(StrEnum):
    """What an exchange carried (``exchanges.transport``; NULL in a store is HTTP, as every
    exchange recorded before WebSocket sessions were)."""

    HTTP = "http"
    WEBSOCKET = "websocket"  # one WebSocket connection: its upgrade, then its messages


class Direction(StrEnum):
    """Who sent a WebSocket message (``events.direction``; NULL for an HTTP stream's events)."""

    CLIENT = "client"
    SERVER = "server"


class Opcode(StrEnum):
    """A WebSocket message's frame type (``events.opcode``): control frames are not stored."""

    TEXT = "text"
    BINARY = "binary"
