"""``ssetape_name`` and ``ssetape_log_format``: checked in ``configure`` (and as `--name` by
the command line), so a bad value stops the proxy with one line."""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path

import pytest
from mitmproxy import exceptions

from ssetape.addons.logs import Logs
from ssetape.vocabulary import LogFormat
from tests.conftest import SSETAPE


def test_the_options_are_checked() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from mitmproxy.test import taddons

    logs = Logs()
    with taddons.context(logs) as tctx:
        tctx.configure(logs, ssetape_name="edge-1", ssetape_log_format="json")
        assert (logs.name, logs.lines.form) == ("edge-1", LogFormat.JSON)
        for bad in ("a b", "x" * 65, "a]"):
            with pytest.raises(exceptions.OptionsError, match="ssetape_name: "):
                tctx.configure(logs, ssetape_name=bad)
        with pytest.raises(exceptions.OptionsError, match="ssetape_log_format"):
            tctx.configure(logs, ssetape_log_format="xml")
        assert logs.name == "edge-1"  # a bad value changes nothing
        tctx.configure(logs, ssetape_name="", listen_port=8080)
        assert logs.name.endswith(":8080")  # HOST:PORT


def test_a_bad_name_is_a_usage_error(tmp_path: Path) -> None:
    r = subprocess.run(
        [SSETAPE, "record", "--db", str(tmp_path / "t.db"), "--name", "two words"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "--name" in r.stderr and "no spaces" in r.stderr
