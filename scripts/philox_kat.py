#!/usr/bin/env python3
"""Philox4x32-10 from the round function in Salmon et al., "Parallel Random Numbers: As Easy
as 1, 2, 3" (SC'11), written from the paper, independent of src/core/philox.h: prints the
known-answer vectors Random123 publishes (kat_vectors) and the values tests/backend/cpu/
test_random.cpp expects, so they can be checked without trusting alk's implementation."""
MASK = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    c, k = list(ctr), list(key)
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & MASK, (p0 >> 32) ^ c[3] ^ k[1], p0 & MASK]
        k = [(k[0] + 0x9E3779B9) & MASK, (k[1] + 0xBB67AE85) & MASK]
    return c


def hexwords(w):
    return " ".join("%08x" % x for x in w)


if __name__ == "__main__":
    # Random123 kat_vectors, philox4x32 10 rounds: counter, key -> expected.
    kat = [([0, 0, 0, 0], [0, 0], "6627e8d5 e169c58d bc57ac4c 9b00dbd8"),
           ([MASK] * 4, [MASK, MASK], "408f276d 41c83b0e a20bc7c6 6d5451fd"),
           ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
            "d16cfe09 94fdcceb 5001e420 24126ea1")]
    for ctr, key, want in kat:
        got = hexwords(philox4x32_10(ctr, key))
        print(got, "ok" if got == want else "MISMATCH, published " + want)
    counter, key = (1 << 32) | 5, 42
    print("alk form counter 2^32+5, key 42:", hexwords(philox4x32_10([counter & MASK, counter >> 32, 0, 0], [key, 0])))
    print("uniform seed 7, counters 0..3, (word0 >> 8) of 2^24:",
          [philox4x32_10([i, 0, 0, 0], [7, 0])[0] >> 8 for i in range(4)])
