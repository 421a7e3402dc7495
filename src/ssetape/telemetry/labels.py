"""The label values of one stored exchange, bounded: a metric's series must stay few.

Models: the first ``top`` distinct ones seen keep their name, every later one is ``other``
(a recorder that sees a new model a minute would otherwise grow a series a minute, for
ever). Hosts: only when asked (``ssetape_metrics_hosts``), as ``server_address`` and
``server_port``.
"""

from __future__ import annotations

import threading

from ssetape.recording.protocol import StoredExchange
from ssetape.telemetry.conventions import error_type, operation_name, provider_name

__all__ = ["OTHER", "Labels"]

OTHER = "other"
GENAI = ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model"]
SERVER = ["server_address", "server_port"]


class Labels:
    def __init__(self, *, top: int, hosts: bool) -> None:
        self.top = top
        self.hosts = hosts
        self._models: set[str] = set()
        self._lock = threading.Lock()

    def model(self, name: str | None) -> str:
        if not name:
            return ""
        with self._lock:
            if name in self._models:
                return name
            if len(self._models) < self.top:
                self._models.add(name)
                return name
        return OTHER

    def names(self, *extra: str) -> list[str]:
        """The label names of a GenAI histogram, with ``extra`` ones after the conventions'."""
        return GENAI + list(extra) + (SERVER if self.hosts else [])

    def genai(self, x: StoredExchange, *extra: str) -> tuple[str, ...]:
        """The values for :meth:`names`: ``extra`` are the values of its extra labels."""
        base = (operation_name(x.api), provider_name(x.api, x.host), self.model(x.model))
        server = (x.host, str(x.port or "")) if self.hosts else ()
        return (*base, *extra, *server)

    @staticmethod
    def error(x: StoredExchange) -> str:
        return error_type(x)
