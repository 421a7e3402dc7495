"""pytest plugin (entry point ``pytest11``): the ``ssetape`` fixture and marker.

::

    def test_chat(ssetape):
        client = openai.OpenAI(base_url=ssetape.base_url("https://api.openai.com/v1"))
        ...

The fixture replays ``cassettes/<test module>/<test name>.jsonl`` (next to the test file) with
the recorded bytes and timing; ``--ssetape-record-mode`` records (default ``none``: never the
network), ``--ssetape-speed`` scales time (default 0: instant). Per-test options go in
``@pytest.mark.ssetape(...)``, which overrides the command line. A request the cassette has no
recording for gets a 404 at once, and the test fails with the explanation.
"""

from __future__ import annotations

import json
import os
import re
import sys
import uuid
from collections.abc import Generator, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ssetape.vocabulary import RecordMode, session_of

# Imported when a test uses the fixture: every pytest run in an environment with ssetape
# installed loads this module, and most of them never need SQLAlchemy.
if TYPE_CHECKING:
    from ssetape.testing.tape_session import TapeSession

_SESSION = pytest.StashKey["TapeSession"]()
_RUN_ID = pytest.StashKey[str]()
_STALE = pytest.StashKey[set[Path]]()  # cassettes this process re-records for their age
_MARKER_OPTIONS = (
    "cassette", "record_mode", "speed", "ignore_fields", "match_host", "allow_gaps",
    "redact_fields", "redact_headers", "profiles", "faults",
    "max_age",
)  # fmt: skip
_UNSAFE = re.compile(r"[^\w.\-\[\]=,+]")
_HEX_KEY = re.compile(r"^[0-9a-fA-F]{32,128}$")


def _problems() -> tuple[type[Exception], ...]:
    """What a cassette or a proxy can do wrong: reported in one line, without a traceback."""
    from ssetape.cassettes.cassette import CassetteError
    from ssetape.storage.store import StoreError
    from ssetape.testing.child_proxy import ChildProxyError

    return (CassetteError, ChildProxyError, StoreError, ValueError, OSError)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ssetape", "ssetape cassettes (recorded LLM API streams)")
    group.addoption(
        "--ssetape-record-mode",
        choices=RecordMode.names(),
        default=RecordMode.NONE.value,
        help="none (default): replay only, a request not on the cassette fails the test; "
        "once: record cassettes that do not exist yet; new_episodes: record what is missing; "
        "all: re-record everything.",
    )
    group.addoption(
        "--ssetape-speed",
        type=float,
        default=0.0,
        help="Replay timing: 0 (default) = instant, 1 = as recorded, 2 = twice as fast.",
    )
    group.addoption(
        "--ssetape-bin",
        default=os.environ.get("SSETAPE_BIN", ""),
        help="The ssetape command that records (default: $SSETAPE_BIN, else this environment's). "
        "Replay needs none.",
    )
    group.addoption(
        "--ssetape-confdir",
        default="~/.mitmproxy",
        help="mitmproxy's directory (its CA is what ssetape.ca_file names). Default ~/.mitmproxy.",
    )
    group.addoption(
        "--ssetape-strict",
        action="store_true",
        help="Fail every test whose streams (replayed or recorded) carry a protocol finding, "
        "with the findings listed.",
    )
    _add_hygiene_options(group)


def _add_hygiene_options(group: pytest.OptionGroup) -> None:
    group.addoption(
        "--ssetape-drift",
        action="store_true",
        help="At the end, list the requests that missed or matched only with ignore_fields, "
        "field by field against the nearest recording, and the recordings no test replayed.",
    )
    group.addoption(
        "--ssetape-drift-json",
        metavar="PATH",
        default="",
        help="Write that report (and the stale and re-recorded cassettes) as JSON to PATH.",
    )
    group.addoption(
        "--ssetape-max-age",
        metavar="AGE",
        default="",
        help="Report cassettes recorded longer ago than AGE (90d, 12h, 2w); record modes once "
        "and new_episodes re-record them. Marker option: max_age.",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "ssetape(cassette=None, *, record_mode=None, speed=None, ignore_fields=(), "
        "match_host=True, allow_gaps=False, redact_fields=(), redact_headers=(), profiles={}, "
        "faults=(), max_age=None): "
        "options of "
        "the ssetape "
        "fixture for this test (they override the command line).",
    )
    speed = config.getoption("ssetape_speed", 0.0)
    if speed is not None and not speed >= 0:
        raise pytest.UsageError(f"--ssetape-speed {speed}: use 0 (instant), 1 (recorded) or more")
    # Workers of one xdist run share its id: cassettes shared by several tests add up.
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    run_id = (workerinput or {}).get("testrunuid") or getattr(config, "testrunuid", None)
    config.stash[_RUN_ID] = str(run_id or uuid.uuid4().hex)
    from ssetape.testing.age import HygieneReport, parse_age

    if config.getoption("ssetape_max_age", ""):
        try:
            parse_age(config.getoption("ssetape_max_age"))
        except ValueError as e:
            raise pytest.UsageError(f"--ssetape-max-age: {e}") from None
    if workerinput is None:  # the controller (or a run without xdist) reports, once
        config.pluginmanager.register(HygieneReport(config), "ssetape-hygiene")


def pytest_unconfigure(config: pytest.Config) -> None:
    # The recording proxies this session shared, if it recorded (else not even imported).
    shared = sys.modules.get("ssetape.testing.recording_proxies")
    if shared is not None:
        shared.RecordingProxies.close_shared()


def pytest_report_header(config: pytest.Config) -> str:
    mode = config.getoption("ssetape_record_mode")
    return f"ssetape: record mode {mode}, speed {config.getoption('ssetape_speed')}"


def default_cassette(item: pytest.Item) -> Path:
    """``cassettes/<test module>/<test name>.jsonl`` next to the test file."""
    name = item.nodeid.split("::", 1)[-1].replace("::", ".")
    return item.path.parent / "cassettes" / item.path.stem / f"{_UNSAFE.sub('_', name)}.jsonl"


def _profiles(value: object) -> dict[str, str]:
    """The marker's ``profiles``: {host: name} or ["host=name", ...], checked."""
    from ssetape.analysis.profiles import parse_profile_overrides

    if isinstance(value, dict):
        value = [f"{host}={name}" for host, name in value.items()]
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(f"@pytest.mark.ssetape(profiles=...): {value!r} is not a mapping")
    try:
        return parse_profile_overrides(str(v) for v in value)
    except ValueError as e:
        raise ValueError(f"@pytest.mark.ssetape(profiles=...): {e}") from None


def _marker_options(item: pytest.Item) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    # Closest marker last, so a test's own marker overrides its class's and module's.
    for mark in reversed(list(item.iter_markers("ssetape"))):
        if len(mark.args) > 1:
            raise ValueError("@pytest.mark.ssetape takes one cassette path")
        if mark.args:
            opts["cassette"] = mark.args[0]
        unknown = sorted(set(mark.kwargs) - set(_MARKER_OPTIONS))
        if unknown:
            raise ValueError(
                f"@pytest.mark.ssetape has no option {', '.join(unknown)} "
                f"(options: {', '.join(_MARKER_OPTIONS)})"
            )
        opts.update(mark.kwargs)
    for key in ("ignore_fields", "redact_fields", "redact_headers"):
        if isinstance(opts.get(key), str):  # ignore_fields="user" means ("user",)
            opts[key] = (opts[key],)
    return opts


def _redaction_key(config: pytest.Config) -> str | None:
    """The key that masks secrets in recordings, stable on this machine so that re-recording
    an unchanged interaction changes no mask. It stays out of cassettes: in
    $SSETAPE_REDACTION_KEY (hex) if set, else in pytest's cache directory (not committed)."""
    env = os.environ.get("SSETAPE_REDACTION_KEY", "").strip()
    if env:
        if not _HEX_KEY.match(env):
            raise ValueError("SSETAPE_REDACTION_KEY must be 32 to 128 hex digits")
        return env
    cache = getattr(config, "cache", None)
    if cache is None:  # -p no:cacheprovider: a fresh key per recording
        return None
    from ssetape.testing.cassette_lock import cassette_lock, default_lock_dir

    path = cache.mkdir("ssetape") / "redaction_key"
    with cassette_lock(path, default_lock_dir()):
        if not path.exists():
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(os.urandom(32).hex())
        key = path.read_text().strip()
    return key if _HEX_KEY.match(key) else None


def _session(item: pytest.Item) -> TapeSession:
    from ssetape.testing.tape_session import TapeSession

    config = item.config
    opts = _marker_options(item)
    cassette = Path(opts.get("cassette") or default_cassette(item))
    if not cassette.is_absolute():
        cassette = item.path.parent / cassette
    mode = opts.get("record_mode") or config.getoption("ssetape_record_mode")
    limit = opts.get("max_age") or config.getoption("ssetape_max_age", "")
    if limit and cassette.exists():
        mode = _check_age(item, cassette, str(limit), mode)
    if mode == RecordMode.ONCE and cassette.exists():
        mode = _check_failed(cassette, mode)
    speed = opts.get("speed")
    session = TapeSession(
        cassette,
        confdir=Path(os.path.expanduser(config.getoption("ssetape_confdir"))),
        record_mode=mode,
        speed=float(config.getoption("ssetape_speed") if speed is None else speed),
        ignore_fields=tuple(opts.get("ignore_fields", ())),
        match_host=bool(opts.get("match_host", True)),
        allow_gaps=bool(opts.get("allow_gaps", False)),
        redact_fields=tuple(opts.get("redact_fields", ())),
        redact_headers=tuple(opts.get("redact_headers", ())),
        profiles=_profiles(opts.get("profiles", {})),
        run_id=config.stash[_RUN_ID],
        ssetape_bin=config.getoption("ssetape_bin"),
        # What it records is grouped per test (cut as a header's name would be).
        session=session_of(item.nodeid) or "",
        faults=[opts["faults"]] if isinstance(opts.get("faults"), str) else opts.get("faults", ()),
    )
    if not session.replaying:
        session.redaction_key = _redaction_key(config)
    return session


def _check_age(item: pytest.Item, cassette: Path, limit: str, mode: str) -> str:
    """The record mode for a cassette older than ``limit`` (once and new_episodes re-record
    it, as if it were absent), noting it for the report."""
    import datetime as dt

    from ssetape.testing.age import (
        PROPERTY,
        exchange_requests,
        read_lines,
        recorded_dates,
        stale,
    )

    rerecord = mode != RecordMode.NONE
    again = item.config.stash.setdefault(_STALE, set())
    if rerecord and cassette in again:
        # Another test sharing it re-recorded it: record too (recordings of a run add up),
        # or the cassette would hold only that test's recordings.
        return RecordMode.ALL.value
    now = dt.datetime.now(dt.UTC)
    dates = recorded_dates(read_lines(cassette))
    if not dates and exchange_requests(read_lines(cassette)):
        import warnings

        from ssetape.matching import one_line

        warnings.warn(
            one_line(f"ssetape: {cassette}: no recording in it is dated (no started_at, no "
                     f"response Date header): its age is unknown to --ssetape-max-age {limit}, "
                     "so it is kept as it is"),
            stacklevel=1,
        )  # fmt: skip
    found = stale(str(cassette), dates, limit, now, rerecord=rerecord)
    if found is None:
        return mode
    item.user_properties.append((PROPERTY["stale"], json.dumps(asdict(found))))
    if rerecord:
        again.add(cassette)
    return RecordMode.ALL.value if rerecord else mode


def _check_failed(cassette: Path, mode: str) -> str:
    """``once`` over a cassette of nothing but failed recordings (the upstream was down when
    it was recorded) records it again, as if it were absent, and says so: replaying it
    could only ever fail."""
    import warnings

    from ssetape.matching import one_line
    from ssetape.testing.age import failed_only, read_lines

    failed = failed_only(read_lines(cassette))
    if not failed:
        return mode
    warnings.warn(
        one_line(f"ssetape: {cassette} holds only failed recordings ({'; '.join(failed[:3])}): "
                 "re-recording it (record mode once)"),
        stacklevel=1,
    )  # fmt: skip
    return RecordMode.ALL.value


def _gather(item: pytest.Item, session: TapeSession) -> None:
    """What the end-of-session report needs from this test, in its user_properties (they
    reach the xdist controller with the teardown report)."""
    from ssetape.testing.age import PROPERTY

    config = item.config
    drift = config.getoption("ssetape_drift") or config.getoption("ssetape_drift_json")
    if drift:
        found = [d.as_dict() for d in session.drift(item.nodeid)]
        if found:
            item.user_properties.append((PROPERTY["drift"], json.dumps(found)))
    if not drift and not config.getoption("ssetape_max_age"):
        return  # no report of orphans: nothing to add to a JUnit XML's properties
    # new_episodes rewrites the cassette: its lines are no longer the ones served.
    replayed = session.replaying and not session.record_mode.forwards_misses
    served = {"cassette": str(session.cassette), "replayed": replayed,
              "served": session.served_lines()}  # fmt: skip
    item.user_properties.append((PROPERTY["served"], json.dumps(served)))


@pytest.fixture
def ssetape(request: pytest.FixtureRequest) -> Iterator[TapeSession]:
    """This test's cassette behind a proxy: ``base_url(upstream)``, ``proxy_url``, ``ca_file``."""
    item = request.node
    problems = _problems()
    try:
        session = _session(item)
    except problems as e:
        pytest.fail(f"ssetape: {e}", pytrace=False)
    try:
        session.start()
    except problems as e:
        session.replaying = True  # nothing recorded: close must not write a cassette
        session.close()
        pytest.fail(f"ssetape: {e}", pytrace=False)
    item.stash[_SESSION] = session
    try:
        yield session
    finally:
        del item.stash[_SESSION]
        try:
            session.close()
        except problems as e:
            pytest.fail(f"ssetape: {e}", pytrace=False)
        if session.changes:
            changed = {"cassette": str(session.cassette), "changes": session.changes}
            item.user_properties.append(("ssetape_rerecorded", json.dumps(changed)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    session = item.stash.get(_SESSION, None)
    if call.when != "call" or session is None:
        return report
    _gather(item, session)
    text = session.explain()
    if text:
        if report.passed:
            # The test swallowed the 404 (or retried past it), or was served a recording
            # that misses events: either way it did not test the real stream.
            report.outcome = "failed"
            report.longrepr = text
        else:
            report.sections.append(("ssetape", text))
    if item.config.getoption("ssetape_strict") and report.passed:
        _strict(report, session)
    return report


def _strict(report: pytest.TestReport, session: TapeSession) -> None:
    """--ssetape-strict: a passing test whose streams carry findings fails, listing them."""
    from ssetape.testing.stream_checks import findings_report

    try:
        text = findings_report(session.exchanges())
    except _problems() as e:
        text = f"ssetape (--ssetape-strict): could not read the test's streams: {e}"
    if text:
        report.outcome = "failed"
        report.longrepr = text
