"""Cost as a user meets it: calls made with the official SDKs through `ssetape record`, then
`list`, `show`, `stats --by model|session` and `reindex --price-data` asked about them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pytest

from ssetape.cost.price import format_usd
from ssetape.simulator.simulator import Simulator
from tests.conftest import start_ssetape
from tests.ssetape.cli.test_audit import cli, ssetape_json
from tests.ssetape.cli.test_cli import assert_one_line_error, run

SESSION = "x-ssetape-session"
# genai-prices knows these (the simulator answers any model name); not "mystery-sim".
PRICED = ("gpt-4o-mini", "gpt-4.1-mini", "claude-3-5-haiku-20241022")


def _record(url: str) -> None:
    oai = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0,
                        default_headers={SESSION: "agent-a"})  # fmt: skip
    for model in ("gpt-4o-mini", "mystery-sim", "gpt-4o-mini-sim-error"):
        try:
            for _ in oai.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], stream=True,
                stream_options={"include_usage": True},
            ):  # fmt: skip
                pass
        except openai.APIError:
            pass  # the mid-stream error chunk
    with oai.responses.stream(model="gpt-4.1-mini", input="hi") as rs:
        for _ in rs:
            pass
    ant = anthropic.Anthropic(base_url=url, api_key="not-a-key", max_retries=0,
                              default_headers={SESSION: "agent-b"})  # fmt: skip
    with ant.messages.stream(model=PRICED[2], max_tokens=50,
                             messages=[{"role": "user", "content": "hi"}]) as ms:  # fmt: skip
        ms.until_done()


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("cost")
    path = str(tmp / "tape.db")
    with Simulator(speed=4).serve_in_thread() as sim:
        proc = start_ssetape(["record", "--mode", f"reverse:{sim.url}", "--db", path, "--port",
                              "0", "--confdir", str(tmp / "conf")], db=path)  # fmt: skip
        try:
            _record(proc.url)
        finally:
            assert proc.stop() == 0, proc.log.decode()
    yield path


def _exchanges(db: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = ssetape_json("list", "--db", db, "--limit", "100")
    assert len(rows) == 5
    return rows


def test_each_call_has_its_price_or_says_why_not(db: str) -> None:
    by_model = {x["model"]: x for x in _exchanges(db)}
    for model in PRICED:
        cost = by_model[model]["cost"]
        assert cost["usd"] > 0 and cost["nusd"] > 0, cost
        assert cost["price_data"].startswith("genai-prices ")
        # 127.0.0.1 is no provider's host: the maker's rates, and the price says so.
        assert "host unknown" in cost["note"]
    mystery = by_model["mystery-sim"]["cost"]
    assert mystery["usd"] is None and "unknown to genai-prices" in mystery["note"]
    table = cli("list", "--db", db).stdout
    assert "no price" in table and format_usd(by_model[PRICED[0]]["cost"]["nusd"]) in table
    assert "$0 " not in table  # an unknown model is not free


def test_show_names_the_rates_and_the_price_data(db: str) -> None:
    x = next(x for x in _exchanges(db) if x["model"] == PRICED[2])
    out = " ".join(cli("show", "--db", db, str(x["id"])).stdout.split())
    assert f"cost {format_usd(x['cost']['nusd'])} at anthropic claude-3-5-haiku" in out
    y = next(x for x in _exchanges(db) if x["model"] == "mystery-sim")
    out = " ".join(cli("show", "--db", db, str(y["id"])).stdout.split())
    assert "cost no price: model mystery-sim unknown to genai-prices" in out


@pytest.mark.parametrize("by", ["model", "session"])
def test_stats_groups_add_up_to_their_calls(db: str, by: str) -> None:
    sums: dict[str, int] = defaultdict(int)
    unpriced: dict[str, int] = defaultdict(int)
    for x in _exchanges(db):
        if x["cost"]["nusd"] is None:
            unpriced[x[by]] += 1
        else:
            sums[x[by]] += x["cost"]["nusd"]
    groups = {g["group"]: g for g in ssetape_json("stats", "--db", db, "--by", by)}
    for name, g in groups.items():
        assert g["cost_nusd"] == sums.get(name), name  # None, never 0, where none is priced
        assert g["unpriced"] == unpriced[name]
    assert sum(g["cost_nusd"] or 0 for g in groups.values()) == sum(sums.values())
    [everything] = ssetape_json("stats", "--db", db)
    assert everything["cost_nusd"] == sum(sums.values()) and everything["unpriced"] == 2
    assert groups.get("mystery-sim", {"cost_usd": None})["cost_usd"] is None
    table = cli("stats", "--db", db, "--by", by).stdout
    assert "no price" in table and "$0 " not in table
    if by == "session":  # agent-a's sum leaves out two calls, and says so
        assert "* without the 2 call(s) that have no price" in " ".join(table.split())


def test_reindex_prices_with_a_price_data_file(db: str, tmp_path: Path) -> None:
    prices = [{"id": "openai", "name": "OpenAI", "api_pattern": r"https://api\.openai\.com",
               "model_match": {"starts_with": "gpt-"},
               "models": [{"id": "gpt-4o-mini", "match": {"starts_with": "gpt-4o-mini"},
                           "prices": {"input_mtok": 1000, "output_mtok": 1000}}]}]  # fmt: skip
    copy = tmp_path / "copy.db"
    copy.write_bytes(Path(db).read_bytes())
    data = tmp_path / "today.json"
    data.write_bytes(orjson.dumps(prices))
    r = cli("reindex", "--db", str(copy), "--price-data", str(data))
    assert r.returncode == 0 and "priced with today.json sha256:" in r.stdout, r.stderr
    after = {x["model"]: x["cost"] for x in ssetape_json("list", "--db", str(copy))}
    mini = after["gpt-4o-mini"]
    assert mini["price_data"].startswith("today.json sha256:")
    tokens = next(x for x in _exchanges(db) if x["model"] == "gpt-4o-mini")["usage"]
    assert mini["nusd"] == (tokens["input_tokens"] + tokens["output_tokens"]) * 1000 * 1000
    assert after["claude-3-5-haiku-20241022"]["usd"] is None  # not in that file
    # Back to the library's data: --stale takes what other price data priced.
    assert "reindexed 5 " in cli("reindex", "--db", str(copy), "--stale").stdout
    assert "reindexed 0 " in cli("reindex", "--db", str(copy), "--stale").stdout


def test_a_file_that_is_not_price_data_stops_record_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "prices.json"
    bad.write_text('{"not": "price data"}')
    r = run("record", "--db", str(tmp_path / "t.db"), "--port", "0", "--price-data", str(bad))
    assert_one_line_error(r, "not genai-prices data")
    assert not (tmp_path / "t.db").exists()
