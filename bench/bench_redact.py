"""Request-body redaction cost on the proxy's loop: ``python -m bench.bench_redact``.

Bodies up to INLINE_BODY (64 KiB) are redacted on the event loop when fields are configured;
this prints the time per body for three shapes of request that name no configured field.
"""

from __future__ import annotations

import time

import orjson

from ssetape.redactor import Redactor

BODIES = {
    "chat 49 KiB (5 long messages)": orjson.dumps(
        {"model": "gpt-4o", "messages": [{"role": "user", "content": "word " * 2000}] * 5}
    ),
    "embeddings input 42 KiB (floats)": orjson.dumps({"model": "m", "input": [0.123456789] * 3500}),
    "chat 55 KiB (400 short messages)": orjson.dumps(
        {
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": f"message {i} " * 10} for i in range(400)],
        }
    ),
}


def main() -> None:
    r = Redactor(b"k", fields=["api_key"])
    for name, body in BODIES.items():
        n = 50
        t = time.perf_counter()
        for _ in range(n):
            r.body(body)
        print(f"{name}: {(time.perf_counter() - t) / n * 1e3:.2f} ms per body")


if __name__ == "__main__":
    main()
