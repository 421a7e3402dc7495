"""Recorded text made safe to print: no markup read from it, no control character acting.

Everything shown from a recording (model output, headers, paths, event names) comes from the
network. A terminal would act on escape sequences in it (set the title, write the clipboard,
clear the screen) and rich would read ``[bold]`` or ``[/]`` in it as markup, or fail on it.
So recorded strings reach rich only as :class:`rich.text.Text` (never markup), with control
characters shown as visible escapes, and long ones cut to a stated size.
"""

from __future__ import annotations

import re

from rich.text import Text

__all__ = ["abbreviated", "abbreviated_bytes", "cell", "visible"]

# C0 and C1 controls but tab and newline, DEL, and the bidirectional overrides that can make
# a terminal show text in another order than it is.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` with every control character written out (``\\x1b``), as Python would."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def abbreviated(text: str, limit: int) -> str:
    """``text`` cut to ``limit``, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} … ({len(text) - limit:,} more characters; show --full prints them)"


def abbreviated_bytes(raw: bytes, limit: int) -> str:
    """Recorded bytes as text, cut to ``limit`` bytes, saying how many were left out."""
    head = raw[:limit].decode("utf-8", "replace")
    if len(raw) <= limit:
        return head
    return f"{head} … ({len(raw) - limit:,} more bytes; show --full prints them)"


def cell(text: str | None, style: str = "") -> Text:
    """A table cell or a line of recorded text: plain, visible, never markup."""
    return Text(visible(text or ""), style=style)
