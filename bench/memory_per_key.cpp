// ratelimit_bench_memory: bytes per idle key of the memory storage, and that the memory comes
// back.
//
// For each algorithm and each key count N (10^4, 10^5, 10^6): a MemoryStorage with the default
// maxKeys (10^6; its table starts as one segment and grows a segment at a time as keys arrive),
// one limiter, N distinct keys of 15 bytes, one tryAcquire each. Then:
//   bytes/key     (RSS after the keys − RSS before the storage) ÷ N. Keys are formatted on
//                 the fly, so only the library's memory is in the delta.
//   idle+N new    the N keys go idle (the ManualClock moves one hour on, every key is fresh
//                 again) and N other keys arrive: RSS growth ÷ N (0: the idle entries were
//                 reused in place) and the calls that spilled (0: every new key got an entry).
//   after free    RSS after the limiter and the storage are destroyed, minus RSS before.
// RSS is read from /proc/self/statm after malloc_trim(0), so free heap pages go back to the
// kernel before every reading. A ManualClock makes "idle" a clock step instead of a wait; the
// per-key state does not depend on the clock.
//
// The "idle + N new" step runs at 10^6 keys only (it doubles the run time). Extra rows: the
// naive std::unordered_map<std::string, bucket> (no bound, no eviction: idle keys stay).
//
// A second table follows one table of each algorithm from 10^4 keys to maxKeys, reading
// `stats().allocatedBytes` every 1,000 keys: the most bytes per key on the way, and where.
// Segments split as they fill, so the figure at three key counts can miss the peaks between.
//
//   ratelimit_bench_memory [--quick] [--json=<path>]
//     --quick   10^4 keys only (a smoke test, not a measurement), and no peaks
//     --json    both tables as {"rows": [...], "peaks": [...]} (bench/report.py reads it)
//
//   ratelimit_bench_memory --huge-pages=<off|on-call|background> [--wait=<seconds>]
//     instead: one token-bucket table on the real clock, in that `HugePages` mode, grown to
//     maxKeys (10^6) keys, one call each, every call timed: how many took over 100 µs and over
//     1 ms, and the slowest (under on-call, a call that fills a chunk waits for its copy).
//     Then the median time per call of 5 rounds of the keys in turn (keys made beforehand),
//     and under background again once the kernel's khugepaged has made huge pages of at least
//     as many bytes as the table's filled chunks (the process's AnonHugePages, read every
//     second for at most <seconds>, 120 by default, less what the process had before). One
//     mode per process, so that modes compare on a fresh heap; bench/README.md runs them in
//     turn. Prints one Markdown row: mode | calls over 100 µs | over 1 ms | slowest | ns/call
//     after the fill | the table's huge pages then | ns/call once khugepaged made them.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <malloc.h>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unistd.h>
#include <unordered_map>
#include <vector>

#include <ratelimit/clock.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/storage/memory.hpp>

namespace {

std::int64_t rssBytes() {
    ::malloc_trim(0);
    std::ifstream statm("/proc/self/statm");
    std::int64_t size = 0;
    std::int64_t resident = 0;
    statm >> size >> resident;
    return resident * ::sysconf(_SC_PAGESIZE);
}

/// Key `i` of generation `g`: 15 bytes, the longest a slot keeps inline.
struct KeyMaker {
    char buffer[32];
    std::string_view operator()(std::size_t generation, std::size_t i) {
        const int n = std::snprintf(buffer, sizeof buffer, "u%zu:%012zu", generation, i);
        return {buffer, static_cast<std::size_t>(n)};
    }
};

struct Row {
    std::string algorithm;
    std::size_t maxKeys = 0;
    std::size_t keys = 0;
    double bytesPerKey = 0;
    bool reused = false;          // the idle + N new keys step ran
    double reuseBytesPerKey = 0;  // RSS growth per key when N new keys replace N idle ones
    std::uint64_t spilled = 0;    // calls that found no entry of their own
    std::size_t tracked = 0;      // entries holding a key after the first generation
    double statsBytesPerKey = 0;  // MemoryStats::allocatedBytes ÷ keys (sliding-log runs out)
    std::int64_t afterFreeBytes = 0;
};

template <class Model>
Row measure(const char* name, std::size_t maxKeys, std::size_t keys, bool reuse) {
    using Limiter = ratelimit::Limiter<Model, ratelimit::MemoryStorage, ratelimit::ManualClock>;
    Row row;
    row.algorithm = name;
    row.maxKeys = maxKeys;
    row.keys = keys;
    KeyMaker key;
    const std::int64_t before = rssBytes();
    {
        ratelimit::MemoryStorage::Options options;
        options.maxKeys = maxKeys;
        ratelimit::MemoryStorage storage(options);
        ratelimit::ManualClock clock;
        clock.set(std::chrono::hours{24 * 365 * 50});
        auto limiter = std::make_unique<Limiter>(ratelimit::Limit::perMinute(10), storage, clock);
        for (std::size_t i = 0; i < keys; ++i) {
            (void)limiter->tryAcquire(key(0, i));
        }
        const std::int64_t full = rssBytes();
        const ratelimit::MemoryStats first = storage.stats();
        row.bytesPerKey = static_cast<double>(full - before) / static_cast<double>(keys);
        row.tracked = first.trackedKeys;
        row.statsBytesPerKey =
            static_cast<double>(first.allocatedBytes) / static_cast<double>(keys);

        if (reuse) {
            clock.advance(std::chrono::hours{1});  // every key is idle, back to fresh
            for (std::size_t i = 0; i < keys; ++i) {
                (void)limiter->tryAcquire(key(1, i));
            }
            row.reuseBytesPerKey =
                static_cast<double>(rssBytes() - full) / static_cast<double>(keys);
            row.reused = true;
        }
        row.spilled = storage.stats().spilledCalls;
        limiter.reset();
    }
    row.afterFreeBytes = rssBytes() - before;
    return row;
}

/// Where the peaks are read: from this many keys on, every so many keys.
constexpr std::size_t kPeakFrom = 10'000;
constexpr std::size_t kPeakEvery = 1'000;

/// The most `allocatedBytes` per key of a table as it grows from 10^4 keys to `maxKeys`.
struct Peak {
    std::string algorithm;
    double bytesPerKey = 0;
    std::size_t keys = 0;  // where it was read
};

template <class Model>
Peak peakOnTheWay(const char* name, std::size_t maxKeys) {
    ratelimit::MemoryStorage::Options options;
    options.maxKeys = maxKeys;
    ratelimit::MemoryStorage storage(options);
    ratelimit::ManualClock clock;
    ratelimit::Limiter<Model, ratelimit::MemoryStorage, ratelimit::ManualClock> limiter(
        ratelimit::Limit::perMinute(10), storage, clock);
    KeyMaker key;
    Peak peak{name};
    for (std::size_t i = 1; i <= maxKeys; ++i) {
        (void)limiter.tryAcquire(key(0, i));
        if (i >= kPeakFrom && i % kPeakEvery == 0) {
            const double perKey =
                static_cast<double>(storage.stats().allocatedBytes) / static_cast<double>(i);
            if (perKey > peak.bytesPerKey) {
                peak.bytesPerKey = perKey;
                peak.keys = i;
            }
        }
    }
    return peak;
}

Row measureNaiveMap(std::size_t keys, bool reuse) {
    struct Bucket {
        double tokens;
        std::int64_t last;
    };
    Row row;
    row.algorithm = "naive unordered_map";
    row.keys = keys;
    KeyMaker key;
    const std::int64_t before = rssBytes();
    {
        std::unordered_map<std::string, Bucket> map;
        for (std::size_t i = 0; i < keys; ++i) {
            map.try_emplace(std::string(key(0, i)), Bucket{9.0, 1});
        }
        const std::int64_t full = rssBytes();
        row.bytesPerKey = static_cast<double>(full - before) / static_cast<double>(keys);
        row.tracked = map.size();
        if (reuse) {  // nothing is ever evicted: the idle keys stay
            for (std::size_t i = 0; i < keys; ++i) {
                map.try_emplace(std::string(key(1, i)), Bucket{9.0, 1});
            }
            row.reuseBytesPerKey =
                static_cast<double>(rssBytes() - full) / static_cast<double>(keys);
            row.reused = true;
        }
    }
    row.afterFreeBytes = rssBytes() - before;
    return row;
}

/// Bytes of this process's memory the kernel backs with transparent huge pages.
std::int64_t anonHugePageBytes() {
    std::ifstream rollup("/proc/self/smaps_rollup");
    for (std::string line; std::getline(rollup, line);) {
        if (line.rfind("AnonHugePages:", 0) == 0) {
            return std::stoll(line.substr(line.find(':') + 1)) * 1024;
        }
    }
    return 0;
}

/// `--huge-pages`: the waits of a table growing to `maxKeys` keys in one `HugePages` mode,
/// then its time per call among them.
void hugePageWaits(ratelimit::HugePages mode, std::size_t maxKeys, int waitSeconds) {
    using Clock = std::chrono::steady_clock;
    const std::int64_t hugeBefore = anonHugePageBytes();  // the process's own, not the table's
    const auto tableHuge = [hugeBefore] { return anonHugePageBytes() - hugeBefore; };
    ratelimit::MemoryStorage::Options options;
    options.maxKeys = maxKeys;
    options.hugePages = mode;
    ratelimit::MemoryStorage storage(options);
    ratelimit::Limiter<ratelimit::TokenBucketModel, ratelimit::MemoryStorage> limiter(
        ratelimit::Limit::perMinute(100), storage);
    std::vector<std::string> keys;
    keys.reserve(maxKeys);
    KeyMaker key;
    for (std::size_t i = 0; i < maxKeys; ++i) {
        keys.emplace_back(key(0, i));
    }
    std::size_t over100us = 0;
    std::size_t over1ms = 0;
    double slowestUs = 0;
    for (const std::string& k : keys) {
        const Clock::time_point start = Clock::now();
        (void)limiter.tryAcquire(k);
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
        over100us += us > 100 ? 1U : 0U;
        over1ms += us > 1000 ? 1U : 0U;
        slowestUs = std::max(slowestUs, us);
    }
    const auto nsPerCall = [&] {  // the median of 5 rounds
        std::vector<double> rounds;
        for (int round = 0; round < 5; ++round) {
            const Clock::time_point start = Clock::now();
            for (const std::string& k : keys) {
                (void)limiter.tryAcquire(k);
            }
            rounds.push_back(
                std::chrono::duration<double, std::nano>(Clock::now() - start).count() /
                static_cast<double>(maxKeys));
        }
        std::sort(rounds.begin(), rounds.end());
        return rounds[rounds.size() / 2];
    };
    const double nsAfterFill = nsPerCall();
    const auto mib = [](std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
    std::printf("| %s | %zu | %zu | %.0f µs | %.1f ns | %.1f MiB |",
                mode == ratelimit::HugePages::kOff      ? "kOff"
                : mode == ratelimit::HugePages::kOnCall ? "kOnCall"
                                                        : "kBackground",
                over100us, over1ms, slowestUs, nsAfterFill, mib(tableHuge()));
    std::fflush(stdout);  // the wait below may be long
    // The filled chunks' bytes: the table's bytes in whole 2 MiB. At 10^6 keys the part of a
    // chunk being filled and the table's other bytes come to less than a chunk (about 0.2);
    // elsewhere the wait may run to its end, which the row then shows.
    constexpr std::int64_t kChunk = std::int64_t{2} << 20;
    const std::int64_t filled =
        static_cast<std::int64_t>(storage.stats().allocatedBytes) / kChunk * kChunk;
    if (mode != ratelimit::HugePages::kBackground) {
        std::printf(" — |\n");
        return;
    }
    const Clock::time_point waitStart = Clock::now();
    for (int waited = 0; tableHuge() < filled && waited < waitSeconds; ++waited) {
        ::sleep(1);  // the kernel's thread, not this one, does the work
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - waitStart).count();
    std::printf(" %.1f ns after %.0f s (%.1f MiB) |\n", nsPerCall(), seconds, mib(tableHuge()));
}

}  // namespace

int main(int argc, char** argv) {
    bool quick = false;
    std::string hugePages;  // "": the tables of bytes per key
    int waitSeconds = 120;
    bool unknown = false;
    std::string jsonPath;
    for (int a = 1; a < argc; ++a) {
        const std::string_view arg = argv[a];
        if (arg == "--quick") {
            quick = true;
        } else if (arg.substr(0, 7) == "--json=") {
            jsonPath = std::string(arg.substr(7));
        } else if (arg.substr(0, 13) == "--huge-pages=") {
            hugePages = std::string(arg.substr(13));
        } else if (arg.substr(0, 7) == "--wait=") {
            waitSeconds = std::atoi(std::string(arg.substr(7)).c_str());
        } else {
            unknown = true;
        }
    }
    if (unknown || (!hugePages.empty() && hugePages != "off" && hugePages != "on-call" &&
                    hugePages != "background")) {
        std::fprintf(stderr,
                     "usage: %s [--quick] [--json=<path>]\n"
                     "       %s --huge-pages=<off|on-call|background> [--wait=<seconds>]\n",
                     argv[0], argv[0]);
        return 2;
    }
    const std::size_t maxKeys = ratelimit::MemoryStorage::Options{}.maxKeys;
    if (!hugePages.empty()) {
        hugePageWaits(hugePages == "off"       ? ratelimit::HugePages::kOff
                      : hugePages == "on-call" ? ratelimit::HugePages::kOnCall
                                               : ratelimit::HugePages::kBackground,
                      maxKeys, waitSeconds);
        return 0;
    }
    const std::vector<std::size_t> counts =
        quick ? std::vector<std::size_t>{10'000}
              : std::vector<std::size_t>{10'000, 100'000, 1'000'000};

    // The process's first storage pays one-time costs that stay after it is freed (about 0.3
    // MiB: the allocator's arenas, the library's first-use buffers): a run not reported keeps
    // them out of the first row.
    (void)measure<ratelimit::TokenBucketModel>("warm-up", maxKeys, counts.front(), false);
    std::vector<Row> rows;
    for (const std::size_t n : counts) {
        // The idle + N new keys step at one size (10^6, or the only one): it doubles the time.
        const bool reuse = n == counts.back();
        rows.push_back(measure<ratelimit::TokenBucketModel>("TokenBucket", maxKeys, n, reuse));
        rows.push_back(measure<ratelimit::LeakyBucketModel>("LeakyBucket", maxKeys, n, reuse));
        rows.push_back(measure<ratelimit::FixedWindowModel>("FixedWindow", maxKeys, n, reuse));
        rows.push_back(
            measure<ratelimit::SlidingCounterModel>("SlidingCounter", maxKeys, n, reuse));
        rows.push_back(measure<ratelimit::SlidingLogModel>("SlidingLog", maxKeys, n, reuse));
        rows.push_back(measureNaiveMap(n, reuse));
    }

    std::printf(
        "| algorithm | maxKeys | keys | bytes/key (RSS) | bytes/key (stats) | tracked | "
        "idle + N new keys: growth/key | spilled | RSS after free |\n");
    std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const Row& r : rows) {
        char stats[32] = "—";
        char reuse[32] = "—";
        if (r.maxKeys != 0) {
            std::snprintf(stats, sizeof stats, "%.1f", r.statsBytesPerKey);
        }
        if (r.reused) {
            std::snprintf(reuse, sizeof reuse, "%.1f", r.reuseBytesPerKey);
        }
        std::printf("| %s | %s | %zu | %.1f | %s | %zu | %s | %llu | %+.1f MiB |\n",
                    r.algorithm.c_str(), r.maxKeys == 0 ? "—" : std::to_string(r.maxKeys).c_str(),
                    r.keys, r.bytesPerKey, stats, r.tracked, reuse,
                    static_cast<unsigned long long>(r.spilled),
                    static_cast<double>(r.afterFreeBytes) / (1024.0 * 1024.0));
    }
    std::vector<Peak> peaks;
    if (!quick) {
        peaks = {peakOnTheWay<ratelimit::TokenBucketModel>("TokenBucket", maxKeys),
                 peakOnTheWay<ratelimit::LeakyBucketModel>("LeakyBucket", maxKeys),
                 peakOnTheWay<ratelimit::FixedWindowModel>("FixedWindow", maxKeys),
                 peakOnTheWay<ratelimit::SlidingCounterModel>("SlidingCounter", maxKeys),
                 peakOnTheWay<ratelimit::SlidingLogModel>("SlidingLog", maxKeys)};
        std::printf("\n| algorithm | most bytes/key (stats), 10^4 keys to maxKeys | at keys |\n");
        std::printf("| --- | ---: | ---: |\n");
        for (const Peak& p : peaks) {
            std::printf("| %s | %.1f | %zu |\n", p.algorithm.c_str(), p.bytesPerKey, p.keys);
        }
    }

    if (!jsonPath.empty()) {
        std::ofstream out(jsonPath);
        out << "{\"rows\": [\n";
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const Row& r = rows[i];
            out << "  {\"algorithm\": \"" << r.algorithm << "\", \"maxKeys\": " << r.maxKeys
                << ", \"keys\": " << r.keys << ", \"bytesPerKey\": " << r.bytesPerKey
                << ", \"statsBytesPerKey\": " << r.statsBytesPerKey
                << ", \"tracked\": " << r.tracked
                << ", \"reused\": " << (r.reused ? "true" : "false")
                << ", \"reuseBytesPerKey\": " << r.reuseBytesPerKey
                << ", \"spilled\": " << r.spilled << ", \"afterFreeBytes\": " << r.afterFreeBytes
                << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
        }
        out << "],\n\"peaks\": [\n";
        for (std::size_t i = 0; i < peaks.size(); ++i) {
            const Peak& p = peaks[i];
            out << "  {\"algorithm\": \"" << p.algorithm << "\", \"maxKeys\": " << maxKeys
                << ", \"from\": " << kPeakFrom << ", \"every\": " << kPeakEvery
                << ", \"bytesPerKey\": " << p.bytesPerKey << ", \"keys\": " << p.keys << "}"
                << (i + 1 < peaks.size() ? "," : "") << "\n";
        }
        out << "]}\n";
        out.close();
        if (!out) {
            std::fprintf(stderr, "ratelimit_bench_memory: could not write %s\n", jsonPath.c_str());
            return 1;
        }
    }
    return 0;
}
