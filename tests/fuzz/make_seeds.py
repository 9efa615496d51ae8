#!/usr/bin/env python3
"""Writes the hand-made seeds of the fuzz corpus (tests/fuzz/corpus/<name>/seed-*).

The rest of the corpus is what `ratelimit_fuzz_<name> -merge=1` kept from longer runs (see
CONTRIBUTING.md, "Fuzzing"). Run from anywhere; it rewrites only the seed-* files.

Algorithm inputs (algorithm_fuzz.hpp): six header bytes (count, period, burst, start time,
sliding-log runs, flags) and then calls of three bytes (time step, cost, key).
"""

import pathlib

HERE = pathlib.Path(__file__).resolve().parent

# Header bytes: count = 1 + b % 12 and period = 1 + b % 40 below 224, table values above;
# burst = count below 32; runs = (1, 2, 3, 4, 8, 64, 64, 64)[b % 8]; flags bit 0 = explicit time,
# bits 1-2 the late-call tolerance: (0, the default 1 s, 16 ticks, half the period)[(b >> 1) % 4].
# Call bytes: time < 128 forward b % (min(period, 64) + 2); 128..159 same tick; 160..199 forward
# (b - 159) * period / 4; 200..219 back 1 + (b - 200) % (...); 240..247 to the key's last retry
# time; 248..251 to its reset time; 252..255 leaps. Cost < 200 is b % (limit + 2); 200..239 the
# limit; 240..249 one; 250 limit + 1; 251 INT64_MAX; 252 2^48 + 1; 253 -1; 254 INT64_MIN; 255 zero.
# Key = b % 4; 252 and above resets the key.
SAME, RETRY, RESET_TIME = 128, 240, 248
LIMIT, ONE, ABOVE, HUGE, NEG, ZERO = 200, 240, 250, 251, 253, 255


def header(count=2, period=9, burst=0, start=0, runs=5, flags=0):
    return bytes([count, period, burst, start, runs, flags])


def calls(*triples):
    return bytes(b for t in triples for b in t)


ALGORITHM_SEEDS = {
    # 3 per 10 ticks: a burst, a refusal, the retry at exactly retryAfter, the reset time.
    "burst-then-retry": header()
    + calls((SAME, ONE, 0), (SAME, ONE, 0), (SAME, ONE, 0), (SAME, ONE, 0),
            (RETRY, ONE, 0), (RESET_TIME, ZERO, 0), (SAME, ONE, 0)),
    # Steps back: a refusal that rebases, then forward again, and a peek while behind.
    "step-back": header(count=1, period=7)
    + calls((5, LIMIT, 1), (SAME, ONE, 1), (201, ONE, 1), (1, ONE, 1), (RETRY, ONE, 1),
            (203, ZERO, 1), (2, LIMIT, 1), (221, ONE, 1), (RETRY, LIMIT, 1)),
    # Costs of every kind: zero, the limit, above it, huge, negative; then a reset.
    "costs": header(count=4, period=11)
    + calls((1, ZERO, 2), (1, LIMIT, 2), (SAME, ABOVE, 2), (SAME, HUGE, 2), (SAME, NEG, 2),
            (SAME, 254, 2), (SAME, 252, 2), (3, 2, 252), (SAME, LIMIT, 2)),
    # Four keys (empty, short, inline, digested) interleaved; one run per key for the log.
    "keys": header(count=3, period=5, runs=0)
    + calls(*[(t, c, k) for k in range(4) for (t, c) in ((1, ONE), (2, 2), (SAME, ONE))]),
    # A burst below the count, explicit times, window edges and long steps.
    "burst-and-edges": header(count=5, period=19, burst=40, start=2, flags=1)
    + calls((SAME, LIMIT, 0), (SAME, ONE, 0), (163, ONE, 0), (165, LIMIT, 0), (RETRY, LIMIT, 0),
            (170, LIMIT, 0), (225, ONE, 0), (RESET_TIME, ONE, 0)),
    # Huge quota and times near the ends of the fuzzed domain, with leaps both ways.
    "huge": header(count=229, period=227, burst=226, start=5, runs=7)
    + calls((SAME, LIMIT, 3), (SAME, ONE, 3), (252, ONE, 3), (253, LIMIT, 3), (199, ONE, 3),
            (RETRY, ONE, 3), (255, ONE, 3), (254, ONE, 3)),
    # Negative start, one-tick period: floor division below zero.
    "negative": header(count=0, period=0, start=3, runs=1)
    + calls((SAME, ONE, 1), (SAME, ONE, 1), (0, ONE, 1), (1, ONE, 1), (200, ONE, 1),
            (RETRY, ONE, 1), (2, ONE, 1)),
}

PARSE_TEXT = [
    "10/min", "100/s burst 20", "5/90s", "1000/1.5h", "7 / 3 hours burst 2", "1/d",
    "281474976710656/1ns burst 281474976710656", "281474976710657/s", "1/9223372036854775807ns",
    "1/9223372036854775808ns", "3/4611686018427387904us", "0/s", "10/", "10/xyz", "10/min burst",
    "10/MIN  BURST 20 ", "99999999999999999999/s", "\t12/\tseconds\tburst\t3", "5/ms burst 0",
    "1/500us", "60/hr", "8/2days burst 1", "10/min extra", "",
]

PARSE_DICT = ["/", " ", "burst", "ns", "us", "ms", "s", "sec", "second", "seconds", "m", "min",
              "minute", "minutes", "h", "hr", "hour", "hours", "d", "day", "days", "nanosecond",
              "nanoseconds", "microsecond", "microseconds", "millisecond", "milliseconds",
              "281474976710656", "9223372036854775807", "0", "."]


def write(directory, name, data):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(data)


def main():
    for target in ("fixed_window", "sliding_log", "sliding_counter", "token_bucket",
                   "leaky_bucket"):
        for name, data in ALGORITHM_SEEDS.items():
            write(HERE / "corpus" / target, "seed-" + name, data)
    parse = HERE / "corpus" / "limit_parse"
    for i, text in enumerate(PARSE_TEXT):
        write(parse, "seed-text-%02d" % i, b"\x00" + text.encode())
    # Numbers: unit selector, then (kind, 8 bytes) for count, duration and burst.
    for unit in range(9):
        numbers = bytes([128, unit])
        for kind, value in ((2, 10), (1, 0), (0, -1 & (2**64 - 1))):
            numbers += bytes([kind]) + value.to_bytes(8, "big")
        write(parse, "seed-numbers-%d" % unit, numbers)
    (HERE / "limit_parse.dict").write_text(
        "# libFuzzer dictionary for ratelimit_fuzz_limit_parse (written by make_seeds.py)\n"
        + "".join('"%s"\n' % token for token in PARSE_DICT))


if __name__ == "__main__":
    main()
