#!/usr/bin/env python3
"""Writes tests/fixtures/safetensors/reference.safetensors byte by byte from the
safetensors spec (https://github.com/huggingface/safetensors#format), using only the
standard library, so alk's reader is checked against an independent writer.

Layout rules (the same ones alk's save_safetensors follows, so alk's own save of these
tensors must be byte-identical; tests/io/test_safetensors.cpp checks that):
  - 8-byte little-endian u64 N, then N bytes of UTF-8 JSON header, then the data buffer;
  - header JSON with no whitespace: json.dumps(separators=(",", ":"), ensure_ascii=False);
  - "__metadata__" first (keys sorted), then tensors in the order listed here, each
    {"dtype", "shape", "data_offsets"} in that key order;
  - header padded with spaces to a multiple of 8 bytes;
  - tensor data contiguous, row-major, little-endian, in the same order, no gaps.

Usage: python3 scripts/gen_safetensors_fixture.py [OUT]
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "tests", "fixtures", "safetensors", "reference.safetensors")

# (name, dtype, shape, struct format char, values). F16/BF16 are given as raw u16 bit patterns.
TENSORS = [
    ("weight", "F32", [2, 3], "f", [1.5, -2.0, 0.25, 1024.0, -0.0, 3.0]),
    ("bias", "F64", [3], "d", [0.1, -1e300, 5e-324]),
    ("half", "F16", [4], "H", [0x3C00, 0xC000, 0x7C00, 0x0001]),  # 1, -2, inf, smallest subnormal
    ("brain", "BF16", [2, 2], "H", [0x3F80, 0xC040, 0xFF80, 0x0001]),  # 1, -3, -inf, smallest subnormal
    ("ids", "I64", [2], "q", [-1, 1 << 40]),
    ("counts", "I32", [3], "i", [7, -8, 2147483647]),
    ("pixels", "U8", [2, 2], "B", [0, 255, 17, 128]),
    ("mask", "BOOL", [3], "B", [1, 0, 1]),
    ("scalar", "F32", [], "f", [42.0]),
    ("empty", "F32", [0, 4], "f", []),
]
METADATA = {"format": "pt", "note": "h\u00e9llo \"quoted\"\n\ttab"}


def build():
    header = {}
    if METADATA:
        header["__metadata__"] = {k: METADATA[k] for k in sorted(METADATA)}
    data = b""
    for name, dtype, shape, fmt, values in TENSORS:
        count = 1
        for d in shape:
            count *= d
        assert count == len(values), name
        blob = struct.pack("<%d%s" % (count, fmt), *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    blob = build()
    with open(out, "wb") as f:
        f.write(blob)
    print("wrote %s (%d bytes)" % (out, len(blob)))


if __name__ == "__main__":
    main()
