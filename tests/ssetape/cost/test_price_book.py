"""PriceBook: rates by date, a price data file, and "no price" that never reads as zero."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import genai_prices
import orjson
import pytest

from ssetape.cost.price import format_usd, price_line, to_nusd
from ssetape.cost.price_book import PriceBook, PriceDataError, PriceQuery

# A provider with rates that change on 2026-06-01, and an OpenAI whose prices are made up:
# priced from this file, a call must cost what the file says, not what the library ships.
PRICES = [
    {
        "id": "acme", "name": "Acme", "api_pattern": r"https://api\.acme\.test",
        "models": [{
            "id": "acme-1", "match": {"starts_with": "acme-1"},
            "prices": [
                {"prices": {"input_mtok": 1, "output_mtok": 2, "cache_read_mtok": 0.5}},
                {"constraint": {"start_date": "2026-06-01"},
                 "prices": {"input_mtok": 3, "output_mtok": 6, "cache_read_mtok": 1.5}},
            ],
        }],
    },
    {
        "id": "openai", "name": "OpenAI", "api_pattern": r"https://api\.openai\.com",
        "model_match": {"starts_with": "gpt-"},
        "models": [{"id": "gpt-4o", "match": {"starts_with": "gpt-4o"},
                    "prices": {"input_mtok": 100, "output_mtok": 200}}],
    },
]  # fmt: skip
MTOK = 1_000_000
BEFORE = dt.datetime(2026, 5, 31, 23, 59, 59, tzinfo=dt.UTC)
AFTER = dt.datetime(2026, 6, 1, 0, 0, 1, tzinfo=dt.UTC)


@pytest.fixture
def price_file(tmp_path: Path) -> Path:
    path = tmp_path / "data.json"
    path.write_bytes(orjson.dumps(PRICES))
    return path


def query(model: str, host: str, at: dt.datetime, **counts: int) -> PriceQuery:
    return PriceQuery("chat_completions", model, "https", host, 443, at, **counts)  # type: ignore[arg-type]


def test_a_call_is_priced_at_the_rates_of_its_day(price_file: Path) -> None:
    book = PriceBook.from_file(price_file)
    counts = {"input_tokens": MTOK, "output_tokens": MTOK, "cache_read_tokens": MTOK // 2}
    before = book.price(query("acme-1", "api.acme.test", BEFORE, **counts))
    after = book.price(query("acme-1", "api.acme.test", AFTER, **counts))
    # Half the input read from the cache: 0.5 M at the input rate, 0.5 M at the cache rate.
    assert format_usd(before.nusd) == "$2.750000" and format_usd(after.nusd) == "$8.250000"
    assert (after.provider, after.model, after.note) == ("acme", "acme-1", None)
    assert after.data == f"data.json sha256:{before.data.split(':')[1]}" and "sha256:" in after.data


def test_the_file_is_the_price_not_the_librarys(price_file: Path) -> None:
    at = dt.datetime(2025, 6, 1, tzinfo=dt.UTC)
    q = query("gpt-4o-2024-08-06", "api.openai.com", at, input_tokens=1000, output_tokens=1000)
    from_file = PriceBook.from_file(price_file).price(q)
    # 1,000 tokens in at $100/M and 1,000 out at $200/M: $0.3.
    assert from_file.nusd == 300_000_000
    bundled = PriceBook.bundled()
    assert bundled.version == f"genai-prices {genai_prices.__version__}"
    own = genai_prices.calc_price(
        genai_prices.Usage(input_tokens=1000, output_tokens=1000),
        "gpt-4o-2024-08-06",
        provider_api_url="https://api.openai.com/",
        genai_request_timestamp=at,
    )
    assert bundled.price(q).nusd == to_nusd(own.total_price) != from_file.nusd


@pytest.mark.parametrize(
    ("q", "why"),
    [
        (query("acme-9", "api.acme.test", AFTER, input_tokens=5), "not in data.json"),
        (query("mystery", "127.0.0.1", AFTER, input_tokens=5), "model mystery unknown"),
        (query("acme-1", "api.acme.test", AFTER), "no usage reported"),
        (query("", "api.acme.test", AFTER, output_tokens=5), "no model reported"),
    ],
)
def test_what_cannot_be_priced_has_no_price_and_says_why(
    price_file: Path, q: PriceQuery, why: str
) -> None:
    price = PriceBook.from_file(price_file).price(q)
    assert price.nusd is None and why in (price.note or "")
    line = price_line(price.nusd, provider=price.provider, model=price.model,
                      note=price.note, data=price.data)  # fmt: skip
    assert line.startswith("no price: ") and "$" not in line


def test_an_unknown_host_is_priced_at_the_makers_rates_and_says_so(price_file: Path) -> None:
    price = PriceBook.from_file(price_file).price(
        query("gpt-4o-mini", "127.0.0.1", AFTER, input_tokens=MTOK, output_tokens=0)
    )
    assert (price.nusd, price.provider) == (100 * 10**9, "openai")
    assert price.note == "openai's rates (by model: host unknown)"


def test_a_bedrock_call_through_any_host_is_priced_at_aws_rates() -> None:
    """Bedrock's model ids are AWS's: a call that reached Bedrock through a host genai-prices
    does not know (a gateway, ssetape's own replay) is priced as AWS bills it, and says so."""
    at = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
    model = "us.anthropic.claude-3-7-sonnet-20250219-v1:0"
    book = PriceBook.bundled()
    on_aws = book.price(PriceQuery("bedrock_converse", model, "https",
                                   "bedrock-runtime.us-east-1.amazonaws.com", 443, at,
                                   input_tokens=1000, output_tokens=100, vendor="aws"))  # fmt: skip
    local = book.price(PriceQuery("bedrock_converse", model, "http", "gateway.internal",
                                  8080, at, input_tokens=1000, output_tokens=100,
                                  vendor="aws"))  # fmt: skip
    assert on_aws.nusd is not None and local.nusd == on_aws.nusd
    assert (local.provider, local.note) == ("aws", "aws's rates (by API: host unknown)")


def test_anthropic_input_gets_its_cache_counts_back() -> None:
    """Anthropic's input_tokens leave cache reads and writes out; genai-prices' own extractor
    adds them back, and so must the price."""
    usage = {"input_tokens": 10, "cache_read_input_tokens": 2000,
             "cache_creation_input_tokens": 500, "output_tokens": 40}  # fmt: skip
    at = dt.datetime(2025, 6, 1, tzinfo=dt.UTC)
    model = "claude-3-5-sonnet-20241022"
    provider = genai_prices.data_snapshot.get_snapshot().find_provider(None, "anthropic", None)
    _, own_usage = provider.extract_usage({"model": model, "usage": usage})
    own = genai_prices.calc_price(own_usage, model, provider_id="anthropic",
                                  genai_request_timestamp=at)  # fmt: skip
    q = PriceQuery("messages", model, "https", "api.anthropic.com", 443, at, input_tokens=10,
                   output_tokens=40, cache_read_tokens=2000, cache_write_tokens=500,
                   input_excludes_cache=True)  # fmt: skip
    assert PriceBook.bundled().price(q).nusd == to_nusd(own.total_price)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b'{"not": "a list"}', "not genai-prices data"),
        (b"\xff\xfe garbage", "not genai-prices data"),
        (b"[]", "no providers in it"),
    ],
)
def test_a_file_that_is_not_price_data_is_a_one_line_error(
    tmp_path: Path, content: bytes, said: str
) -> None:
    path = tmp_path / "prices.json"
    path.write_bytes(content)
    with pytest.raises(PriceDataError) as e:
        PriceBook.from_file(path)
    assert said in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(PriceDataError, match="No such file"):
        PriceBook.from_file(tmp_path / "missing.json")


@pytest.mark.parametrize(
    ("nusd", "shown"),
    [(None, "no price"), (0, "$0.000000"), (1, "<$0.000001"), (7_250_000, "$0.007250"),
     (1_234_567_890_123, "$1,234.567890"), (2_750_000_000, "$2.750000")],
)  # fmt: skip
def test_prices_are_written_for_people(nusd: int | None, shown: str) -> None:
    assert format_usd(nusd) == shown
