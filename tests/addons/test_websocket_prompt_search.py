"""Search by prompt finds a WebSocket session by what its client asked (issue 42).

A Realtime session's prompt is in its client frames (the instructions of `session.update`,
the text of `conversation.item.create`), not in an upgrade request's body, which has none:
`ssetape list --grep` finds the session by them, as it finds an HTTP request by its body."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import openai
import orjson
import pytest

from ssetape.simulator.simulator import Simulator
from ssetape.storage.queries import Queries
from ssetape.storage.store import Store
from tests.conftest import Proc
from tests.ssetape.cli.test_prompt_search import ssetape

INSTRUCTIONS = "You are the clerk of the Quillfeather archive."
ASKED = "Where is invoice QX-4711 filed?"


@pytest.fixture
def realtime() -> Iterator[str]:
    with Simulator().serve_in_thread() as sim:
        yield sim.url


def asked(proc: Proc, text: str | None) -> None:
    """A Realtime session that asks ``text`` (none: asks nothing) and reads the answer."""
    client = openai.OpenAI(base_url=proc.url + "/v1", api_key="sk-search", max_retries=0)
    with client.realtime.connect(model="ok") as conn:
        conn.recv()  # session.created
        if text is not None:
            conn.session.update(session={"type": "realtime", "instructions": INSTRUCTIONS})
            conn.conversation.item.create(
                item={
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": text}],
                }
            )
        conn.response.create()
        for event in conn:
            if event.type in ("response.done", "error"):
                break


def grep(proc: Proc, word: str) -> list[tuple[int, str]]:
    """`ssetape list --grep word`: the ids found, and where the word was."""
    rows = orjson.loads(ssetape("list", "--db", proc.db, "--grep", word, "--json"))
    return [(r["id"], r["match"]["in"]) for r in rows]


def test_list_grep_finds_a_session_by_its_client_frames(
    realtime: str, ssetape_proc: Callable[..., Proc]
) -> None:
    proc = ssetape_proc("record", "--mode", f"reverse:{realtime}")
    asked(proc, ASKED)
    asked(proc, None)
    assert proc.stop() == 0
    with Store.open(proc.db, create=False) as store:
        rows = Queries(store).exchanges()
    by_text = {x.id: x.request_text for x in rows}
    (found,) = [i for i, text in by_text.items() if text]
    assert by_text[found] == f"{INSTRUCTIONS}\n{ASKED}"
    assert grep(proc, "QX-4711") == [(found, "prompt")]
    assert grep(proc, "Quillfeather") == [(found, "prompt")]
