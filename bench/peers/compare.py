#!/usr/bin/env python3
"""Medians and ratios of a bench/run.sh --peers run.

    compare.py <run dir>                 the table
    compare.py gbench <json>             Google Benchmark JSON -> the TSV lines
    compare.py memory <json> [KEYS]      ratelimit_bench_memory --json -> the TSV lines, from
                                         the rows of KEYS keys (default 10^6); fails when
                                         neither the library's nor the naive map's is there

Reads <run dir>/round-*/*.tsv (lines "peer<TAB>case<TAB>value<TAB>unit", from every
harness and from the library's converted rows) and prints a Markdown table: one row per
case, the median over the rounds of every peer, and the library's ratio to each peer
(library ÷ peer: below 1 the library is faster or smaller).
"""

import statistics
import sys
from collections import defaultdict
from pathlib import Path

CASES = [
    ("hot_1t", "one hot key, 1 thread", "ns/check"),
    ("hot_2t", "one hot key, 2 threads (aggregate)", "ns/check"),
    ("keys_100k", "100,000 keys round-robin, 1 thread", "ns/check"),
    ("keys_100k_shuffled", "100,000 keys round-robin, names shuffled, 1 thread", "ns/check"),
    ("idle_bytes_1m", "bytes per idle key at 10^6 keys", "bytes"),
    ("redis_seq", "Redis, sequential (1 in flight)", "µs/check"),
    ("redis_8", "Redis, 8 in flight (aggregate)", "µs/check"),
    ("redis_50", "Redis, 50 in flight (aggregate)", "µs/check"),
    ("redis_ceiling", "Redis, 8 clients × 16 pipelined (aggregate)", "µs/check"),
    ("redis_server_cpu", "Redis, server CPU per check (`INFO commandstats`)", "µs/check"),
]
LIBRARY = "ratelimit"
ORDER = [
    LIBRARY,
    "guava-RateLimiter",
    "go-x/time/rate",
    "naive-mutex-map",
    "atomic-gcra",
    "keyed-gcra",
    "rate-limiter-flexible+ioredis",
    "hiredis-fcall",
    "redis-benchmark",
    "reference-gcra-script",
]


def fmt(v):
    if v is None:
        return "—"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


UNIT_NS = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}
# Google Benchmark rows -> (peer, case, scale from ns). Real (wall) time: with threads it is
# the aggregate, wall time ÷ checks of all threads, as the peers measure.
MEMORY_ROWS = {
    "hot_1t": "keys:1/denied:0/cost:1/real_time/threads:1",
    "hot_2t": "keys:1/denied:0/cost:1/real_time/threads:2",
    "keys_100k": "keys:100000/denied:0/cost:1/real_time/threads:1",
}
HOT_ROWS = {case: MEMORY_ROWS[case] for case in ("hot_1t", "hot_2t")}
REDIS_ROWS = {"redis_seq": "keys:1/real_time/threads:1", "redis_8": "keys:1/real_time/threads:8"}
# (benchmark family, peer, its rows by case, scale from ns)
FAMILIES = [
    ("TokenBucket_Memory", LIBRARY, MEMORY_ROWS, 1),
    ("Baseline_MutexMap", "naive-mutex-map", MEMORY_ROWS, 1),
    ("Baseline_AtomicGcra", "atomic-gcra", HOT_ROWS, 1),
    ("Baseline_KeyedGcra", "keyed-gcra", MEMORY_ROWS, 1),
    ("TokenBucket_Redis", LIBRARY, REDIS_ROWS, 1e-3),
    ("Baseline_HiredisFcall_TokenBucket", "hiredis-fcall", REDIS_ROWS, 1e-3),
]
GBENCH = {f"BM_{family}/{row}": (peer, case, scale)
          for family, peer, rows, scale in FAMILIES for case, row in rows.items()}


def gbench(path):
    import json
    data = json.loads(Path(path).read_text())
    # ratelimit_bench --key_order=shuffled: its 10^5-key rows are the shuffled names' case.
    shuffled = data.get("context", {}).get("key_order") == "shuffled"
    for b in data["benchmarks"]:
        row = GBENCH.get(b["name"])
        if row is None or b.get("error_occurred"):
            continue
        if shuffled:
            if row[1] != "keys_100k":
                continue
            row = (row[0], "keys_100k_shuffled", row[2])
        ns = b["real_time"] * UNIT_NS[b.get("time_unit", "ns")]
        unit = "ns" if row[2] == 1 else "us"
        print(f"{row[0]}\t{row[1]}\t{ns * row[2]:.3f}\t{unit}")


def memory(path, keys=1_000_000):
    import json
    data = json.loads(Path(path).read_text())
    # ratelimit_bench_memory --json: {"rows": [...], "peaks": [...]}; a list before the peaks.
    rows = data if isinstance(data, list) else data["rows"]
    lines = []
    for r in rows:
        if r["keys"] != keys:
            continue
        if r["algorithm"] == "TokenBucket" and r["maxKeys"] == 1_000_000:
            lines.append(f"{LIBRARY}\tidle_bytes_1m\t{r['bytesPerKey']:.1f}\tbytes")
        elif r["algorithm"] == "naive unordered_map":
            lines.append(f"naive-mutex-map\tidle_bytes_1m\t{r['bytesPerKey']:.1f}\tbytes")
    if len(lines) != 2:
        sys.exit(f"compare.py: {path} has not both rows of {keys} keys (TokenBucket with "
                 f"maxKeys 10^6, naive unordered_map): found {len(lines)}")
    print("\n".join(lines))


def main():
    if sys.argv[1] == "gbench":
        gbench(sys.argv[2])
        return
    if sys.argv[1] == "memory":
        memory(sys.argv[2], *(int(k) for k in sys.argv[3:4]))
        return
    run = Path(sys.argv[1])
    values = defaultdict(list)  # (peer, case) -> [value per round]
    rounds = sorted(run.glob("round-*"))
    for tsv in sorted(run.glob("round-*/*.tsv")) + sorted(run.glob("*.tsv")):
        for line in tsv.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) == 4:
                values[(parts[0], parts[1])].append(float(parts[2]))
    peers = [p for p in ORDER if any(k[0] == p for k in values)]
    peers += sorted({k[0] for k in values} - set(peers))
    others = [p for p in peers if p != LIBRARY]
    med = {k: statistics.median(v) for k, v in values.items()}

    print(f"Medians of {len(rounds)} interleaved rounds; a cell is the peer's median and, in "
          "brackets, ratelimit ÷ that peer (below 1×: ratelimit is faster or smaller).\n")
    head = ["case", "unit", f"`{LIBRARY}` TokenBucket"] + [f"`{p}`" for p in others]
    print("| " + " | ".join(head) + " |")
    print("| --- | --- | " + " | ".join("---:" for _ in head[2:]) + " |")
    for case, label, unit in CASES:
        if not any((p, case) in med for p in peers):
            continue
        lib = med.get((LIBRARY, case))
        cells = [label, unit, fmt(lib)]
        for p in others:
            v = med.get((p, case))
            if v is None:
                cells.append("—")
            elif lib is None:
                cells.append(fmt(v))
            else:
                cells.append(f"{fmt(v)} ({lib / v:.2f}×)")
        print("| " + " | ".join(cells) + " |")
    spread = []
    for (p, case), v in sorted(values.items()):
        if len(v) > 1 and min(v) > 0:
            spread.append(f"{p} {case} {max(v) / min(v):.2f}")
    print("\nSpread (max ÷ min over the rounds): " + "; ".join(spread) + ".")


if __name__ == "__main__":
    main()
