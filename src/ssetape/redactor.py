"""Redaction of secrets before anything is written (store, logs, exports, CLI output).

A redacted value becomes ``<redacted:XXXXXXXXXXXX>``: a keyed fingerprint (HMAC-SHA256 with a
per-store random key), so "which key was used" stays answerable and two different keys stay
distinguishable, while the value itself cannot be recovered or brute-forced from a dictionary
without the key.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, urlencode

import orjson

from ssetape.framing.json_spans import NotJson, member_spans

DEFAULT_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "cookie",
        "set-cookie",
        "x-goog-api-key",
        "openai-organization-key",
    }
)
DEFAULT_QUERY_PARAMS = frozenset({"key", "api_key", "api-key", "apikey", "access_token", "token"})

# Browsers cannot set Authorization on a WebSocket: OpenAI's browser clients carry the key as
# a subprotocol token instead (`realtime, openai-insecure-api-key.<key>, openai-beta...`).
SUBPROTOCOL_HEADER = "sec-websocket-protocol"
_KEY_TOKEN = re.compile(r"(?P<name>openai-insecure-api-key\.)(?P<key>[^,\s]+)", re.IGNORECASE)
_AUTH_SCHEME = re.compile(r"^(Bearer|Basic|Token|Digest)\s+", re.IGNORECASE)
_MASK = re.compile(r"<redacted:[0-9a-f]{12}>")
_QUOTED_MASK = re.compile(rb'"<redacted:[0-9a-f]{12}>"')
KEY_FREE_MASK = "<redacted>"
log = logging.getLogger("ssetape.redactor")
_WHOLE_LOGGED: set[str] = set()


def unmask(node: Any) -> Any:
    """``node`` with every mask replaced by one key-free placeholder.

    Masks are keyed per store, so a recording imported from a cassette (masked with the
    recording machine's key) would never match a request masked here. Matching compares
    "a secret was here" instead; which secret it was can never matter for replay.
    """
    if isinstance(node, str):
        return KEY_FREE_MASK if _MASK.fullmatch(node) else node
    if isinstance(node, dict):
        return {k: unmask(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return type(node)(unmask(v) for v in node)
    return node


def check_paths(option: str, paths: Iterable[str]) -> None:
    """ValueError in one line naming ``option`` unless every path is a dotted JSON path."""
    for p in paths:
        if not p.strip() or any(not part for part in p.strip().split(".")):
            raise ValueError(f"{option}: bad JSON path {p!r} (use a.b.c)")


class Redactor:
    """Masks secret headers, query parameters and JSON body fields.

    ``fields`` are JSON paths: a dotted path (``metadata.user_token``) matches exactly that
    path (list items are walked through), a bare name (``api_key``) matches at any depth.
    """

    def __init__(
        self,
        key: bytes,
        *,
        headers: Iterable[str] = (),
        fields: Iterable[str] = (),
        query_params: Iterable[str] = (),
    ) -> None:
        self._key = key
        self.headers = DEFAULT_HEADERS | {h.strip().lower() for h in headers if h.strip()}
        self.query_params = DEFAULT_QUERY_PARAMS | {q.strip().lower() for q in query_params}
        parsed = [tuple(f.strip().split(".")) for f in fields if f.strip()]
        self._names = frozenset(p[0] for p in parsed if len(p) == 1)
        self._paths = frozenset(p for p in parsed if len(p) > 1)
        # Each field's member name as it stands in a body that escapes nothing: a body that
        # holds none of them and is JSON has nothing to mask (see body()).
        # Copied: orjson's output keeps a 4 KiB buffer, so 400k fields would take 1.6 GiB.
        self._needles = tuple({orjson.dumps(p[-1]).decode().encode() for p in parsed})

    def mask(self, value: str | bytes) -> str:
        raw = value.encode() if isinstance(value, str) else value
        digest = hmac.new(self._key, raw, hashlib.sha256).hexdigest()[:12]
        return f"<redacted:{digest}>"

    def header_value(self, name: str, value: str) -> str:
        if name.lower() == SUBPROTOCOL_HEADER:
            return self.subprotocols(value)
        if name.lower() not in self.headers:
            return value
        # Keep the scheme: "Bearer" vs "Basic" is useful and not secret.
        scheme = _AUTH_SCHEME.match(value)
        kept = scheme.group(0) if scheme else ""
        secret = value[len(kept) :]
        # A mask stays as it is (a cassette or store redacted already), never masked again.
        return value if _MASK.fullmatch(secret) else kept + self.mask(secret)

    def subprotocols(self, value: str) -> str:
        """``value`` with the key of each key-carrying token masked; the other tokens (and
        the token's name: which kind of secret it was) stay as sent."""

        def masked(m: re.Match[str]) -> str:
            key = m.group("key")
            return m.group(0) if _MASK.fullmatch(key) else m.group("name") + self.mask(key)

        return _KEY_TOKEN.sub(masked, value)

    def headers_list(self, pairs: Iterable[tuple[str, str]]) -> list[list[str]]:
        return [[name, self.header_value(name, value)] for name, value in pairs]

    def query(self, query: str) -> str:
        if not query:
            return query
        pairs = parse_qsl(query, keep_blank_values=True)
        secret = [k.lower() in self.query_params and not _MASK.fullmatch(v) for k, v in pairs]
        if not any(secret):
            return query  # the exact recorded string
        return urlencode(
            [(k, self.mask(v) if s else v) for (k, v), s in zip(pairs, secret, strict=True)]
        )

    def body(self, content: bytes | None, encoding: str = "") -> bytes | None:
        """Mask configured JSON fields, touching no other byte. Fails closed: a body that is
        compressed or not JSON-shaped, while fields are configured, is masked whole."""
        if not content or not (self._names or self._paths):
            return content
        if encoding.strip().lower() not in ("", "identity"):
            return self._whole(content, f"it is {encoding.strip()}-encoded")
        if self._names_absent(content):
            return content
        try:
            spans = [
                (start, end)
                for path, start, end in member_spans(content)
                if (path[-1] in self._names or path in self._paths)
                and not _QUOTED_MASK.fullmatch(content, start, end)
            ]
        except NotJson as e:
            return self._whole(content, f"it is not JSON ({e})")
        if not spans:
            return content
        out, last = bytearray(), 0
        for start, end in sorted(spans):
            if start < last:
                continue  # inside a value masked already
            out += content[last:start]
            out += b'"' + self.mask(content[start:end]).encode() + b'"'
            last = end
        out += content[last:]
        return bytes(out)

    def _names_absent(self, content: bytes) -> bool:
        """Whether ``content`` is JSON that names none of the fields, found at C speed: the
        span scanner is pure Python (milliseconds for a 50 KB body, on the proxy's loop), and
        most bodies name no configured field. A member name can hide only behind an escape;
        a body that orjson refuses goes to the scanner, which fails closed."""
        if b"\\" in content or any(n in content for n in self._needles):
            return False
        try:
            orjson.loads(content)
        except orjson.JSONDecodeError:
            return False
        return True

    def _whole(self, content: bytes, why: str) -> bytes:
        """The whole body as one mask: fields to redact are configured and cannot be found."""
        key = why.partition(" (")[0]
        if key not in _WHOLE_LOGGED:  # once per kind of body, never its contents
            _WHOLE_LOGGED.add(key)
            log.warning(
                "ssetape: a request body was masked whole because %s, so the fields to "
                "redact cannot be found in it",
                why,
            )
        return orjson.dumps(self.mask(content))
