#!/usr/bin/env python3
"""Per row, each binary's CPU time over the base's: the median of the per-round ratios, with a
bootstrap 90 % interval, from a bench/ab/run.sh directory (files INDEX.ROUND.json, index 0 the
base). A row is above the base when its whole interval is above 1, below it when its whole
interval is below 1 (bench/README.md, "Comparing builds").

    bench/ab/ratio.py DIR BASE_NAME OTHER_NAME...
"""

import collections
import glob
import json
import os
import random
import statistics
import sys


def row_times(path):
    """One process's rows: each row's CPU time, the median of its repetitions (`-a
    --benchmark_repetitions=N`; the aggregates are left out)."""
    times = collections.defaultdict(list)
    for row in json.load(open(path))["benchmarks"]:
        if row.get("run_type") != "aggregate":
            times[row["name"]].append(row["cpu_time"])
    if not times:
        sys.exit(f"{path}: no repetitions, only aggregates (drop *_aggregates_only from -a)")
    return {name: statistics.median(t) for name, t in times.items()}


def load(directory, index):
    times = collections.defaultdict(dict)
    for path in glob.glob(os.path.join(directory, f"{index}.*.json")):
        round_number = int(path.split(".")[-2])
        for name, time in row_times(path).items():
            times[name][round_number] = time
    return times


def interval(ratios, draws=2000):
    rng = random.Random(1)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return medians[draws // 20], medians[draws - draws // 20 - 1]


def main():
    directory, names = sys.argv[1], sys.argv[2:]
    base = load(directory, 0)
    for index, name in enumerate(names[1:], start=1):
        other = load(directory, index)
        print(f"== {name} / {names[0]}")
        for row in sorted(base):
            ratios = [other[row][r] / t for r, t in base[row].items() if r in other.get(row, {})]
            if not ratios:
                continue
            low, high = interval(ratios)
            mark = "  above" if low > 1 else "  below" if high < 1 else ""
            label = row.replace("/real_time/threads:1", "")
            print(f"{statistics.median(ratios):.3f} ({low:.3f}-{high:.3f}) "
                  f"n={len(ratios)} {label}{mark}")


if __name__ == "__main__":
    main()
