"""ssetape for tests: the pytest plugin (:mod:`ssetape.testing.pytest_plugin`) and the checks
a test makes on its streams (``from ssetape.testing import assert_stream``)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ssetape.testing.stream_checks import (
        assert_completed,
        assert_no_findings,
        assert_no_gap_over,
        assert_stream,
        assert_tool_calls,
        assert_ttft_under,
        assert_usage,
    )  # fmt: skip
    from ssetape.testing.stream_record import StreamEvent, StreamRecord

__all__ = [
    "StreamEvent", "StreamRecord", "assert_completed", "assert_no_findings",
    "assert_no_gap_over", "assert_stream", "assert_tool_calls", "assert_ttft_under",
    "assert_usage",
]  # fmt: skip

# Every pytest run imports this package (for the plugin): the checks load when first named.
_HOME = {"StreamEvent": "stream_record", "StreamRecord": "stream_record"}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'ssetape.testing' has no attribute {name!r}")
    module = importlib.import_module(f"ssetape.testing.{_HOME.get(name, 'stream_checks')}")
    return getattr(module, name)
