"""Throughput of ssetape.framing.json_array.JsonArrayParser (Gemini's streamed JSON array), on
ordinary and on bracket-dense data, fed in 64 KiB chunks.

    python -m bench.bench_json_array [--against OLD.py]

``--against`` loads another version of the module from a file (e.g. ``git show
REV:src/ssetape/json_array.py > old.py``) and runs it side by side, with the same elements.
Best of 3 runs per case; ~1 MB per case.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from types import ModuleType

import ssetape.framing.json_array

SIZE = 1_000_000


def nests(depth: int) -> bytes:
    nest = b"[" * depth + b"1" + b"]" * depth
    return b"[" + b",".join([nest] * 200) + b"]"


GEMINI = (
    b'{"candidates": [{"content": {"parts": [{"text": "' + b"hello world " * 20 + b'"}], '
    b'"role": "model"}, "index": 0}], "usageMetadata": {"promptTokenCount": 5}}'
)
CASES = {
    "Gemini-like objects": GEMINI,
    "small elements [1], [2], ...": b"[12345]",
    "elements of depth 1000": b"[" * 1000 + b"]" * 1000,
    "one element of depth 500,000": b"[" * 500_000 + b"]" * 500_000,
    "[] pairs at depth 1": b"[" + b"[]," * 1000 + b"[]]",
    "[1,2] pairs at depth 1": b"[" + b"[1,2]," * 1000 + b"[]]",
    "nests of depth 6 at depth 1": nests(6),
    "nests of depth 40 at depth 1": nests(40),
}


def rate(module: ModuleType, data: bytes, chunk: int = 65536) -> float:
    best = 0.0
    for _ in range(3):
        parser = module.JsonArrayParser()
        t = time.perf_counter()
        for i in range(0, len(data), chunk):
            parser.feed(data[i : i + chunk])
        best = max(best, len(data) / (time.perf_counter() - t) / 1e6)
    return best


def load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("json_array_against", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", help="another json_array.py to run side by side")
    args = ap.parse_args()
    other = load(args.against) if args.against else None
    print("| data | MB/s" + (" | against | ratio |" if other else " |"))
    print("|---|---:" + ("|---:|---:|" if other else "|"))
    for name, element in CASES.items():
        data = b"[" + b",".join([element] * max(1, SIZE // len(element))) + b"]"
        now = rate(ssetape.framing.json_array, data)
        if other is None:
            print(f"| {name} | {now:.1f} |")
        else:
            then = rate(other, data)
            print(f"| {name} | {now:.1f} | {then:.1f} | {now / then:.1f}x |")


if __name__ == "__main__":
    main()
