"""Debian's real Prometheus scrapes `ssetape record --metrics` while it records 20 streams of
the simulator (completed, failed mid-stream, cut): its query API then counts what `ssetape
stats --json` counts, exactly. The alert rules pass `promtool check rules` and Prometheus
evaluates each of them; every query of the Grafana dashboard runs there and returns data.

Runs when SSETAPE_TEST_PROMETHEUS names a prometheus executable (CI sets it on one Python: the
test runs once), with promtool beside it."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ssetape.simulator.simulator import Simulator
from tests.conftest import SSETAPE, Proc

PROMETHEUS_ENV = "SSETAPE_TEST_PROMETHEUS"
ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs/grafana-dashboard.json"
ALERTS = ROOT / "docs/prometheus-alerts.yml"
ADMIN = re.compile(r"ssetape admin: listening on (http://127\.0\.0\.1:\d+) \([^)]*/metrics\)")
WAIT = 60.0
# What the simulator is asked for: (model, path, how many): 20 streams in all.
STREAMS = [
    ("gpt-4o-sim-plain", "/v1/chat/completions", 8),
    ("gpt-4o-sim-error", "/v1/chat/completions", 4),
    ("gpt-4o-sim-cut", "/v1/chat/completions", 4),
    ("claude-sim-plain", "/v1/messages", 4),
]


def prometheus_executable() -> str:
    found = os.environ.get(PROMETHEUS_ENV)
    if not found:
        pytest.skip(f"{PROMETHEUS_ENV} not set: these tests need Prometheus (/usr/bin/prometheus)")
    if shutil.which(found) is None:
        pytest.skip(f"{PROMETHEUS_ENV}={found} is not an executable (apt-get install prometheus)")
    return found


def promtool(prometheus: str) -> str:
    found = shutil.which("promtool", path=str(Path(prometheus).parent)) or shutil.which("promtool")
    if found is None:
        pytest.skip("no promtool beside prometheus (Debian's prometheus package ships it)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Prometheus:
    url: str
    proc: subprocess.Popen[bytes]

    def query(self, expr: str) -> list[dict[str, Any]]:
        r = httpx.get(self.url + "/api/v1/query", params={"query": expr}, timeout=WAIT)
        body = r.json()
        assert r.status_code == 200 and body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def scalar(self, expr: str) -> float:
        [one] = self.query(expr)
        return float(one["value"][1])

    def rules(self) -> list[dict[str, Any]]:
        body = httpx.get(self.url + "/api/v1/rules", timeout=WAIT).json()
        return [rule for group in body["data"]["groups"] for rule in group["rules"]]

    def by(self, label: str, expr: str) -> dict[str, float]:
        return {r["metric"].get(label, ""): float(r["value"][1]) for r in self.query(expr)}


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[Callable[[str], Prometheus]]:
    executable = prometheus_executable()
    started: list[subprocess.Popen[bytes]] = []

    def start(target: str) -> Prometheus:
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files: [{json.dumps(str(ALERTS))}]\n"
            "scrape_configs:\n  - job_name: ssetape\n"
            f"    static_configs:\n      - targets: [{json.dumps(target)}]\n"
        )
        port = free_port()
        log = (tmp_path / "prometheus.log").open("wb")
        proc = subprocess.Popen(
            [executable, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        started.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + WAIT
        while True:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
            try:
                if httpx.get(url + "/-/ready", timeout=5).status_code == 200:
                    return Prometheus(url, proc)
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "prometheus did not get ready"
            time.sleep(0.2)

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(30)


def metrics_url(proc: Proc) -> str:
    deadline = time.monotonic() + WAIT
    while not (m := ADMIN.search(proc.log.decode())):
        assert time.monotonic() < deadline, proc.log.decode()
        time.sleep(0.05)
    return m.group(1)


def stream(base: str, model: str, path: str, n: int) -> None:
    body: dict[str, Any] = {"model": model, "stream": True, "max_tokens": 30}
    body["messages"] = [{"role": "user", "content": f"metrics {n}"}]
    if path.endswith("/chat/completions"):
        body["stream_options"] = {"include_usage": True}
    try:
        with httpx.stream("POST", base + path, json=body, timeout=WAIT) as r:
            for _ in r.iter_bytes():
                pass
    except httpx.RemoteProtocolError:
        assert "cut" in model  # the simulator cut it, as asked


def stats(db: str, *args: str) -> Any:
    out = subprocess.run(
        [SSETAPE, "stats", "--db", db, "--json", *args], capture_output=True, check=True
    )
    return json.loads(out.stdout)


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def panel_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def test_prometheus_counts_what_stats_counts_and_the_dashboard_and_rules_run(
    sim: Simulator, ssetape_proc: Callable[..., Proc], start_prometheus: Callable[[str], Prometheus]
) -> None:
    checked = subprocess.run(
        [promtool(prometheus_executable()), "check", "rules", str(ALERTS)], capture_output=True
    )
    assert checked.returncode == 0 and b"SUCCESS" in checked.stdout, checked
    proc = ssetape_proc("record", "--mode", f"reverse:{sim.url}", "--metrics", "127.0.0.1:0")
    target = metrics_url(proc).removeprefix("http://")
    prom = start_prometheus(target)
    until(lambda: bool(prom.query('up{job="ssetape"} == 1')), "prometheus scrapes the recorder")
    n = 0
    for model, path, count in STREAMS:
        for _ in range(count):
            stream(proc.url, model, path, n)
            n += 1
            time.sleep(0.1)  # spread over scrapes: the rates have something to see
    assert n == 20
    until(
        lambda: bool(prom.query("sum(ssetape_exchanges_total) == 20")),
        "prometheus sees the 20 exchanges stored",
    )
    runs = stats(proc.db, "--runs")
    until(
        lambda: (
            prom.scalar("sum(ssetape_recorded_events_total)")
            == stats(proc.db, "--runs")["events_recorded"]
        ),
        "the events the run rows count",
    )
    # Every count `ssetape stats --json` shows, from Prometheus' query API.
    [everything] = stats(proc.db)
    assert prom.scalar("sum(ssetape_exchanges_total)") == everything["count"] == 20
    assert prom.scalar('sum(ssetape_exchanges_total{failed="true"})') == everything["failed"]
    tokens = "gen_ai_client_token_usage_tokens_sum"
    assert prom.scalar(f'sum({tokens}{{gen_ai_token_type="input"}})') == everything["input_tokens"]
    assert (
        prom.scalar(f'sum({tokens}{{gen_ai_token_type="output"}})') == everything["output_tokens"]
    )
    assert everything["output_tokens"] > 0
    by_outcome = {g["group"]: g["count"] for g in stats(proc.db, "--by", "outcome")}
    assert prom.by("outcome", "sum by (outcome) (ssetape_exchanges_total)") == by_outcome
    assert set(by_outcome) == {"completed", "error", "cut"}
    by_model = {g["group"]: g["count"] for g in stats(proc.db, "--by", "model")}
    duration = "gen_ai_client_operation_duration_seconds_count"
    model = "gen_ai_request_model"
    assert prom.by(model, f"sum by ({model}) ({duration})") == by_model
    runs = stats(proc.db, "--runs")
    assert prom.scalar("sum(ssetape_recorded_exchanges_total)") == runs["exchanges_recorded"]
    assert prom.scalar("sum(ssetape_lost_events_total)") == runs["events_lost"] == 0
    # The providers by host or API, error.type the outcome of the failed ones.
    assert prom.by("gen_ai_provider_name", f"sum by (gen_ai_provider_name) ({duration})") == {
        "openai": 16,
        "anthropic": 4,
    }
    assert prom.by("error_type", f"sum by (error_type) ({duration})") == {
        "": 8 + 4,
        "error": 4,
        "cut": 4,
    }
    # Each dashboard panel's queries parse and return data; the rules' queries parse.
    for title, expr in panel_queries():
        result = prom.query(expr.replace("$__rate_interval", "5m"))
        assert result, (title, expr)
        assert any(math.isfinite(float(r["value"][1])) for r in result), (title, expr, result)
    # Prometheus loaded the alert rules and evaluates each without an error.
    until(lambda: len(prom.rules()) == 8 and all(r["health"] == "ok" for r in prom.rules()),
          "every alert rule evaluated")  # fmt: skip
    assert proc.stop() == 0, proc.log.decode()
