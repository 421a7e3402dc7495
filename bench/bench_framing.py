"""What cutting a stream into frames costs the recording process, beside the peers.

    python -m bench.bench_framing [--rounds 20] [--chunk 1024]

The bodies are the real captures of tests/data/real_streams: Amazon Bedrock's AWS event
streams (10, binary frames with CRCs) and Ollama's NDJSON (2), each repeated to a few MB and
fed in chunks of ``--chunk`` bytes, as the proxy hands them over.

- AWS event stream: ssetape's ``EventStreamParser`` (frames, both CRCs checked, headers
  decoded, each frame's exact bytes kept) beside botocore's ``EventStreamBuffer`` (what boto3
  itself runs on the same bytes: frames, CRCs, headers).
- NDJSON: ssetape's ``NdjsonParser`` (each line's exact bytes and its text) beside what an
  httpx client runs to read the same lines (``Response.iter_lines``: decode, then split).

Printed: MB/s for each and ssetape / peer as a ratio of times (below 1: ssetape is faster).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from botocore.eventstream import EventStreamBuffer  # type: ignore[import-untyped]

from ssetape.framing.eventstream import EventStreamParser
from ssetape.framing.ndjson import NdjsonParser

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "real_streams"
TARGET = 4 << 20  # bytes of body per kind


def _body(suffix: str) -> bytes:
    one = b"".join(p.read_bytes() for p in sorted(CORPUS.glob(f"*.{suffix}")))
    return one * max(1, TARGET // len(one))


def _chunks(body: bytes, size: int) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)]


def _ours_frames(chunks: Iterable[bytes]) -> int:
    parser = EventStreamParser()
    n = sum(len(parser.feed(c)) for c in chunks) + len(parser.close())
    assert not parser.problems
    return n


def _botocore_frames(chunks: Iterable[bytes]) -> int:
    buffer = EventStreamBuffer()
    n = 0
    for c in chunks:
        buffer.add_data(c)
        n += sum(1 for _ in buffer)
    return n


def _ours_lines(chunks: Iterable[bytes]) -> int:
    parser = NdjsonParser()
    return sum(len(parser.feed(c)) for c in chunks) + len(parser.close())


def _httpx_lines(chunks: Iterable[bytes]) -> int:
    """What ``httpx.Response.iter_lines()`` runs: text decoding, then line splitting."""
    from httpx._decoders import LineDecoder, TextDecoder

    text, lines = TextDecoder(), LineDecoder()
    n = sum(len(lines.decode(text.decode(c))) for c in chunks)
    return n + len(lines.decode(text.flush())) + len(lines.flush())


def _timed(fn: Callable[[list[bytes]], int], chunks: list[bytes], rounds: int) -> tuple[float, int]:
    """Seconds per pass (best of ``rounds``) and the frames counted."""
    best, count = float("inf"), 0
    for _ in range(rounds):
        t = time.perf_counter()
        count = fn(chunks)
        best = min(best, time.perf_counter() - t)
    return best, count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--chunk", type=int, default=1024)
    args = ap.parse_args()
    print(f"{'kind':<28}{'MB':>7}{'frames':>9}{'ssetape MB/s':>14}{'peer MB/s':>11}{'ratio':>8}")
    for kind, suffix, ours, peer in (
        ("AWS event stream / botocore", "eventstream", _ours_frames, _botocore_frames),
        ("NDJSON / httpx iter_lines", "ndjson", _ours_lines, _httpx_lines),
    ):
        body = _body(suffix)
        chunks = _chunks(body, args.chunk)
        t_ours, n_ours = _timed(ours, chunks, args.rounds)
        t_peer, n_peer = _timed(peer, chunks, args.rounds)
        assert n_ours == n_peer, (kind, n_ours, n_peer)
        mb = len(body) / 1e6
        print(f"{kind:<28}{mb:>7.1f}{n_ours:>9,}{mb / t_ours:>14.0f}{mb / t_peer:>11.0f}"
              f"{t_ours / t_peer:>8.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
