"""Throughput of ssetape.framing.sse.SseParser on realistic LLM streams.

Run with ``python bench/bench_parser.py``; prints a markdown table of events/s and MB/s for
OpenAI- and Anthropic-style streams delivered one event per chunk, in 64 KiB chunks and in
7-byte chunks. Takes about 10 s.
"""

import json
import random
import sys
import time
from collections.abc import Callable

from ssetape.framing.sse import SseParser

# Token-sized deltas, some of them multi-byte, as models stream them.
WORDS = ["the", "quick", "fox", "jumps", "over", "lazy", "dog", "tokens", "API", "🙂", "café", "."]

# Shared and virtual machines have phases of slowdown; many short runs, interleaved across the
# scenarios and keeping each one's best, give far steadier numbers than a few long runs. Sized
# so that the whole script takes about 10 s.
EVENTS_PER_STREAM = 10_000
REPEATS = 11


def openai_stream(n: int, rng: random.Random) -> list[bytes]:
    """``data: {...}\\n\\n`` chat completion chunks of ~175 bytes, ending with ``[DONE]``."""
    events = []
    for _ in range(n - 1):
        chunk = {
            "id": "chatcmpl-AbC123",
            "object": "chat.completion.chunk",
            "created": 1730000000,
            "model": "gpt-4o",
            "choices": [
                {"index": 0, "delta": {"content": " " + rng.choice(WORDS)}, "finish_reason": None}
            ],
        }
        text = json.dumps(chunk, separators=(",", ":"), ensure_ascii=False)
        events.append(f"data: {text}\n\n".encode())
    events.append(b"data: [DONE]\n\n")
    return events


def anthropic_stream(n: int, rng: random.Random) -> list[bytes]:
    """``event: x\\ndata: {...}\\n\\n`` messages-API events, mostly text deltas with pings."""
    events = []
    for i in range(n):
        if i % 50 == 49:
            events.append(b'event: ping\ndata: {"type": "ping"}\n\n')
            continue
        delta = {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": " " + rng.choice(WORDS)},
        }
        text = json.dumps(delta, separators=(",", ":"), ensure_ascii=False)
        events.append(f"event: content_block_delta\ndata: {text}\n\n".encode())
    return events


def rechunk(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def run(chunks: list[bytes]) -> int:
    parser = SseParser()
    feed = parser.feed
    count = 0
    for chunk in chunks:
        count += len(feed(chunk))
    return count + len(parser.close())


def main() -> None:
    rng = random.Random(1234)
    streams: dict[str, Callable[[int, random.Random], list[bytes]]] = {
        "OpenAI": openai_stream,
        "Anthropic": anthropic_stream,
    }
    deliveries: dict[str, Callable[[list[bytes]], list[bytes]]] = {
        "one event per chunk": lambda events: events,
        "64 KiB chunks": lambda events: rechunk(b"".join(events), 64 * 1024),
        "7-byte chunks": lambda events: rechunk(b"".join(events), 7),
    }
    # (stream, delivery, events, bytes, chunks)
    scenarios: list[tuple[str, str, int, int, list[bytes]]] = []
    for stream_name, make in streams.items():
        events = make(EVENTS_PER_STREAM, rng)
        size = sum(map(len, events))
        for delivery_name, deliver in deliveries.items():
            scenarios.append((stream_name, delivery_name, len(events), size, deliver(events)))

    best = [float("inf")] * len(scenarios)
    for _ in range(REPEATS):
        for i, (_, _, count, _, chunks) in enumerate(scenarios):
            start = time.perf_counter()
            got = run(chunks)
            best[i] = min(best[i], time.perf_counter() - start)
            if got != count:
                raise SystemExit(f"parser returned {got} events, expected {count}")

    print(f"Python {sys.version.split()[0]}, {EVENTS_PER_STREAM} events/stream, best of {REPEATS}")
    print()
    print("| stream | delivery | avg event (B) | chunks | events/s | MB/s |")
    print("|---|---|---:|---:|---:|---:|")
    for (stream_name, delivery_name, count, size, chunks), seconds in zip(
        scenarios, best, strict=True
    ):
        print(
            f"| {stream_name} | {delivery_name} | {size / count:.0f} | {len(chunks)} "
            f"| {count / seconds:,.0f} | {size / seconds / 1e6:.1f} |"
        )


if __name__ == "__main__":
    main()
