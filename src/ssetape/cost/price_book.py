"""genai-prices' price data, and the price of one exchange from it.

The data is the library's own (bundled with its release) or a file in its format (the
``data.json`` its updater downloads), for users who need today's prices offline. Python 3.11
gets genai-prices 0.0.x (0.0.62 on needs httpx2, which mitmproxy 11 excludes); 3.12 and up get
0.2. Both answer the calls made here; only reading a file differs.

Which provider's rates: the one the exchange's URL belongs to (api.openai.com, Azure,
OpenRouter, ...); for a host genai-prices does not know (a local gateway, a test upstream),
the provider whose API it spoke (Bedrock's: AWS), else the provider its profile names, else
the provider that makes the model, and the stored
``price_provider`` says which.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib
import threading
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import orjson

from ssetape.cost.price import Price, to_nusd
from ssetape.http_fields import origin

__all__ = ["MAX_PRICE_DATA", "LazyPriceBook", "PriceBook", "PriceDataError", "PriceQuery"]

# genai-prices' whole data.json is a few MB; a file far past that is not one.
MAX_PRICE_DATA = 64 * 1024 * 1024
_PROVIDERS_KEPT = 4096


class PriceDataError(ValueError):
    """A --price-data file that cannot be used: the one-line reason."""


@dataclass(frozen=True, slots=True)
class PriceQuery:
    """What an exchange is priced from: its summary columns."""

    api: str | None
    model: str | None
    scheme: str
    host: str
    port: int
    started_at: dt.datetime
    profile: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    web_searches: int | None = None
    # Facts about the API (its ApiRules, which the analysis fills in: cost sits below
    # analysis and knows no API): whose rates a call is priced at when its host is unknown,
    # and whether its input count leaves cache reads and writes out (Anthropic's).
    vendor: str | None = None
    input_excludes_cache: bool = False

    @property
    def url(self) -> str:
        return f"{origin(self.scheme, self.host, self.port)}/"


class PriceBook:
    """Prices exchanges from one set of price data, named by ``version``."""

    def __init__(self, snapshot: Any, version: str) -> None:
        self._snapshot = snapshot
        self.version = version
        self._keys = _usage_keys()
        # (url, api, profile, model) -> provider: the same few answer nearly every call, and
        # genai-prices 0.0.x matches each URL against every provider's pattern.
        self._providers: dict[tuple[str, str | None, str | None, str], tuple[str | None, str]] = {}

    @classmethod
    def bundled(cls) -> PriceBook:
        from genai_prices import __version__, data_snapshot

        return cls(data_snapshot.get_snapshot(), f"genai-prices {__version__}")

    @classmethod
    def from_file(cls, path: str | Path) -> PriceBook:
        """A genai-prices ``data.json``; PriceDataError when it is not one."""
        from genai_prices import data_snapshot

        p = Path(path)
        try:
            with p.open("rb") as f:
                raw = f.read(MAX_PRICE_DATA + 1)
        except OSError as e:
            raise PriceDataError(f"price data {p}: {e.strerror or e}") from None
        if len(raw) > MAX_PRICE_DATA:
            raise PriceDataError(f"price data {p}: over {MAX_PRICE_DATA} bytes")
        try:
            providers = _parse(raw)
        except Exception as e:  # pydantic's ValidationError, bad JSON: one line either way
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise PriceDataError(f"price data {p}: not genai-prices data ({first})") from None
        if not providers:
            raise PriceDataError(f"price data {p}: no providers in it")
        snapshot = data_snapshot.DataSnapshot(providers=providers, from_auto_update=False)
        digest = hashlib.sha256(raw).hexdigest()[:12]
        return cls(snapshot, f"{p.name[:60]} sha256:{digest}")

    @classmethod
    def load(cls, path: str | Path | None) -> PriceBook:
        return cls.bundled() if path is None else cls.from_file(path)

    def price(self, q: PriceQuery) -> Price:
        """The exchange's price at the rates in force at its start, or why there is none."""
        if q.input_tokens is None and q.output_tokens is None:
            return Price(None, "no usage reported", data=self.version)
        if not q.model:
            return Price(None, "no model reported", data=self.version)
        provider_id, basis = self._provider(q)
        if provider_id is None:
            return Price(
                None, f"model {q.model[:200]} unknown to {self.version}", data=self.version
            )
        try:
            calc = self._snapshot.calc(
                self._usage(q), q.model, provider_id, None, q.started_at.astimezone(dt.UTC)
            )
        except LookupError:
            note = f"model {q.model[:200]} not in {self.version}'s {provider_id} prices"
            return Price(None, note, provider=provider_id, data=self.version)
        except (ValueError, ArithmeticError) as e:  # a count the data cannot price
            return Price(None, f"cannot price: {str(e)[:200]}", provider_id, data=self.version)
        notes = [] if basis == "host" else [f"{provider_id}'s rates ({basis}: host unknown)"]
        if q.input_tokens is None or q.output_tokens is None:
            notes.append(f"{'input' if q.input_tokens is None else 'output'} tokens not reported")
        return Price(
            to_nusd(calc.total_price),
            "; ".join(notes) or None,
            provider=calc.provider.id,
            model=calc.model.id,
            data=self.version,
        )

    def _provider(self, q: PriceQuery) -> tuple[str | None, str]:
        """The provider whose rates apply, and how it was chosen."""
        key = (q.url, q.api, q.profile, q.model or "")
        found = self._providers.get(key)
        if found is None:
            if len(self._providers) >= _PROVIDERS_KEPT:  # bounded: hosts and models are input
                self._providers.clear()
            found = self._providers[key] = self._find_provider(q)
        return found

    def _find_provider(self, q: PriceQuery) -> tuple[str | None, str]:
        snap = self._snapshot
        vendor = q.vendor
        for ref, pid, url, basis in (
            (q.model, None, q.url, "host"),
            (q.model, vendor, None, "by API"),
            (q.model, q.profile, None, "profile"),
            (q.model, None, None, "by model"),
        ):
            if pid is None and basis in ("by API", "profile"):
                continue
            try:
                return str(snap.find_provider(ref, pid, url).id), basis
            except LookupError:
                continue
        return None, ""

    def _usage(self, q: PriceQuery) -> Any:
        """genai-prices' Usage, whose input count holds cache reads and writes (as OpenAI's
        and Gemini's do; Anthropic's leaves them out, so they are added back)."""
        from genai_prices import Usage

        inp = q.input_tokens
        if inp is not None and q.input_excludes_cache:
            inp += (q.cache_read_tokens or 0) + (q.cache_write_tokens or 0)
        counts: dict[str, int | None] = {
            "input_tokens": inp,
            "output_tokens": q.output_tokens,
            "cache_read_tokens": q.cache_read_tokens,
            "cache_write_tokens": q.cache_write_tokens,
        }
        # Counts older genai-prices releases do not take (nor price) are left to them.
        for key, value in (("output_reasoning_tokens", q.reasoning_tokens),
                           ("web_searches", q.web_searches)):  # fmt: skip
            if key in self._keys:
                counts[key] = value
        return Usage(**{k: v for k, v in counts.items() if v is not None})


def _parse(raw: bytes) -> list[Any]:
    """A data.json's providers, with whichever reader this genai-prices release has (looked
    up by name: each release's type stubs know only its own)."""
    types = importlib.import_module("genai_prices.types")
    from_raw = getattr(types, "_providers_from_raw", None)  # 0.1 and up
    if from_raw is not None:
        return list(from_raw(orjson.loads(raw)))
    schema = importlib.import_module("genai_prices.data").providers_schema  # 0.0.x
    return list(schema.validate_json(raw))


@cache
def _usage_keys() -> frozenset[str]:
    """The optional usage counts this genai-prices release takes (0.0.x: neither)."""
    from genai_prices import Usage

    taken = set()
    for key in ("output_reasoning_tokens", "web_searches"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                Usage(**{key: 0})
            except (TypeError, UserWarning):
                continue
        taken.add(key)
    return frozenset(taken)


class LazyPriceBook:
    """A PriceBook loaded on first use (importing genai-prices' data takes a few hundred ms),
    once, from any thread; ``preload`` starts that in the background."""

    def __init__(self, path: str | Path | None = None) -> None:
        self._path = path
        self._book: PriceBook | None = None
        self._lock = threading.Lock()

    def __call__(self) -> PriceBook:
        with self._lock:
            if self._book is None:
                self._book = PriceBook.load(self._path)
            return self._book

    def preload(self) -> None:
        threading.Thread(target=self, name="ssetape-prices", daemon=True).start()
