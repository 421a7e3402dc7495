"""ssetape: record and replay streaming LLM API traffic with the timing of every event.

What a library user may import from here (a test pins the list)::

    from ssetape import SseParser, Analyzer, Cassette, Store, RecordMode

Names load on first use: importing ``ssetape`` (which every pytest run in an environment with
ssetape does, for its plugin) costs nothing until one of them is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

__all__ = [
    "Analysis",
    "Analyzer",
    "Cassette",
    "CassetteError",
    "ExchangeState",
    "Finding",
    "ImportReport",
    "Outcome",
    "RecordMode",
    "Simulator",
    "SseEvent",
    "SseParser",
    "Store",
    "StoreError",
    "__version__",
]

# name -> the module that defines it
_HOMES = {
    "Analysis": "ssetape.analysis.analyzer",
    "Analyzer": "ssetape.analysis.analyzer",
    "Cassette": "ssetape.cassettes.cassette",
    "CassetteError": "ssetape.cassettes.codec",
    "ExchangeState": "ssetape.vocabulary",
    "Finding": "ssetape.analysis.findings",
    "ImportReport": "ssetape.cassettes.format",
    "Outcome": "ssetape.vocabulary",
    "RecordMode": "ssetape.vocabulary",
    "Simulator": "ssetape.simulator.simulator",
    "SseEvent": "ssetape.framing.sse",
    "SseParser": "ssetape.framing.sse",
    "Store": "ssetape.storage.store",
    "StoreError": "ssetape.storage.store",
}

if TYPE_CHECKING:
    from ssetape.analysis.analyzer import Analysis, Analyzer
    from ssetape.analysis.findings import Finding
    from ssetape.cassettes.cassette import Cassette
    from ssetape.cassettes.codec import CassetteError
    from ssetape.cassettes.format import ImportReport
    from ssetape.framing.sse import SseEvent, SseParser
    from ssetape.simulator.simulator import Simulator
    from ssetape.storage.store import Store, StoreError
    from ssetape.vocabulary import ExchangeState, Outcome, RecordMode


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'ssetape' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
