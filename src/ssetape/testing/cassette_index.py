"""The replay index for cassettes: misses are kept for the test report.

(Matching ignores which key masked a secret for every index: see redactor.unmask.)
"""

from __future__ import annotations

import threading
from typing import Any

from ssetape.replay.request_index import Miss, ReplayIndex


class CassetteIndex(ReplayIndex):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.misses: list[Miss] = []
        self._miss_lock = threading.Lock()

    def lookup(
        self,
        method: str,
        host: str,
        full_path: str,
        body: bytes | None,
        *,
        may_query: bool = True,
    ) -> int | Miss | None:
        found = super().lookup(method, host, full_path, body, may_query=may_query)
        if isinstance(found, Miss):
            with self._miss_lock:
                self.misses.append(found)
        return found
