"""How recorded strings become HTML: escaped, always, and laid out in one page frame.

Every helper here escapes what it is given (text and attribute values alike); the only way to
put markup into a page is :class:`Markup`, made from strings written here, never from a
recording.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlencode

from ssetape.views.timeline import fmt_us

__all__ = [
    "TEXT_SHOWN",
    "Markup",
    "cut",
    "el",
    "esc",
    "id_of",
    "join",
    "link",
    "ms",
    "page",
    "query",
]

# Characters no page should carry even escaped: C0/C1 controls but tab and newline, and the
# bidirectional overrides that show text in another order than it is.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


class Markup(str):
    """HTML made here: written into a page as it is."""

    __slots__ = ()

    def __add__(self, other: str) -> Markup:
        # What is added is escaped unless it is Markup too: ``el(...) + el(...)`` stays HTML.
        return Markup(str.__add__(self, esc(other)))


def esc(value: object) -> Markup:
    """``value`` as text in HTML (None as nothing), quotes escaped too."""
    if isinstance(value, Markup):
        return value
    if value is None:
        return Markup("")
    return Markup(html.escape(_CONTROL.sub("\ufffd", str(value)), quote=True))


def el(tag: str, *body: object, **attrs: object) -> Markup:
    """One element: attribute names with ``_`` spelled ``-`` (``class_`` is ``class``), values
    and text escaped; a False or None attribute is left out, True is written bare."""
    at = []
    for k, v in attrs.items():
        if v is None or v is False:
            continue
        name = k.rstrip("_").replace("_", "-")
        at.append(f" {name}" if v is True else f' {name}="{esc(v)}"')
    return Markup(f"<{tag}{''.join(at)}>{''.join(esc(b) for b in body)}</{tag}>")


def join(parts: Iterable[object]) -> Markup:
    return Markup("".join(esc(p) for p in parts))


def link(href: str, *body: object, **attrs: object) -> Markup:
    return el("a", *body, href=href, **attrs)


def query(params: Mapping[str, str | int | None]) -> str:
    """A URL query string of the set parameters, ``?`` included ('' when none is set)."""
    kept = {k: str(v) for k, v in params.items() if v not in (None, "")}
    return f"?{urlencode(kept)}" if kept else ""


def ms(us: int | None) -> str:
    return "" if us is None else fmt_us(us)


def page(title: str, *body: object, script: bool = True) -> str:
    """A whole document: the package's stylesheet and script, nothing from elsewhere."""
    head = join(
        [
            Markup('<meta charset="utf-8">'),
            Markup('<meta name="viewport" content="width=device-width, initial-scale=1">'),
            Markup('<meta name="referrer" content="no-referrer">'),
            el("title", title),
            Markup('<link rel="stylesheet" href="/static/app.css">'),
            # The package's own icon: else the browser asks for /favicon.ico, a 404 each page.
            Markup('<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">'),
            Markup('<script src="/static/app.js" defer></script>') if script else "",
        ]
    )
    nav = el(
        "nav",
        link("/", "ssetape", class_="home"),
        link("/", "exchanges"),
        link("/stats", "stats"),
        link("/compare", "compare"),
        el("span", "read-only viewer", class_="dim"),
    )
    return (
        f"<!doctype html>\n<html lang=en><head>{head}</head><body>{nav}{join(body)}</body></html>"
    )


def id_of(text: str) -> int | None:
    """A row id or seq from a URL, or None: ASCII digits only (``"²".isdigit()`` is true and
    ``int`` refuses it) and short enough for a 64-bit column."""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 19 else None


TEXT_SHOWN = 200_000  # characters of a recorded text (output, reasoning, tool calls) on a page


def cut(text: str, limit: int = TEXT_SHOWN) -> str:
    """A recorded text as a page shows it: cut at ``limit`` characters, saying how long it is."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} … cut at {limit:,} of {len(text):,} characters"
