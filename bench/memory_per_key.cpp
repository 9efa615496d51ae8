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

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
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

}  // namespace

int main(int argc, char** argv) {
    bool quick = false;
    std::string jsonPath;
    for (int a = 1; a < argc; ++a) {
        const std::string_view arg = argv[a];
        if (arg == "--quick") {
            quick = true;
        } else if (arg.substr(0, 7) == "--json=") {
            jsonPath = std::string(arg.substr(7));
        } else {
            std::fprintf(stderr, "usage: %s [--quick] [--json=<path>]\n", argv[0]);
            return 2;
        }
    }
    const std::size_t maxKeys = ratelimit::MemoryStorage::Options{}.maxKeys;
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
