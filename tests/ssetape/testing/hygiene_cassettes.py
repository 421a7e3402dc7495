"""Cassettes written line by line for the drift and age tests, and pytest run on them.

A cassette here is what the plugin would have recorded from a JSON API (one exchange line per
recording, format 2), with its date set where a test needs it in the past.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from ssetape.matching import canonical_request, fingerprint

UPSTREAM = "https://api.example.com"
HEADER = {"ssetape_cassette": 2, "redact_fields": []}


def exchange(
    body: dict[str, Any] | None,
    *,
    method: str = "POST",
    path: str = "/v1/chat/completions",
    answer: str = "hello",
    started_at: dt.datetime | None = None,
    date: str | None = None,
) -> dict[str, Any]:
    """One recording's exchange line: ``body`` asked, ``answer`` answered."""
    raw = orjson.dumps(body) if body is not None else None
    canon = canonical_request(method, "api.example.com", path, "", raw)
    headers = [["content-type", "application/json"]]
    if date is not None:
        headers.append(["date", date])
    line: dict[str, Any] = {
        "kind": "exchange", "method": method, "scheme": "https", "host": "api.example.com",
        "port": 443, "path": path, "query": "", "http_version": "HTTP/1.1",
        "request_headers": [["content-type", "application/json"]],
        "request_body": raw.decode() if raw is not None else None,
        "fingerprint": fingerprint(canon), "status": 200, "reason": "OK",
        "response_headers": headers,
        "response_body": json.dumps({"answer": answer}), "is_stream": False,
        "state": "completed", "error": None, "ttfb_us": 1000, "duration_us": 2000,
    }  # fmt: skip
    if started_at is not None:
        line["started_at"] = started_at.isoformat()
    return line


def write_cassette(path: Path, exchanges: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [HEADER, *exchanges]
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def chat(content: str, user: str = "u1") -> dict[str, Any]:
    return {"model": "m", "user": user, "messages": [{"role": "user", "content": content}]}


def run_pytest(where: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """pytest in a process of its own (as a user runs it, xdist included), in ``where``."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
         "-o", "addopts=", "--rootdir", str(where), *args],
        cwd=where, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
