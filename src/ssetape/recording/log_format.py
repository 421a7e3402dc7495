"""One format for every log line of a command that runs a proxy (record, replay, run).

A line carries its date (UTC, to the millisecond), its level and the name of the instance
that wrote it, so that the logs of a fleet can be read side by side::

    2026-12-06T10:11:12.345Z WARNING ssetape[api-1] ssetape: recording fell behind: ...

With ``--log-format json`` each line is one JSON object instead: ``ts``, ``level``, ``name``
(the instance), ``logger``, ``msg``, and the structured counts a line has (the loss lines of
``recording.loss_log`` give theirs in ``extra={"ssetape": {...}}``), ``client`` for
mitmproxy's lines about one client, ``exc`` for a traceback. The instance's name is
``--name``, else ``HOST:PORT`` of the listening proxy (:func:`instance_name`).
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
import sys
from typing import Any

import orjson

from ssetape.vocabulary import LogFormat

__all__ = ["FIELDS", "LogLines", "instance_name", "log_to"]

# The structured counts of a line: a dict under this attribute of its record.
FIELDS = "ssetape"
_BASE = ("ts", "level", "name", "logger", "msg")


def instance_name(port: int, name: str = "") -> str:
    """``name`` if given, else this host's name and the port the proxy listens on (the host
    alone while a port 0 is not chosen yet)."""
    if name:
        return name
    host = socket.gethostname()
    return f"{host}:{port}" if port else host


class LogLines(logging.Formatter):
    """The formatter of both formats; ``name`` may change while it is in use (a port 0 is
    known once the proxy listens)."""

    def __init__(self, name: str, form: LogFormat = LogFormat.TEXT) -> None:
        super().__init__()
        self.name = name
        self.form = form

    def format(self, record: logging.LogRecord) -> str:
        ts = dt.datetime.fromtimestamp(record.created, dt.UTC)
        stamp = ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        msg = record.getMessage()
        client = _address(getattr(record, "client", None))  # mitmproxy's, for one client
        exc = self.formatException(record.exc_info) if record.exc_info else None
        if self.form is LogFormat.JSON:
            obj: dict[str, Any] = {
                "ts": stamp,
                "level": record.levelname,
                "name": self.name,
                "logger": record.name,
                "msg": msg,
            }
            fields = getattr(record, FIELDS, None)
            if isinstance(fields, dict):
                obj.update({k: v for k, v in fields.items() if k not in _BASE})
            if client is not None:
                obj["client"] = client
            if exc is not None:
                obj["exc"] = exc
            return orjson.dumps(obj, default=str).decode()
        line = f"{stamp} {record.levelname} ssetape[{self.name}] "
        line += f"[{client}] {msg}" if client is not None else msg
        return f"{line}\n{exc}" if exc is not None else line


def _address(client: object) -> str | None:
    if isinstance(client, tuple) and len(client) >= 2:
        host, port = client[0], client[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return None if client is None else str(client)


def log_to(formatter: LogLines, level: int = logging.INFO) -> None:
    """Where mitmproxy does not log (a replay without it): every line to standard error, as
    ``logging.basicConfig`` would, in this format, from ``level`` on."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
