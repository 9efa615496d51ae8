#!/usr/bin/env python3
"""Prints AnyLimiter / direct Limiter ratios from one ratelimit_bench_any JSON run (medians of
interleaved repetitions, real and CPU time), as the table in bench/README.md ("AnyLimiter").

    build/ci-release/bench/ratelimit_bench_any --benchmark_min_time=0.1 \
        --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true \
        --benchmark_report_aggregates_only=true --benchmark_out=any.json \
        --benchmark_out_format=json
    bench/any_ratio.py any.json
"""

import json
import sys

runs = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("aggregate_name") == "median":
        runs[b["run_name"]] = (b["real_time"], b["cpu_time"])

print("| row | direct real / CPU (ns) | AnyLimiter real / CPU (ns) | ratio real | ratio CPU |")
print("| --- | --- | --- | --- | --- |")
for name in sorted(runs):
    if "_Direct" not in name:
        continue
    other = name.replace("_Direct", "_AnyLimiter")
    if other not in runs:
        continue
    (dr, dc), (ar, ac) = runs[name], runs[other]
    row = name.replace("BM_", "").replace("_Direct", "")
    print(f"| {row} | {dr:.0f} / {dc:.0f} | {ar:.0f} / {ac:.0f} | {ar / dr:.2f} | {ac / dc:.2f} |")
