#!/usr/bin/env python3
"""Rows of one build over other rows of the same process: the median of the per-process
ratios, with a bootstrap 90 % interval, from a bench/ab/run.sh directory (files
INDEX.ROUND.json; INDEX 0 unless given). Each round is a process, so a ratio never mixes two
processes' heaps or two minutes of a noisy host (bench/README.md, "Comparing builds").

    bench/ab/within.py DIR [-i INDEX] [NUMERATOR:DENOMINATOR]...

INDEX picks a build of a run of several (0, the first named, by default).

A pair names row families: NUMERATOR's row `BM_<NUMERATOR>_<rest>` is divided by
`BM_<DENOMINATOR>_<rest>`, for every `<rest>` (keys, denied, threads) the run holds.
DENOMINATOR may be `A|B`: the dearer of the two in that process. Without pairs, what issue 15
bounds: a limit set, a penalty and tiers over a single limit.
"""

import argparse
import collections
import glob
import os
import statistics
import sys

from ratio import interval, row_times

ISSUE_15_PAIRS = [
    "Set_TokenBucket_FixedWindow:TokenBucket",
    "Set_TokenBucket_FixedWindow:FixedWindow",
    "Set_TokenBucket_FixedWindow:TokenBucket|FixedWindow",
    "Penalized_TokenBucket:TokenBucket",
    "Tiered_TokenBucket:TokenBucket",
]


def processes(directory, index):
    for path in sorted(glob.glob(os.path.join(directory, f"{index}.*.json"))):
        yield row_times(path)


def ratios(runs, numerator, denominators):
    prefix = f"BM_{numerator}_"
    found = collections.defaultdict(list)
    for rows in runs:
        for name, time in rows.items():
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix):]
            dearest = [rows.get(f"BM_{d}_{rest}") for d in denominators]
            if None not in dearest:
                found[rest].append(time / max(dearest))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("-i", "--index", type=int, default=0)
    parser.add_argument("pairs", nargs="*", default=ISSUE_15_PAIRS)
    args = parser.parse_intermixed_args()  # -i may come between the positionals
    runs = list(processes(args.directory, args.index))
    if not runs:
        parser.error(f"no {args.index}.*.json in {args.directory}")
    for pair in args.pairs:
        numerator, colon, denominator = pair.partition(":")
        if not colon or not numerator or not denominator or ":" in denominator:
            parser.error(f"a pair is NUMERATOR:DENOMINATOR, not {pair!r}")
        found = ratios(runs, numerator, denominator.split("|"))
        if not found:
            print(f"within.py: no rows for {pair} (the run's filter left them out?)",
                  file=sys.stderr)
        names = denominator.split("|")
        over = f"max({', '.join(names)})" if len(names) > 1 else denominator
        for rest, values in sorted(found.items()):
            low, high = interval(values)
            label = rest.replace("/real_time/threads:1", "")
            print(f"{statistics.median(values):.3f} ({low:.3f}-{high:.3f}) n={len(values)} "
                  f"{numerator} / {over} {label}")


if __name__ == "__main__":
    main()
