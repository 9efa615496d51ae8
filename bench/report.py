#!/usr/bin/env python3
"""Writes bench/README.md from one bench/run.sh run.

Reads the Google Benchmark JSON files and the memory program's JSON from --dir, computes
every ratio of issue 4 from medians of the interleaved repetitions, checks the targets and
writes the README. The hand-written analysis between the ANALYSIS markers of an existing
README is kept.

    bench/report.py --dir <run dir> --readme bench/README.md --start <utc> --end <utc> \
        --load "<loadavg>" --preset ci-release
"""

import argparse
import csv
import json
import re
import subprocess
from pathlib import Path

ALGORITHMS = ["TokenBucket", "LeakyBucket", "FixedWindow", "SlidingCounter", "SlidingLog"]
BUCKETS = ["TokenBucket", "LeakyBucket"]
MEMORY_TARGET_ALGORITHMS = ["TokenBucket", "LeakyBucket", "FixedWindow", "SlidingCounter"]
ANALYSIS_START = "<!-- ANALYSIS:START (kept by bench/report.py) -->"
ANALYSIS_END = "<!-- ANALYSIS:END -->"
# The "Peers" section comes from another command (bench/run.sh --peers); it is kept as it is.
PEERS_START = "<!-- PEERS:START (kept by bench/report.py) -->"
PEERS_END = "<!-- PEERS:END -->"

UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


# ---------------------------------------------------------------------------------------------
# Loading


def load_runs(path):
    """{run name: {"real", "cpu", "cv", "counters", "error"}}, medians when repeated."""
    path = Path(path)
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    runs = {}
    for b in data.get("benchmarks", []):
        name = b.get("run_name", b["name"])
        entry = runs.setdefault(name, {"counters": {}, "cv": None, "error": None})
        if b.get("error_occurred"):
            entry["error"] = b.get("error_message", "error")
            continue
        kind = b.get("aggregate_name") if b.get("run_type") == "aggregate" else "single"
        scale = UNIT_NS.get(b.get("time_unit", "ns"), 1.0)
        if kind in ("median", "single"):
            entry["real"] = b["real_time"] * scale
            entry["cpu"] = b["cpu_time"] * scale
            for key in ("items_per_second", "server_ns"):
                if key in b:
                    entry["counters"][key] = b[key]
        elif kind == "cv":
            entry["cv"] = b["real_time"]
    return runs


def load_context(path):
    path = Path(path)
    if not path.exists():
        return {}
    return json.loads(path.read_text()).get("context", {})


def row(family, keys, denied=0, cost=1, threads=1):
    return f"BM_{family}/keys:{keys}/denied:{denied}/cost:{cost}/real_time/threads:{threads}"


def redis_row(family, keys, threads):
    return f"BM_{family}/keys:{keys}/real_time/threads:{threads}"


def real(runs, name):
    entry = runs.get(name)
    if entry is None or entry.get("error") or "real" not in entry:
        return None
    return entry["real"]


def fmt_ns(value):
    if value is None:
        return "—"
    if value >= 10_000:
        return f"{value / 1000:.1f} µs"
    if value >= 100:
        return f"{value:.0f} ns"
    return f"{value:.1f} ns"


def fmt_ratio(value):
    if isinstance(value, str):
        return value
    return "—" if value is None else f"{value:.2f}×"


NOISY_CV = 0.25


def noisy(runs, *names):
    """Why a comparison cannot be trusted: a row whose repetitions spread too much."""
    for name in names:
        cv = (runs.get(name) or {}).get("cv")
        if cv is not None and cv > NOISY_CV:
            return f"cv {cv * 100:.0f} % > {NOISY_CV * 100:.0f} %"
    return ""


def overlap(runs, name):
    entry = runs.get(name) or {}
    if not entry.get("real") or not entry.get("cpu"):
        return None
    return entry["cpu"] / entry["real"]


def overlap_note(runs, name):
    """How many of a row's threads ran at once on average: CPU time ÷ wall time. On a busy
    machine two threads may mostly take turns, which hides contention."""
    entry = runs.get(name) or {}
    if not entry.get("real") or not entry.get("cpu"):
        return ""
    return f"(threads running at once: {entry['cpu'] / entry['real']:.2f})"


def fmt_cv(runs, name):
    entry = runs.get(name) or {}
    cv = entry.get("cv")
    return "" if cv is None else f" (cv {cv * 100:.0f} %)"


def short(name):
    """BM_TokenBucket_Memory/keys:1/denied:0/cost:1/real_time/threads:1 -> readable."""
    name = name[3:] if name.startswith("BM_") else name
    return name.replace("/real_time", "").replace("/denied:0", "").replace("/cost:1", "")


# ---------------------------------------------------------------------------------------------
# Targets


class Targets:
    def __init__(self):
        self.rows = []

    def add(self, target, figure, figure_value, baseline, baseline_value, ratio, bound, ok,
            note="", inconclusive=""):
        if ratio is None:
            verdict = "no data"
        elif inconclusive:
            verdict = f"inconclusive ({'pass' if ok else 'miss'} as measured; {inconclusive})"
        else:
            verdict = "**pass**" if ok else "**miss**"
        self.rows.append((target, figure, figure_value, baseline, baseline_value, ratio, bound,
                          verdict, note))

    def ratio_le(self, target, runs, figure, baseline, bound, note="", inconclusive=""):
        f, b = real(runs, figure), real(runs, baseline)
        ratio = f / b if f is not None and b else None
        self.add(target, f"`{short(figure)}`{fmt_cv(runs, figure)}", fmt_ns(f),
                 f"`{short(baseline)}`{fmt_cv(runs, baseline)}", fmt_ns(b), ratio,
                 f"≤ {bound:g}×", ratio is not None and ratio <= bound, note,
                 inconclusive or noisy(runs, figure, baseline))

    def markdown(self):
        out = ["| target | figure | ns/check | baseline | ns/check | ratio | bound | result |",
               "| --- | --- | ---: | --- | ---: | ---: | ---: | --- |"]
        for (target, figure, fv, baseline, bv, ratio, bound, verdict, note) in self.rows:
            verdict = verdict + (f" {note}" if note else "")
            out.append(f"| {target} | {figure} | {fv} | {baseline} | {bv} | {fmt_ratio(ratio)} "
                       f"| {bound} | {verdict} |")
        return "\n".join(out)


def memory_targets(targets, memory, peaks):
    for algorithm in ALGORITHMS:
        sized = [r for r in memory if r["algorithm"] == algorithm and r["maxKeys"] > 0]
        if not sized:
            continue
        worst = max(sized, key=lambda r: r["bytesPerKey"])
        sizes = ", ".join(f"{r['keys']:.0e}: {r['bytesPerKey']:.1f}" for r in sized)
        if algorithm in MEMORY_TARGET_ALGORITHMS:
            ok = worst["bytesPerKey"] <= 64
            targets.rows.append((f"memory per idle key, {algorithm}", f"worst of {sizes}",
                                 f"{worst['bytesPerKey']:.1f} B", "—", "—", "—", "≤ 64 B",
                                 "**pass**" if ok else "**miss**", ""))
            peak = next((p for p in peaks if p["algorithm"] == algorithm), None)
            if peak:
                ok = peak["bytesPerKey"] <= 64
                targets.rows.append((
                    f"memory per key on the way, {algorithm}",
                    f"most bytes/key (stats) read every {peak['every']:,} keys from "
                    f"{peak['from']:.0e} to {peak['maxKeys']:.0e}, at {peak['keys']:,} keys",
                    f"{peak['bytesPerKey']:.1f} B", "—", "—", "—", "≤ 64 B",
                    "**pass**" if ok else "**miss**", ""))
            full = [r for r in sized if r["keys"] == r["maxKeys"]]
            if full and algorithm in ("TokenBucket", "LeakyBucket", "FixedWindow"):
                at = full[0]["bytesPerKey"]
                targets.rows.append((f"memory per idle key at maxKeys, {algorithm}",
                                     f"{full[0]['keys']:.0e} keys", f"{at:.1f} B", "—", "—", "—",
                                     "≤ 48 B", "**pass**" if at <= 48 else "**miss**", ""))
        else:
            targets.rows.append((f"memory per idle key, {algorithm} (no target)",
                                 f"worst of {sizes}", f"{worst['bytesPerKey']:.1f} B", "—", "—",
                                 "—", "—", "reported", ""))
    reused = [r for r in memory if r.get("reused") and r["maxKeys"] > 0]
    if reused:
        growth = max(r["reuseBytesPerKey"] for r in reused)
        spilled = sum(r["spilled"] for r in reused)
        freed = max(r["afterFreeBytes"] for r in memory if r["maxKeys"] > 0)
        ok = growth <= 1.0 and spilled == 0 and freed <= 1 << 20
        targets.rows.append((
            "memory comes back: idle keys' entries reused, all of it after destruction",
            f"N new keys after N idle ones: +{growth:.1f} B/key, {spilled} spilled; "
            f"after destruction +{freed / 1048576:.1f} MiB",
            "—", "—", "—", "—", "≈ 0", "**pass**" if ok else "**miss**", ""))


def redis_targets(targets, placements, bench_rps):
    for label, runs in placements:
        if not runs:
            continue
        lib1 = redis_row("TokenBucket_Redis", 1, 1)
        bare1 = redis_row("Baseline_HiredisFcall_TokenBucket", 1, 1)
        lib8 = redis_row("TokenBucket_Redis", 1, 8)
        a, b = real(runs, lib1), real(runs, bare1)
        ratio = b / a if a and b else None
        targets.add(f"Redis sequential, {label}: throughput ÷ bare FCALL",
                    f"`{short(lib1)}`{fmt_cv(runs, lib1)}", fmt_ns(a),
                    f"`{short(bare1)}`{fmt_cv(runs, bare1)}", fmt_ns(b), ratio, "≥ 0.95×",
                    ratio is not None and ratio >= 0.95, inconclusive=noisy(runs, lib1, bare1))
        c = real(runs, lib8)
        ratio8 = a / c if a and c else None
        targets.add(f"Redis 8 threads, {label}: throughput ÷ sequential",
                    f"`{short(lib8)}`{fmt_cv(runs, lib8)}", fmt_ns(c),
                    f"`{short(lib1)}`{fmt_cv(runs, lib1)}", fmt_ns(a), ratio8, "≥ 2×",
                    ratio8 is not None and ratio8 >= 2.0, inconclusive=noisy(runs, lib8, lib1))
        p16 = bench_rps.get((label, "-c 8 -P 16"))
        if p16 and c:
            lib_rps = 1e9 / c
            targets.rows.append((
                f"Redis 8 threads, {label}: ÷ `redis-benchmark -c 8 -P 16` (same FCALL)",
                f"`{short(lib8)}`: {lib_rps / 1000:.1f} k/s", fmt_ns(c),
                f"redis-benchmark: {p16 / 1000:.1f} k/s", fmt_ns(1e9 / p16), lib_rps / p16,
                "report", "reported", ""))


# ---------------------------------------------------------------------------------------------
# Tables


def sweep_table(sweep):
    families = [f"{a}_Memory" for a in ALGORITHMS] + ["Baseline_AtomicGcra", "Baseline_MutexMap"]
    heads = ALGORITHMS + ["AtomicGcra", "MutexMap"]
    out = ["| keys | path | cost | threads | " + " | ".join(heads) + " |",
           "| ---: | --- | ---: | ---: | " + " | ".join("---:" for _ in heads) + " |"]
    for keys in (1, 100_000, 1_000_000):
        for denied in (0, 1):
            for cost in (1, 10):
                for threads in (1, 2, 4):
                    cells = []
                    for family in families:
                        name = row(family, keys, denied, cost, threads)
                        entry = sweep.get(name)
                        if entry is not None and entry.get("error"):
                            cells.append("error")
                        else:
                            cells.append(fmt_ns(real(sweep, name)))
                    path = "denied" if denied else "allowed"
                    out.append(f"| {keys:,} | {path} | {cost} | {threads} | " + " | ".join(cells)
                               + " |")
    return "\n".join(out)


def ratio_table(ratio):
    """Every median of the repeated run, with its coefficient of variation."""
    out = ["| row | median ns/check | cv |", "| --- | ---: | ---: |"]
    for name in sorted(ratio):
        entry = ratio[name]
        if entry.get("error"):
            out.append(f"| `{short(name)}` | error: {entry['error']} | |")
            continue
        cv = entry.get("cv")
        out.append(f"| `{short(name)}` | {fmt_ns(entry.get('real'))} | "
                   f"{'' if cv is None else f'{cv * 100:.1f} %'} |")
    return "\n".join(out)


def redis_table(placements, bench_rps):
    out = ["| placement | row | ns/check | checks/s | client CPU ns/check | server CPU ns/check "
           "| throughput ÷ bare FCALL |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for label, runs in placements:
        if not runs:
            continue
        for name in sorted(runs, key=redis_sort_key):
            entry = runs[name]
            if entry.get("error"):
                out.append(f"| {label} | `{short(name)}` | error: {entry['error']} | | | | |")
                continue
            t = entry.get("real")
            versus = ""
            m = re.match(r"BM_(\w+)_Redis/(.*)", name)
            if m:
                bare = real(runs, f"BM_Baseline_HiredisFcall_{m.group(1)}/{m.group(2)}")
                versus = fmt_ratio(bare / t) if bare and t else "—"
            server = entry["counters"].get("server_ns")
            out.append(f"| {label} | `{short(name)}` | {fmt_ns(t)} | "
                       f"{1e9 / t / 1000:.1f} k | {fmt_ns(entry.get('cpu'))} | "
                       f"{fmt_ns(server)} | {versus} |")
        for opts in ("-c 1", "-c 8 -P 16"):
            rps = bench_rps.get((label, opts))
            if rps:
                out.append(f"| {label} | `redis-benchmark {opts}` (same FCALL) | "
                           f"{fmt_ns(1e9 / rps)} | {rps / 1000:.1f} k | | | |")
    return "\n".join(out)


def redis_sort_key(name):
    # One shape for every name, so that rows of other shapes (the leased rows' tokens) sort
    # after the rest instead of comparing a name with a number.
    m = re.match(r"BM_(\w+?)/keys:(\d+)/real_time/threads:(\d+)", name)
    if not m:
        return (99, 0, True, 0, name)
    family = m.group(1)
    algorithm = family.split("_")[-1] if family.startswith("Baseline") else family.split("_")[0]
    order = ALGORITHMS.index(algorithm) if algorithm in ALGORITHMS else 99
    return (order, int(m.group(2)), family.startswith("Baseline"), int(m.group(3)), name)


def machine():
    def sh(cmd):
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                                  check=False).stdout.strip()
        except OSError:
            return ""
    lscpu = sh("lscpu")
    model = re.search(r"^Model name:\s*(.*)$", lscpu, re.M)
    cpus = re.search(r"^CPU\(s\):\s*(.*)$", lscpu, re.M)
    hypervisor = re.search(r"^Hypervisor vendor:\s*(.*)$", lscpu, re.M)
    return {
        "model": model.group(1) if model else "?",
        "cpus": cpus.group(1) if cpus else "?",
        "hypervisor": hypervisor.group(1) if hypervisor else "none",
        "kernel": sh("uname -sr"),
        "compiler": sh("g++ --version | head -n 1"),
        "benchmark": sh("dpkg-query -W -f '${Version}' libbenchmark-dev 2>/dev/null") or "?",
        "redis": sh("redis-server --version 2>/dev/null | cut -d' ' -f3"),
        "clocksource": sh("cat /sys/devices/system/clocksource/clocksource0/"
                          "current_clocksource 2>/dev/null"),
    }


# ---------------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--readme", required=True)
    parser.add_argument("--start", default="?")
    parser.add_argument("--end", default="?")
    parser.add_argument("--load", default="?")
    parser.add_argument("--preset", default="ci-release")
    parser.add_argument("--reps", default="5")
    args = parser.parse_args()
    d = Path(args.dir)

    sweep = load_runs(d / "sweep.json")
    ratio = load_runs(d / "ratio.json")
    context = load_context(d / "ratio.json") or load_context(d / "sweep.json")
    placements = [("across cores", load_runs(d / "redis_across.json")),
                  ("one core", load_runs(d / "redis_one_core.json"))]
    memory_path = d / "memory.json"
    memory_json = json.loads(memory_path.read_text()) if memory_path.exists() else {}
    # Older runs wrote the rows alone, as a list.
    memory = memory_json if isinstance(memory_json, list) else memory_json.get("rows", [])
    peaks = [] if isinstance(memory_json, list) else memory_json.get("peaks", [])
    bench_rps = {}
    if (d / "redis_benchmark.csv").exists():
        for rec in csv.reader((d / "redis_benchmark.csv").read_text().splitlines()):
            if len(rec) >= 4:
                label = {"across": "across cores", "one_core": "one core"}.get(rec[0], rec[0])
                bench_rps[(label, rec[1])] = float(rec[3])
    commands = (d / "commands.txt").read_text().strip() if (d / "commands.txt").exists() else ""

    t = Targets()
    gcra1 = row("Baseline_AtomicGcra", 1)
    for a in ALGORITHMS:
        t.ratio_le(f"hot key, 1 thread, {a} ÷ AtomicGcra", ratio, row(f"{a}_Memory", 1), gcra1,
                   1.25 if a in BUCKETS else 1.6)
    for a in ALGORITHMS:
        t.ratio_le(f"hot key, 1 thread, `tryAcquire(key, cost, now)`, {a} ÷ AtomicGcra with "
                   "the same given time", ratio, row(f"{a}_Memory_GivenNow", 1),
                   row("Baseline_AtomicGcra_GivenNow", 1), 1.25 if a in BUCKETS else 1.6)
    mm = row("Baseline_MutexMap", 100_000)
    for a in ALGORITHMS:
        t.ratio_le(f"100,000 keys round-robin, 1 thread, {a} ÷ MutexMap", ratio,
                   row(f"{a}_Memory", 100_000), mm, 0.5)
    # The lock-free baseline's two threads never sleep: if even they did not run at once, the
    # machine did not give the contention rows two CPUs.
    machine_overlap = overlap(ratio, row("Baseline_AtomicGcra", 1, threads=2))
    for a in ALGORITHMS:
        two = row(f"{a}_Memory", 1, threads=2)
        t.ratio_le(f"hot key, {a}: 2 threads ÷ 1 thread (aggregate time per check)", ratio,
                   two, row(f"{a}_Memory", 1), 1.5, overlap_note(ratio, two),
                   f"AtomicGcra's 2 threads, which never sleep, ran at once only "
                   f"{machine_overlap:.2f} of 2 on average: the machine did not give the row two "
                   "CPUs, so contention was not measured"
                   if machine_overlap is not None and machine_overlap < 1.6 else "")
    for a in ALGORITHMS:
        for keys in (1, 100_000):
            t.ratio_le(f"denied ≤ allowed, {a}, keys {keys:,}", ratio,
                       row(f"{a}_Memory", keys, denied=1), row(f"{a}_Memory", keys), 1.0)
    for keys in (1, 100_000):
        hook, plain = row("TokenBucket_Memory_Hook", keys), row("TokenBucket_Memory", keys)
        h, p = real(ratio, hook), real(ratio, plain)
        bound = max(1.0, 0.02 * p) if p else None
        t.add(f"unused hook (onEvent set, never fired), keys {keys:,}: hook − plain ≤ "
              "max(1 ns, 2 %)", f"`{short(hook)}`{fmt_cv(ratio, hook)}", fmt_ns(h),
              f"`{short(plain)}`{fmt_cv(ratio, plain)}", fmt_ns(p),
              h / p if h and p else None,
              f"+{bound:.1f} ns" if bound else "—",
              h is not None and p is not None and h - p <= bound,
              f"({h - p:+.1f} ns)" if h and p else "", noisy(ratio, hook, plain))
    memory_targets(t, memory, peaks)
    redis_targets(t, placements, bench_rps)
    reference = [("hot key, 1 thread, MutexMap ÷ AtomicGcra (the issue quotes ≈ 1.3×)",
                  row("Baseline_MutexMap", 1), gcra1),
                 ("hot key, MutexMap: 2 threads ÷ 1 thread (the issue quotes ≈ 3×; "
                  + overlap_note(ratio, row("Baseline_MutexMap", 1, threads=2))[1:-1] + ")",
                  row("Baseline_MutexMap", 1, threads=2), row("Baseline_MutexMap", 1)),
                 ("hot key, AtomicGcra: 2 threads ÷ 1 thread ("
                  + overlap_note(ratio, row("Baseline_AtomicGcra", 1, threads=2))[1:-1] + ")",
                  row("Baseline_AtomicGcra", 1, threads=2), gcra1),
                 ("the clock alone ÷ AtomicGcra", "BM_Baseline_ClockRead/real_time/threads:1",
                  gcra1),
                 ("hot key, 1 thread, KeyedGcra ÷ AtomicGcra (the floor with a keyed lookup)",
                  row("Baseline_KeyedGcra", 1), gcra1),
                 ("hot key, 1 thread, TokenBucket ÷ KeyedGcra",
                  row("TokenBucket_Memory", 1), row("Baseline_KeyedGcra", 1)),
                 ("100,000 keys round-robin, 1 thread, KeyedGcra ÷ MutexMap",
                  row("Baseline_KeyedGcra", 100000), row("Baseline_MutexMap", 100000)),
                 ("100,000 keys round-robin, 1 thread, TokenBucket ÷ KeyedGcra",
                  row("TokenBucket_Memory", 100000), row("Baseline_KeyedGcra", 100000))]
    ref_lines = ["| reference | figure | baseline | ratio |", "| --- | --- | --- | ---: |"]
    for label, f, b in reference:
        fv, bv = real(ratio, f), real(ratio, b)
        ref_lines.append(f"| {label} | `{short(f)}` {fmt_ns(fv)} | `{short(b)}` {fmt_ns(bv)} | "
                         f"{fmt_ratio(fv / bv if fv and bv else None)} |")

    passed = sum(1 for r in t.rows if r[7] == "**pass**")
    missed = sum(1 for r in t.rows if r[7] == "**miss**")
    unsure = sum(1 for r in t.rows if r[7].startswith("inconclusive"))

    m = machine()
    readme = Path(args.readme)
    analysis = ("_Not written yet: what limits each missed target, measured, goes here._")
    peers = None
    if readme.exists():
        old = readme.read_text()
        if ANALYSIS_START in old and ANALYSIS_END in old:
            analysis = old.split(ANALYSIS_START, 1)[1].split(ANALYSIS_END, 1)[0].strip()
        if PEERS_START in old and PEERS_END in old:
            peers = old.split(PEERS_START, 1)[1].split(PEERS_END, 1)[0].strip()

    memory_md = (d / "memory.md").read_text().strip() if (d / "memory.md").exists() else "—"
    build_type = context.get("library_build_type", "?")

    text = f"""# Benchmarks

Generated by `bench/run.sh` (with `bench/report.py`) from one run; do not edit by hand except
between the ANALYSIS markers. Figures are real (wall) time per check; with several threads the
aggregate: wall time ÷ checks of all threads. Ratios are computed from **medians of
{args.reps} interleaved repetitions** of rows that ran in the same process, so they survive a
noisy machine better than the absolute figures.

- **Run**: {args.start} → {args.end} (UTC); load average at the start {args.load}.
- **Machine**: {m['model']}, {m['cpus']} CPUs (hypervisor: {m['hypervisor']}), {m['kernel']},
  clocksource `{m['clocksource']}`.
- **Build**: preset `{args.preset}` (Release: `-O3 -DNDEBUG`), {m['compiler']}.
- **Google Benchmark** {m['benchmark']}: Debian's library reports `library_build_type:
  {build_type}` (built without `NDEBUG`); that touches only the harness, the same in every
  row. **redis-server** {m['redis']}.
- **Command**: `bench/run.sh`, which ran (`$OUT` is a fresh temporary directory):

```sh
{commands}
```

The `redis-benchmark` lines ran against a redis-server `bench/run.sh` started on
`$OUT/redis.sock` (pinned to CPU 0, persistence off) with the token bucket's function library
loaded by `redis-cli -x FUNCTION LOAD`; the libraries and arguments come from
`ratelimit_redis_bench --dump-scripts=<dir>`.

## Targets of issue 4

{passed} passed, {missed} missed, {unsure} inconclusive (a row's repetitions spread by more
than {NOISY_CV * 100:.0f} %, or the threads of a contention row did not run at once). Hot-key and 100k-key rows: 1 thread unless said; `keys:1`
is one hot key; `denied:1` rows refuse every call. Bounds as the issue states them.

{t.markdown()}

Reference ratios from the same run:

{chr(10).join(ref_lines)}

## What limits the misses

{ANALYSIS_START}
{analysis}
{ANALYSIS_END}

## The suite

| binary | source | what |
| --- | --- | --- |
| `ratelimit_bench` | `limiter_bench.cpp` | `BM_<Algorithm>_Memory` for the five algorithms, `BM_Baseline_*` |
| `ratelimit_redis_bench` | `redis_bench.cpp` | `BM_<Algorithm>_Redis`, `BM_Baseline_HiredisFcall_<Algorithm>` |
| `ratelimit_bench_memory` | `memory_per_key.cpp` | bytes per idle key, and that the memory comes back |

- Rows are `BM_<Algorithm>_Memory/keys:K/denied:D/cost:C/real_time/threads:T`: `keys:1` is
  one hot key, `keys:100000` and `keys:1000000` go round-robin over that many 15-byte keys
  (each thread from its own offset); every key exists before timing. `denied:0` uses a limit
  that admits every call of a run (buckets: 10^6/s with a burst of 10^12; windows: 10^12/s),
  `denied:1` one that refuses every call (10/day, exhausted before timing). Each row checks
  after its loop that every call took the path its name says. Limiters use the defaults:
  `MemoryStorage` (`maxKeys` 10^6) and `SteadyClock`.
- `_GivenNow` rows call `tryAcquire(key, cost, now)` with the time read once before the loop,
  against `BM_Baseline_AtomicGcra_GivenNow`, which takes the same given time.
  `BM_TokenBucket_Memory_Hook` sets `MemoryStorage::Options::onEvent` (never fired).
- Baselines: `BM_Baseline_ClockRead` is `SteadyClock::now()` alone;
  `BM_Baseline_AtomicGcra` one `std::atomic<int64_t>` GCRA per key position (a CAS loop, the
  same `SteadyClock`, no key lookup: key i uses slot i); `BM_Baseline_KeyedGcra` the same
  GCRA found by its key (the low half of the library's short-key hash, linear probing in a
  table of a power of two 32-byte slots at most half full, the key compared as the table
  compares it); `BM_Baseline_MutexMap` one
  `std::mutex` around `std::unordered_map<std::string, bucket>` with a naive double token
  bucket, the clock read before the lock. All fill the same `Decision` fields the library does.
- Redis rows share one `RedisStorage` (default options: pipelining over 2 connections;
  `_RedisPool` rows: `pipelining = false`, a pool of 16) against a redis-server the bench
  starts on a unix socket; `server_ns` is the server's CPU time per check, the CPU column the
  client's.
- Benchmarks build only with `RATELIMIT_BUILD_BENCHMARKS=ON`, which only the `ci-release`
  preset sets; `bench/CMakeLists.txt` warns when `CMAKE_BUILD_TYPE` is not `Release`. Google
  Benchmark 1.7.1 takes `--benchmark_min_time=0.05` (seconds, no unit suffix).

## Medians of the repeated rows

{ratio_table(ratio)}

## The full matrix (one repetition, `--benchmark_min_time` as in the command)

{sweep_table(sweep)}

## Redis

{redis_table(placements, bench_rps)}

## Memory per idle key (`ratelimit_bench_memory`)

Each `MemoryStorage` has the default `maxKeys` (10^6). Its table **grows with the keys**: it
starts as one segment of 14-slot groups; a new key whose two groups are full first moves a key
of theirs to its other group where that one has room, and only when none can does the segment
split in two, unevenly, up to room for `maxKeys` at 13 keys in 16 slots. Bytes per key drop as segments
fill and jump when they split. 15-byte keys (the longest kept inline); RSS after
`malloc_trim(0)`.

{memory_md}
"""
    if peers is not None:
        text += f"\n{PEERS_START}\n{peers}\n{PEERS_END}\n"
    readme.write_text(text)


if __name__ == "__main__":
    main()
