"""The options of the recorder (:class:`ssetape.addons.recorder.Recorder`), declared in one
place: the store, the session, retention and the bounds of what one exchange may hold."""

from __future__ import annotations

from collections.abc import Sequence

from mitmproxy.addonmanager import Loader

from ssetape.addons.options import (
    add_price_data_option,
    add_retention_options,
    add_session_option,
    add_store_options,
)
from ssetape.addons.response_body import add_response_body_option
from ssetape.analysis.profiles import DEFAULT_PROFILE, profile_names
from ssetape.recording.capture import MAX_DECODED, MAX_EVENT

__all__ = ["add_recorder_options"]


def add_recorder_options(loader: Loader) -> None:
    add_store_options(loader)
    add_session_option(loader)
    loader.add_option(
        "ssetape_record",
        bool,
        True,
        "Record exchanges that pass through the proxy (off: pass traffic through untouched).",
    )
    loader.add_option(
        "ssetape_store_timeout",
        str,
        "5",
        "Seconds a store write may take (a lock wait, a silent database or network) before "
        "it counts as failed and is retried; what is queued meanwhile is kept up to "
        "ssetape_max_pending rows.",
    )
    add_retention_options(loader)
    loader.add_option(
        "ssetape_max_event",
        int,
        MAX_EVENT,
        "Bytes of one SSE event that are kept; a larger one is not stored (the exchange "
        "says where) and the client still gets every byte.",
    )
    loader.add_option(
        "ssetape_max_decoded",
        int,
        MAX_DECODED,
        "Bytes a content-encoded stream is decoded to for its events; past that only its "
        "wire bytes are stored (a small compressed body can inflate to gigabytes).",
    )
    add_response_body_option(loader)
    loader.add_option(
        "ssetape_profile",
        Sequence[str],
        [],
        "HOST=NAME: read this host's streams under that provider profile (one of "
        f"{', '.join(profile_names())}; '.example.com' names a whole domain). Hosts not "
        f"named here get the profile that names them, else '{DEFAULT_PROFILE}'.",
    )
    add_price_data_option(loader)
    loader.add_option(
        "ssetape_max_pending",
        int,
        1_000_000,
        "Rows kept in memory while the store is slow or unavailable; beyond that new "
        "events are dropped (and counted) instead of growing the proxy's memory.",
    )
