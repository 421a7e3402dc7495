"""A text search's match, as the terminal shows it: where, and the text around it.

The snippet is recorded text (a prompt, an output, a path): in the terminal it goes through
:func:`ssetape.views.escape.cell` like every recorded string, its line breaks and tabs as
spaces so that each match stays one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from rich.text import Text

from ssetape.storage.text_matches import TextMatch
from ssetape.views.escape import cell

__all__ = ["match_lines"]

_BREAKS = re.compile(r"[\t\n\r]+")


def _flat(text: str) -> str:
    return _BREAKS.sub(" ", text)


def match_lines(ids: Iterable[int], matches: Mapping[int, TextMatch]) -> list[Text]:
    """One line per exchange of ``ids`` that has a match: ``#12 prompt: …text…``, the text
    searched for in bold."""
    lines = []
    for xid in ids:
        m = matches.get(xid)
        if m is None:
            continue
        line = Text(f"#{xid} ", style="bold")
        line.append(f"{m.where.value}: ", style="dim")
        line.append(cell(_flat(m.before)))
        line.append(cell(_flat(m.hit), "bold"))
        line.append(cell(_flat(m.after)))
        lines.append(line)
    return lines
