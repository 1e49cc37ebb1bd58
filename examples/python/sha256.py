"""SHA-256 of messages on any device with alk.kernel: the twin of examples/sha256.cpp, with the
same bodies (examples/sha256/*.inc, raw strings shared by both).

    python3 examples/python/sha256.py [--device D] [MESSAGE ...]   (stdin lines when none)
"""
import os
import struct
import sys

import alk

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sha256")


def text(name):
    """The text inside one of the R"alk(...)alk" files."""
    s = open(os.path.join(HERE, name)).read()
    return s[s.index('R"alk(') + 6:s.rindex(')alk"')]


def kernel():
    bodies = {lang: text("body.%s.inc" % ext) for lang, ext in
              (("cpp", "cpp"), ("cuda", "cu"), ("glsl", "glsl"), ("wgsl", "wgsl"))}
    helpers = {lang: text("helpers.%s.inc" % ext) for lang, ext in
               (("cpp", "cpp"), ("cuda", "cu"), ("glsl", "glsl"), ("wgsl", "wgsl"))}
    return alk.kernel("sha256", inputs=[("words", alk.int32, 2), ("blocks", alk.int32, 1)],
                      output=("digest", alk.int32, 2), output_shape=lambda shapes, attrs: [shapes[1][0], 8],
                      invocations=lambda shapes, attrs: shapes[1][0], helpers=helpers, **bodies)


def pad(messages):
    """Each message padded (FIPS 180-4, 5.1.1) into big-endian words, rows of the longest."""
    blocks = [(len(m) + 8) // 64 + 1 for m in messages]
    width = 16 * max(blocks + [1])
    words = []
    for m, b in zip(messages, blocks):
        padded = m + b"\x80" + b"\0" * (64 * b - len(m) - 9) + struct.pack(">Q", 8 * len(m))
        row = list(struct.unpack(">%di" % (len(padded) // 4), padded))
        words += row + [0] * (width - len(row))
    return words, blocks, width


def hex_digests(messages, device="cpu"):
    if not messages:
        return []
    words, blocks, width = pad(messages)
    w = alk.tensor(words, dtype=alk.int32).reshape(len(messages), width).to(device)
    b = alk.tensor(blocks, dtype=alk.int32).to(device)
    digest = kernel()(w, b).tolist()
    return ["".join("%08x" % (v & 0xFFFFFFFF) for v in row) for row in digest]


if __name__ == "__main__":
    args, device = sys.argv[1:], "cpu"
    if len(args) >= 2 and args[0] == "--device":
        device, args = args[1], args[2:]
    msgs = [a.encode() for a in args] if args else [line.rstrip(b"\n") for line in sys.stdin.buffer]
    print("\n".join(hex_digests(msgs, device)))
