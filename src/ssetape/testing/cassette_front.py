"""The pytest plugin's replay server: a cassette served in-process, without mitmproxy.

Reverse mode (a test's ``base_url``) binds one upstream per server. Forward mode (a test's
``proxy_url``) puts a mitmproxy child in front (:mod:`ssetape.testing.cassette_forwarder`)
that re-targets every request here and names the original host and request time in headers.
"""

from __future__ import annotations

import contextlib

from ssetape.replay.direct_front import DirectFront
from ssetape.vocabulary import Header

__all__ = ["CassetteFront"]


class CassetteFront(DirectFront):
    def origin(self, headers: dict[bytes, bytes], t0: float) -> tuple[str, float]:
        if self.host:
            return self.host, t0
        # Behind the forwarding proxy: it measured t0 and knows the host.
        host = headers.get(Header.HOST.raw, b"").decode("latin-1")
        with contextlib.suppress(ValueError):
            t0 = float(headers.get(Header.T0.raw, b"") or t0)
        return host, t0
