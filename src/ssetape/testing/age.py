"""Cassette hygiene: recordings older than a limit, recordings no test replays, and the
end-of-session report that gathers them (and the drift of :mod:`ssetape.testing.drift`).

A recording's date is its ``started_at`` when its cassette line carries one (format 1 wrote
it, and a cassette may be given one), else its response's ``Date`` header (what the server
said when it answered), else unknown: an undated recording is never called stale.

The pytest plugin puts what each test found in ``item.user_properties`` (JSON strings), and
:class:`HygieneReport` reads them from the teardown reports: under pytest-xdist those reach the
controller, which prints the report once for all workers.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from ssetape.matching import one_line
from ssetape.testing.drift import RequestDrift, render_drift

__all__ = [
    "PROPERTY",
    "HygieneReport",
    "Stale",
    "describe_age",
    "exchange_requests",
    "failed_only",
    "parse_age",
    "read_lines",
    "recorded_dates",
    "stale",
]

# The user_properties names a test's findings travel under.
PROPERTY = {
    "drift": "ssetape_drift",
    "served": "ssetape_served",
    "stale": "ssetape_stale",
    "rerecorded": "ssetape_rerecorded",
}
_AGE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> dt.timedelta:
    """``90d``, ``12h``, ``2w``, ``30m``, ``45s``: ValueError in one line otherwise."""
    m = _AGE.fullmatch(text)
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(
            f"max age {one_line(repr(text))}: use a positive number and a unit "
            "(s, m, h, d or w), e.g. 90d"
        )
    return dt.timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


def describe_age(seconds: float, limit: str) -> str:
    """An age in the unit the max age was written in, so the two read side by side:
    ``36h old (max 12h)``, ``5s old (max 1s)``; one decimal below ten of it."""
    m = _AGE.fullmatch(limit)
    unit = m.group(2) if m is not None else "d"
    value = seconds / _UNITS[unit]
    return f"{value:.1f}{unit}" if value < 10 else f"{value:,.0f}{unit}"


def read_lines(path: Path) -> Iterator[bytes]:
    """A cassette's lines, one at a time (OSError if it cannot be read)."""
    with path.open("rb") as f:
        yield from f


def _exchange(raw: bytes) -> dict[str, Any] | None:
    if b'"exchange"' not in raw:  # events and chunks: most lines, not parsed
        return None
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) and obj.get("kind") == "exchange" else None


def _date(obj: dict[str, Any]) -> dt.datetime | None:
    when: dt.datetime | None = None
    started = obj.get("started_at")
    if isinstance(started, str):
        try:
            when = dt.datetime.fromisoformat(started)
        except ValueError:
            when = None
    if when is None:
        for pair in obj.get("response_headers") or ():
            if isinstance(pair, list) and len(pair) == 2 and str(pair[0]).lower() == "date":
                try:
                    when = parsedate_to_datetime(str(pair[1]))
                except (TypeError, ValueError):
                    when = None
                break
    if when is not None and when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when


def recorded_dates(lines: Iterable[bytes]) -> list[dt.datetime]:
    """When each dated recording of a cassette (its lines) was made."""
    out = []
    for raw in lines:
        obj = _exchange(raw)
        when = _date(obj) if obj is not None else None
        if when is not None:
            out.append(when)
    return out


def failed_only(lines: Iterable[bytes]) -> list[str]:
    """``line N: why`` of each recording of a cassette (its lines) that failed, when every
    recording in it did (none holds a response); else an empty list."""
    failed = []
    for number, raw in enumerate(lines, 1):
        obj = _exchange(raw)
        if obj is None:
            continue
        if obj.get("status") is not None:
            return []
        failed.append(f"line {number}: {obj.get('error') or obj.get('state')}")
    return failed


def exchange_requests(lines: Iterable[bytes]) -> dict[int, str]:
    """Cassette line number -> "METHOD host/path" (one printable line) of every recording."""
    out = {}
    for number, raw in enumerate(lines, 1):
        obj = _exchange(raw)
        if obj is not None:
            what = f"{obj.get('method')} {obj.get('host')}{obj.get('path')}"
            out[number] = one_line(what)[:200]
    return out


@dataclass(frozen=True, slots=True)
class Stale:
    cassette: str
    recorded: str  # the oldest recording's date, ISO 8601
    age_s: float
    limit: str  # as the user wrote it
    rerecorded: bool  # the record mode re-records it (once, new_episodes: as if absent)

    def describe(self) -> str:
        what = "re-recorded" if self.rerecorded else "replayed as it is"
        return (
            f"{one_line(self.cassette)}: recorded {self.recorded[:10]}, "
            f"{describe_age(self.age_s, self.limit)} old (max {one_line(self.limit.strip())}), "
            f"{what}"
        )


def stale(
    cassette: str, dates: list[dt.datetime], limit: str, now: dt.datetime, *, rerecord: bool
) -> Stale | None:
    """The cassette's finding if its oldest recording is older than ``limit``."""
    if not dates:
        return None
    oldest = min(dates)
    age = (now - oldest).total_seconds()
    if age <= parse_age(limit).total_seconds():
        return None
    return Stale(cassette, oldest.isoformat(), age, limit, rerecord)


# -- the end of the session -----------------------------------------------------------


def _subset(config: pytest.Config, deselected: int, exitstatus: int | pytest.ExitCode) -> str:
    """Why this run may not have used every cassette ('' if it did)."""
    if deselected:
        return f"{deselected} test(s) deselected"
    for option, flag in (("keyword", "-k"), ("markexpr", "-m"), ("deselect", "--deselect"),
                         ("lf", "--last-failed")):  # fmt: skip
        if config.getoption(option, None):
            return f"tests selected with {flag}"
    if any("::" in str(a) for a in config.args):
        return "tests selected by node id"
    if exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR):
        return "the run was interrupted"
    if config.getoption("maxfail", 0) and exitstatus == pytest.ExitCode.TESTS_FAILED:
        return "the run may have stopped at --maxfail"
    return ""


class HygieneReport:
    """Gathers the tests' findings (on the controller under xdist) and reports them."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.drift: list[RequestDrift] = []
        self.stale: dict[str, Stale] = {}
        self.rerecorded: dict[str, str] = {}  # cassette -> what changed
        self.served: dict[str, set[int]] = {}  # cassette -> lines replayed
        self.recorded_any = False
        self.modules: set[Path] = set()
        self.deselected = 0

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected += len(items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Teardown only: its report carries every property the test gathered, once.
        if report.when != "teardown":
            return
        self.modules.add(self.config.rootpath / report.location[0])
        for name, value in report.user_properties:
            if not str(name).startswith("ssetape_") or not isinstance(value, str):
                continue
            doc = json.loads(value)
            if name == PROPERTY["drift"]:
                self.drift += [RequestDrift.from_dict(d) for d in doc]
            elif name == PROPERTY["stale"]:
                self.stale[doc["cassette"]] = Stale(**doc)
            elif name == PROPERTY["rerecorded"]:
                self.rerecorded[doc["cassette"]] = doc["changes"]
            elif name == PROPERTY["served"]:
                self.recorded_any |= not doc["replayed"]
                self.served.setdefault(doc["cassette"], set()).update(doc["served"])

    def orphans(self) -> dict[str, list[tuple[int, str]]]:
        """Per cassette, the recordings (line, request) no test of the run was served: of the
        cassettes tests used, and of those in ``cassettes/<module>/`` no test used at all."""
        cassettes = set(self.served)
        for module in self.modules:
            folder = module.parent / "cassettes" / module.stem
            if folder.is_dir():
                cassettes.update(str(p) for p in folder.glob("*.jsonl"))
        out = {}
        for cassette in sorted(cassettes):
            try:
                requests = exchange_requests(read_lines(Path(cassette)))
            except OSError:
                continue
            served = self.served.get(cassette, set())
            unused = [(n, r) for n, r in sorted(requests.items()) if n not in served]
            if unused:
                out[cassette] = unused
        return out

    def pytest_terminal_summary(
        self,
        terminalreporter: Any,
        exitstatus: int | pytest.ExitCode,
        config: pytest.Config,
    ) -> None:
        tr = terminalreporter
        want_drift = bool(
            config.getoption("ssetape_drift") or config.getoption("ssetape_drift_json")
        )
        want_orphans = want_drift or bool(config.getoption("ssetape_max_age"))
        doc: dict[str, Any] = {"drift": [d.as_dict() for d in self.drift]}
        if config.getoption("ssetape_drift") and self.drift:
            tr.section("ssetape drift: requests that differ from their recordings")
            for line in render_drift(self.drift):
                tr.write_line(line)
        if self.stale:
            tr.section("ssetape: cassettes older than the max age")
            for s in self.stale.values():
                tr.write_line(s.describe())
        doc["stale"] = [asdict(s) for s in self.stale.values()]
        if self.rerecorded:
            tr.section("ssetape: re-recorded cassettes that changed beyond timing")
            for cassette, changes in sorted(self.rerecorded.items()):
                tr.write_line(f"{one_line(cassette)}: {changes}")
        doc["rerecorded"] = [{"cassette": c, "changes": w} for c, w in self.rerecorded.items()]
        doc["orphans"], doc["orphans_not_listed"] = None, None
        if want_orphans:
            why = _subset(config, self.deselected, exitstatus)
            if not why and self.recorded_any:
                why = "some tests recorded instead of replaying"
            if why:
                doc["orphans_not_listed"] = why
                tr.write_line(f"ssetape: recordings no test replayed are not listed: {why}")
            else:
                orphans = self.orphans()
                doc["orphans"] = [
                    {"cassette": c, "recordings": [{"line": n, "request": r} for n, r in rows]}
                    for c, rows in orphans.items()
                ]
                if orphans:
                    tr.section("ssetape: recordings no test replayed")
                    for cassette, rows in orphans.items():
                        tr.write_line(f"{one_line(cassette)}:")
                        for n, r in rows:
                            tr.write_line(f"  cassette line {n}: {r}")
        path = config.getoption("ssetape_drift_json")
        if path:
            Path(path).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
            tr.write_line(f"ssetape: drift report written to {path}")
