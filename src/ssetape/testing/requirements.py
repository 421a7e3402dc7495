"""What the pytest plugin needs to replay, for a test environment that must not hold mitmproxy.

On Python 3.11 the newest SDKs (on httpx2, h11>=0.16) cannot install beside mitmproxy 11
(h11<=0.14). Such a test environment installs ssetape without its dependencies and then these:

    pip install --no-deps ssetape
    python -m ssetape.testing.requirements > ssetape-plugin.txt
    pip install -r ssetape-plugin.txt

Replay runs in the test process and needs no mitmproxy; recording runs the ``ssetape`` named by
``--ssetape-bin`` / ``$SSETAPE_BIN`` (installed apart, e.g. with pipx). Only the standard
library is used here: nothing else may be installed yet.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import requires

__all__ = ["plugin_requirements"]

# The proxy's: what a test environment without mitmproxy leaves out.
PROXY_ONLY = frozenset({"mitmproxy"})


def plugin_requirements() -> list[str]:
    """ssetape's own requirements (no extras) but the proxy's, as pip takes them."""
    out = []
    for req in requires("ssetape") or []:
        if re.search(r"\bextra\s*==", req):
            continue
        name = re.split(r"[\s<>=!~;\[(]", req, maxsplit=1)[0]
        if name.lower() not in PROXY_ONLY:
            out.append(req)
    return out


def main() -> None:
    sys.stdout.write("".join(f"{req}\n" for req in plugin_requirements()))


if __name__ == "__main__":
    main()
