// The in-memory limiters against in-run baselines, measured in the same run.
//
//   BM_<Algorithm>_Memory/keys:K/denied:D/cost:C/real_time/threads:T
//     tryAcquire(key, cost) on a limiter with MemoryStorage and SteadyClock (the defaults).
//     keys:1 is one hot key; keys:100000 and keys:1000000 go round-robin over that many keys of
//     15 bytes ("user:" and ten digits), each thread starting at its own offset. denied:0 is a
//     limit that admits every call of the run, denied:1 one that refuses every call (the keys
//     are exhausted beforehand). All keys exist before timing starts (no insertion is timed).
//     With threads, real time per check is the aggregate: wall time / checks of all threads.
//   BM_<Algorithm>_Memory_GivenNow/...      tryAcquire(key, cost, now), the time read once
//                                            before the loop: the step without the clock
//   BM_Set_TokenBucket_FixedWindow_Memory/...  a limit set of a token bucket and a fixed
//                                            window, both admitting every call
//   BM_Penalized_TokenBucket_Memory/...     the token bucket with a penalty no key meets
//   BM_Tiered_TokenBucket_Memory/...        TieredLimiter of three token-bucket tiers, each
//                                            key in a fixed tier: what tiers cost unswitched
//   BM_TokenBucket_Memory_Hook/...          the same row with MemoryStorage::Options::onEvent
//                                            set (it never fires): what the unused hook costs
//   BM_TokenBucket_Memory_Metrics/...       the same row with a DecisionMetrics listener
//                                            (LimiterOptions::listener): what it costs an
//                                            admission (a count) and a refusal (the summaries)
//   BM_Baseline_ClockRead                   SteadyClock::now() alone
//   BM_Baseline_AtomicGcra/...              one std::atomic<int64_t> TAT per key position,
//                                            updated by a CAS loop, the same SteadyClock, no
//                                            key lookup at all (key i uses slot i): the floor
//   BM_Baseline_AtomicGcra_GivenNow/...     the same with the time read once before the loop
//   BM_Baseline_AtomicGcraPair(_GivenNow)/... the same GCRA with a second word beside the time
//                                            (its last write), the pair swapped by one 16-byte
//                                            CAS as the table swaps a bucket's state (x86-64)
//   BM_Baseline_KeyedGcra(_GivenNow)/...    the same GCRA found by its key: the low half of
//                                            the library's short-key hash, linear probing in a
//                                            table of 32-byte slots at most half full, the key
//                                            compared as the table compares it: the floor with
//                                            a keyed lookup
//   BM_Baseline_MutexMap/...                one std::mutex around std::unordered_map<
//                                            std::string, bucket>, a naive double token bucket,
//                                            the same clock read before the lock (as Go's
//                                            x/time/rate does): a naive keyed limiter
//
// `--key_order=shuffled` names the keys of every row in a pseudo-random order (key i is "user:"
// and the ten digits of the i-th number of a fixed-seed shuffle of 0..K-1), still created,
// filled and visited in the order i: a hash that keeps consecutive names close (Java's
// `String.hashCode`) then scatters them, as the library's seeded hash does in either order.
//
// Every baseline fills the same `Decision` (allowed, limit, remaining, retryAfter, resetAfter)
// the library returns, so a ratio compares equal answers. Every decision is sunk with
// benchmark::DoNotOptimize, and every row checks after its loop that it took the path its
// name says (all admitted, or all refused), or it fails with SkipWithError.

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include <ratelimit/clock.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/short_key_hash.hpp>
#include <ratelimit/detail/word_pair.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/metrics/decision_metrics.hpp>
#include <ratelimit/storage/memory.hpp>
#include <ratelimit/tiers.hpp>

namespace {

using ratelimit::Decision;
using ratelimit::Limit;
using std::chrono::nanoseconds;

// ---------------------------------------------------------------------------------------------
// Limits. "Allowed" admits every call a run can make (the state is written on every call and
// the buckets are never back to full); "denied" refuses every call after the key was
// exhausted with kDeniedCount before timing.

constexpr std::int64_t kDeniedCount = 10;
constexpr std::int64_t kBucketRate = 1'000'000;           // per second
constexpr std::int64_t kBucketBurst = 1'000'000'000'000;  // 10^12: never empties in a run
constexpr std::int64_t kWindowCount = 1'000'000'000'000;  // per second

/// A limit set's limits: `limit<Member>()` for each member.
template <class Set, template <class> class Of>
typename Set::Limits memberLimits() {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return typename Set::Limits{Of<typename Set::template Member<I>>::make()...};
    }
    (std::make_index_sequence<Set::kSize>{});
}

/// A penalty no row meets: what a penalized limiter pays when no key is ever blocked.
constexpr ratelimit::Penalty kUnmetPenalty{Limit::kMaxCount, std::chrono::hours{1},
                                           std::chrono::hours{1}};

template <class Model>
struct Allowed {
    static ratelimit::LimitOf<Model> make() {
        if constexpr (ratelimit::detail::kIsLimitSet<Model>) {
            return memberLimits<Model, Allowed>();
        } else if constexpr (ratelimit::detail::kIsPenalized<Model>) {
            return {Allowed<typename Model::Inner>::make(), kUnmetPenalty};
        } else if constexpr (Model::kBucket) {
            return Limit::perSecond(kBucketRate).withBurst(kBucketBurst);
        } else {
            return Limit::perSecond(kWindowCount);
        }
    }
};

template <class Model>
struct Denied {
    static ratelimit::LimitOf<Model> make() {
        if constexpr (ratelimit::detail::kIsLimitSet<Model>) {
            return memberLimits<Model, Denied>();
        } else if constexpr (ratelimit::detail::kIsPenalized<Model>) {
            return {Denied<typename Model::Inner>::make(), kUnmetPenalty};
        } else {
            return Limit::perDay(kDeniedCount);
        }
    }
};

template <class Model>
ratelimit::LimitOf<Model> allowedLimit() {
    return Allowed<Model>::make();
}

// The baselines' bucket, in nanoseconds: emission interval and burst.
struct BucketParams {
    std::int64_t intervalNs;
    std::int64_t burst;
};

BucketParams bucketParams(bool denied) {
    if (denied) {
        return {std::int64_t{86'400'000'000'000} / kDeniedCount, kDeniedCount};
    }
    return {std::int64_t{1'000'000'000} / kBucketRate, kBucketBurst};
}

// ---------------------------------------------------------------------------------------------
// Keys: `n` distinct keys of 15 bytes, built once per size and kept for the whole run.

/// Set by `--key_order=shuffled` before any row runs.
bool gShuffledNames = false;

/// The numbers the keys are named after, in the order they are visited.
std::vector<std::size_t> keyNumbers(std::size_t n) {
    std::vector<std::size_t> numbers(n);
    std::iota(numbers.begin(), numbers.end(), std::size_t{0});
    if (gShuffledNames) {
        std::mt19937_64 random(20261207);  // fixed: every run of one build visits one order
        std::shuffle(numbers.begin(), numbers.end(), random);
    }
    return numbers;
}

const std::vector<std::string>& keySet(std::size_t n) {
    static std::mutex mutex;
    static std::map<std::size_t, std::unique_ptr<std::vector<std::string>>> sets;
    const std::lock_guard<std::mutex> lock(mutex);
    auto& set = sets[n];
    if (!set) {
        set = std::make_unique<std::vector<std::string>>();
        set->reserve(n);
        char buffer[32];
        for (const std::size_t number : keyNumbers(n)) {
            const int length = std::snprintf(buffer, sizeof buffer, "user:%010zu", number);
            set->emplace_back(buffer, static_cast<std::size_t>(length));
        }
    }
    return *set;
}

// ---------------------------------------------------------------------------------------------
// One fixture (a populated limiter or baseline) is shared by the threads of a row and by the
// following rows with the same identity, so a million keys are inserted once, not once per
// run of the function. Only one lives at a time: the tables are large.

class Fixture {
public:
    Fixture() = default;
    Fixture(const Fixture&) = delete;
    Fixture& operator=(const Fixture&) = delete;
    virtual ~Fixture() = default;
};

std::mutex gFixtureMutex;
std::unique_ptr<Fixture> gFixture;
std::string gFixtureId;

template <class F, class... Args>
F& sharedFixture(const std::string& id, const Args&... args) {
    const std::lock_guard<std::mutex> lock(gFixtureMutex);
    if (!gFixture || gFixtureId != id) {
        gFixture.reset();  // free the previous table before building the next one
        gFixtureId.clear();
        gFixture = std::make_unique<F>(args...);
        gFixtureId = id;
    }
    return static_cast<F&>(*gFixture);
}

void releaseFixture() {
    const std::lock_guard<std::mutex> lock(gFixtureMutex);
    gFixture.reset();
    gFixtureId.clear();
}

std::string fixtureId(std::string_view kind, std::size_t keys, bool denied) {
    return std::string(kind) + "/" + std::to_string(keys) + "/" + (denied ? "denied" : "allowed");
}

struct RowArgs {
    std::size_t keys;
    bool denied;
    std::int64_t cost;
};

RowArgs rowArgs(const benchmark::State& state) {
    return {static_cast<std::size_t>(state.range(0)), state.range(1) != 0, state.range(2)};
}

/// The timed loop every row shares: key `i` round-robin from this thread's offset, one
/// decision per iteration, sunk; then the path check and the item count.
template <class Decide>
void runRow(benchmark::State& state, const std::vector<std::string>& keys, const RowArgs& args,
            Decide&& decide) {
    const std::size_t n = keys.size();
    std::size_t i = static_cast<std::size_t>(state.thread_index()) * n /
                    static_cast<std::size_t>(state.threads());
    std::int64_t admitted = 0;
    for (auto _ : state) {
        const Decision d = decide(i, std::string_view(keys[i]), args.cost);
        admitted += d.allowed ? 1 : 0;
        benchmark::DoNotOptimize(d);
        if (++i == n) {
            i = 0;
        }
    }
    state.SetItemsProcessed(state.iterations());
    if (args.denied ? admitted != 0 : admitted != state.iterations()) {
        state.SkipWithError(args.denied ? "a call of the denied path was admitted"
                                        : "a call of the allowed path was refused");
    }
}

// ---------------------------------------------------------------------------------------------
// The library.

ratelimit::MemoryStorage::Options storageOptions(bool hook) {
    ratelimit::MemoryStorage::Options options;  // maxKeys: the default, 10^6
    if (hook) {
        options.onEvent = [](ratelimit::MemoryEvent event, std::string_view name) {
            benchmark::DoNotOptimize(event);
            benchmark::DoNotOptimize(name);
        };
    }
    return options;
}

/// What a row attaches beyond the limiter: nothing, the storage's event hook (never fired),
/// or a `DecisionMetrics` listener.
enum class Attached { kNothing, kHook, kMetrics };

ratelimit::LimiterOptions limiterOptions(ratelimit::DecisionMetrics& metrics, Attached attached) {
    ratelimit::LimiterOptions options;
    if (attached == Attached::kMetrics) {
        options.listener = &metrics;
    }
    return options;
}

template <class Model>
class LimiterFixture final : public Fixture {
public:
    using Lim = ratelimit::Limiter<Model>;

    LimiterFixture(std::size_t keyCount, bool denied, Attached attached)
        : storage(storageOptions(attached == Attached::kHook)),
          limiter(denied ? Denied<Model>::make() : allowedLimit<Model>(), storage,
                  ratelimit::SteadyClock{}, limiterOptions(metrics, attached)),
          keys(keySet(keyCount)) {
        for (const std::string& key : keys) {
            benchmark::DoNotOptimize(limiter.tryAcquire(key, denied ? kDeniedCount : 1));
        }
        spilled = storage.stats().spilledCalls;
    }

    ratelimit::DecisionMetrics metrics;  // before the limiter, which it must outlive
    ratelimit::MemoryStorage storage;
    Lim limiter;
    const std::vector<std::string>& keys;
    std::uint64_t spilled = 0;
};

template <class Model>
LimiterFixture<Model>& limiterFixture(const RowArgs& a, Attached attached) {
    static constexpr std::array<const char*, 3> kSuffix{"", "+hook", "+metrics"};
    return sharedFixture<LimiterFixture<Model>>(
        fixtureId(std::string(Model::kName) + kSuffix.at(static_cast<std::size_t>(attached)),
                  a.keys, a.denied),
        a.keys, a.denied, attached);
}

template <class Model>
void limiterRow(benchmark::State& state, Attached attached) {
    const RowArgs args = rowArgs(state);
    auto& f = limiterFixture<Model>(args, attached);
    if (f.spilled != 0) {
        state.SkipWithError("keys spilled while the table was populated");
        return;
    }
    runRow(state, f.keys, args, [&f](std::size_t, std::string_view key, std::int64_t cost) {
        return f.limiter.tryAcquire(key, cost);
    });
}

template <class Model>
void BM_Limiter(benchmark::State& state) {
    limiterRow<Model>(state, Attached::kNothing);
}

template <class Model>
void BM_LimiterHook(benchmark::State& state) {
    limiterRow<Model>(state, Attached::kHook);
}

template <class Model>
void BM_LimiterMetrics(benchmark::State& state) {
    limiterRow<Model>(state, Attached::kMetrics);
}

/// Tiers of `Model`: three tiers of the row's limit, each key in the tier its index picks (a
/// key keeps its tier: what a tiered limiter pays when tiers do not change).
template <class Model>
class TieredFixture final : public Fixture {
public:
    using Lim = ratelimit::TieredLimiter<Model>;

    TieredFixture(std::size_t keyCount, bool denied)
        : limiter(tiers(denied), ratelimit::MemoryStorage{}), keys(keySet(keyCount)) {
        for (std::size_t i = 0; i < keys.size(); ++i) {
            benchmark::DoNotOptimize(
                limiter.tryAcquire(keys[i], tierOf(i), denied ? kDeniedCount : 1));
        }
    }

    static typename Lim::TierId tierOf(std::size_t keyIndex) noexcept {
        return static_cast<typename Lim::TierId>(keyIndex % 3);
    }

    Lim limiter;
    const std::vector<std::string>& keys;

private:
    static std::vector<typename Lim::Tier> tiers(bool denied) {
        const ratelimit::LimitOf<Model> limit =
            denied ? Denied<Model>::make() : allowedLimit<Model>();
        return {{"free", limit}, {"pro", limit}, {"enterprise", limit}};
    }
};

template <class Model>
void BM_Tiered(benchmark::State& state) {
    const RowArgs args = rowArgs(state);
    auto& f = sharedFixture<TieredFixture<Model>>(
        fixtureId("tiered+" + std::string(Model::kName), args.keys, args.denied), args.keys,
        args.denied);
    runRow(state, f.keys, args, [&f](std::size_t i, std::string_view key, std::int64_t cost) {
        return f.limiter.tryAcquire(key, TieredFixture<Model>::tierOf(i), cost);
    });
}

template <class Model>
void BM_LimiterGivenNow(benchmark::State& state) {
    const RowArgs args = rowArgs(state);
    auto& f = limiterFixture<Model>(args, Attached::kNothing);
    const typename LimiterFixture<Model>::Lim::time_point now = f.limiter.clock().now();
    runRow(state, f.keys, args, [&f, now](std::size_t, std::string_view key, std::int64_t cost) {
        return f.limiter.tryAcquire(key, cost, now);
    });
}

// ---------------------------------------------------------------------------------------------
// Baselines.

std::int64_t nowNs(const ratelimit::SteadyClock& clock) noexcept {
    return clock.now().time_since_epoch().count();
}

void BM_Baseline_ClockRead(benchmark::State& state) {
    const ratelimit::SteadyClock clock;
    for (auto _ : state) {
        const auto t = clock.now();
        benchmark::DoNotOptimize(t);
    }
    state.SetItemsProcessed(state.iterations());
}

/// A GCRA's theoretical arrival time (ns) alone in one std::atomic<int64_t>, swapped by a
/// compare-and-swap of its 8 bytes: what a folly-style single-word bucket keeps per key.
class OneWordTat {
public:
    using Seen = std::int64_t;

    static bool available() noexcept { return true; }
    Seen load() const noexcept { return tat_.load(std::memory_order_relaxed); }
    static std::int64_t tatOf(Seen seen) noexcept { return seen; }
    bool replace(Seen& seen, std::int64_t tat, std::int64_t /*now*/) noexcept {
        return tat_.compare_exchange_weak(seen, tat, std::memory_order_acq_rel,
                                          std::memory_order_relaxed);
    }

private:
    std::atomic<std::int64_t> tat_{0};
};

/// The same time beside a second word, the time of its last write (as a bucket's state keeps
/// its `last` beside its deficit), the two swapped by one 16-byte compare-and-swap, as the
/// memory table swaps a bucket's state: what the second word costs the floor.
class TwoWordTat {
public:
    using Seen = ratelimit::detail::WordPair;

    static bool available() noexcept { return ratelimit::detail::hasWordPairCas(); }
    Seen load() noexcept { return ratelimit::detail::loadWords(words_); }
    static std::int64_t tatOf(const Seen& seen) noexcept {
        return static_cast<std::int64_t>(seen.low);
    }
    bool replace(Seen& seen, std::int64_t tat, std::int64_t now) noexcept {
        return ratelimit::detail::compareExchangeWords(
            words_, seen, {static_cast<std::uint64_t>(tat), static_cast<std::uint64_t>(now)});
    }

private:
    ratelimit::detail::WordPair words_;
};

/// GCRA's step on one theoretical arrival time (`Tat`), advanced by a CAS loop: the step every
/// atomic baseline shares.
class Gcra {
public:
    explicit Gcra(bool denied)
        : params_(bucketParams(denied)), tolerance_(params_.burst * params_.intervalNs) {}

    template <class Tat>
    Decision decide(Tat& tat, std::int64_t cost, std::int64_t now) const noexcept {
        const std::int64_t increment = cost * params_.intervalNs;
        typename Tat::Seen seen = tat.load();
        Decision d;
        d.limit = params_.burst;
        for (;;) {
            const std::int64_t base = std::max(Tat::tatOf(seen), now);
            const std::int64_t ahead = base + increment - now;  // new TAT - now
            if (ahead > tolerance_) {
                d.remaining = (tolerance_ - (base - now)) / params_.intervalNs;
                d.retryAfter = nanoseconds{ahead - tolerance_};
                d.resetAfter = nanoseconds{base - now};
                return d;
            }
            if (tat.replace(seen, base + increment, now)) {
                d.allowed = true;
                d.remaining = (tolerance_ - ahead) / params_.intervalNs;
                d.resetAfter = nanoseconds{ahead};
                return d;
            }
        }
    }

private:
    BucketParams params_;
    std::int64_t tolerance_;
};

/// GCRA on one theoretical arrival time per key position (`Tat`), advanced by a CAS loop. Key
/// i uses slot i: no lookup. Made only where `Tat::available()` (`atomicGcraFixture`).
template <class Tat>
class AtomicGcraFixture final : public Fixture {
public:
    AtomicGcraFixture(std::size_t keyCount, bool denied)
        : keys(keySet(keyCount)), gcra_(denied), tats_(std::make_unique<Tat[]>(keyCount)) {
        const std::int64_t now = nowNs(clock);
        for (std::size_t i = 0; i < keyCount; ++i) {
            benchmark::DoNotOptimize(decide(i, denied ? kDeniedCount : 1, now));
        }
    }

    Decision decide(std::size_t index, std::int64_t cost, std::int64_t now) noexcept {
        return gcra_.decide(tats_[index], cost, now);
    }

    const ratelimit::SteadyClock clock;
    const std::vector<std::string>& keys;

private:
    Gcra gcra_;
    std::unique_ptr<Tat[]> tats_;
};

template <class Tat>
AtomicGcraFixture<Tat>* atomicGcraFixture(benchmark::State& state, const RowArgs& args) {
    if (!Tat::available()) {
        state.SkipWithError("no 16-byte compare-and-swap on this processor or build");
        return nullptr;
    }
    const std::string kind = std::is_same_v<Tat, OneWordTat> ? "atomic_gcra" : "atomic_gcra_pair";
    return &sharedFixture<AtomicGcraFixture<Tat>>(fixtureId(kind, args.keys, args.denied),
                                                  args.keys, args.denied);
}

template <class Tat>
void BM_Baseline_AtomicGcra(benchmark::State& state) {
    const RowArgs args = rowArgs(state);
    auto* f = atomicGcraFixture<Tat>(state, args);
    if (f == nullptr) {
        return;
    }
    runRow(state, f->keys, args, [f](std::size_t i, std::string_view, std::int64_t cost) {
        return f->decide(i, cost, nowNs(f->clock));
    });
}

template <class Tat>
void BM_Baseline_AtomicGcra_GivenNow(benchmark::State& state) {
    const RowArgs args = rowArgs(state);
    auto* f = atomicGcraFixture<Tat>(state, args);
    if (f == nullptr) {
        return;
    }
    const std::int64_t now = nowNs(f->clock);
    runRow(state, f->keys, args, [f, now](std::size_t i, std::string_view, std::int64_t cost) {
        return f->decide(i, cost, now);
    });
}

/// The atomic GCRA found by its key: the least a keyed limiter does before its step, with the
/// library's own pieces. The key is hashed by the low half of the library's short-key hash
/// (keyed by a seed, as hostile keys require; GCC drops the fold only the high half needs),
/// its slot is found by linear probing in a table of a power of two 32-byte slots at most
/// half full, and the slot's key is compared as the table compares it (`KeyBytes`); then the
/// same compare-and-swap as `AtomicGcra`. No locks, no growth, no second group, no marks: what
/// a keyed lookup alone adds to the floor, under the hot-key and 100k-key bounds.
class KeyedGcraFixture final : public Fixture {
public:
    KeyedGcraFixture(std::size_t keyCount, bool denied)
        : keys(keySet(keyCount)),
          gcra_(denied),
          mask_(std::bit_ceil(2 * keyCount) - 1),
          slots_(std::make_unique<Slot[]>(mask_ + 1)) {
        for (const std::string& key : keys) {
            assert(key.size() <= ratelimit::detail::KeyBytes::kInline);  // kept whole in a slot
            std::size_t i = hash_(key).low;
            while (slots_[i & mask_].length != 0) {
                ++i;
            }
            Slot& s = slots_[i & mask_];
            s.length = static_cast<std::uint8_t>(key.size());
            s.key = ratelimit::detail::KeyBytes::padded(key);
        }
        const std::int64_t now = nowNs(clock);
        for (const std::string& key : keys) {
            benchmark::DoNotOptimize(decide(key, denied ? kDeniedCount : 1, now));
        }
    }

    /// The bench's keys all have slots: a key without one is refused.
    Decision decide(std::string_view key, std::int64_t cost, std::int64_t now) noexcept {
        const ratelimit::detail::KeyBytes wanted = ratelimit::detail::KeyBytes::padded(key);
        for (std::size_t i = hash_(key).low;; ++i) {
            Slot& s = slots_[i & mask_];
            if (s.length == key.size() && wanted.matches(s.key)) {
                return gcra_.decide(s.tat, cost, now);
            }
            if (s.length == 0) {
                return Decision{};
            }
        }
    }

    const ratelimit::SteadyClock clock;
    const std::vector<std::string>& keys;

private:
    // Aligned to its size, as the table's slots are: no slot straddles two cache lines.
    struct alignas(32) Slot {
        ratelimit::detail::KeyBytes key;
        std::uint8_t length = 0;  // 0: empty (the bench's keys are 15 bytes)
        OneWordTat tat;
    };
    static_assert(sizeof(Slot) == 32);

    Gcra gcra_;
    // Fixed seeds: the same table every run.
    const ratelimit::detail::ShortKeyHash hash_{0x243f6a8885a308d3, 0x13198a2e03707344,
                                                0xa4093822299f31d0, 0x082efa98ec4e6c89};
    std::size_t mask_;
    std::unique_ptr<Slot[]> slots_;
};

KeyedGcraFixture& keyedGcraFixture(const RowArgs& args) {
    return sharedFixture<KeyedGcraFixture>(fixtureId("keyed_gcra", args.keys, args.denied),
                                           args.keys, args.denied);
}

void BM_Baseline_KeyedGcra(benchmark::State& state) {
    const RowArgs args = rowArgs(state);
    auto& f = keyedGcraFixture(args);
    runRow(state, f.keys, args, [&f](std::size_t, std::string_view key, std::int64_t cost) {
        return f.decide(key, cost, nowNs(f.clock));
    });
}

void BM_Baseline_KeyedGcra_GivenNow(benchmark::State& state) {
    const RowArgs args = rowArgs(state);
    auto& f = keyedGcraFixture(args);
    const std::int64_t now = nowNs(f.clock);
    runRow(state, f.keys, args, [&f, now](std::size_t, std::string_view key, std::int64_t cost) {
        return f.decide(key, cost, now);
    });
}

/// The naive keyed limiter: one mutex, one std::unordered_map<std::string, bucket> (looked up
/// by string_view, no temporary string), a double token bucket refilled on every call.
class MutexMapFixture final : public Fixture {
public:
    MutexMapFixture(std::size_t keyCount, bool denied)
        : keys(keySet(keyCount)),
          burst_(bucketParams(denied).burst),
          ratePerNs_(1.0 / static_cast<double>(bucketParams(denied).intervalNs)) {
        map_.reserve(keyCount);
        const std::int64_t now = nowNs(clock);
        for (const std::string& key : keys) {
            benchmark::DoNotOptimize(decide(key, denied ? kDeniedCount : 1, now));
        }
    }

    Decision decide(std::string_view key, std::int64_t cost, std::int64_t now) {
        const double burst = static_cast<double>(burst_);
        const double wanted = static_cast<double>(cost);
        Decision d;
        d.limit = burst_;
        const std::lock_guard<std::mutex> lock(mutex_);
        auto it = map_.find(key);
        if (it == map_.end()) {
            it = map_.try_emplace(std::string(key), Bucket{burst, now}).first;
        }
        Bucket& b = it->second;
        if (now > b.last) {
            b.tokens = std::min(burst, b.tokens + static_cast<double>(now - b.last) * ratePerNs_);
            b.last = now;
        }
        if (b.tokens >= wanted) {
            b.tokens -= wanted;
            d.allowed = true;
        } else {
            d.retryAfter =
                nanoseconds{static_cast<std::int64_t>(std::ceil((wanted - b.tokens) / ratePerNs_))};
        }
        d.remaining = static_cast<std::int64_t>(b.tokens);
        d.resetAfter =
            nanoseconds{static_cast<std::int64_t>(std::ceil((burst - b.tokens) / ratePerNs_))};
        return d;
    }

    const ratelimit::SteadyClock clock;
    const std::vector<std::string>& keys;

private:
    struct Bucket {
        double tokens;
        std::int64_t last;
    };
    struct Hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const noexcept {
            return std::hash<std::string_view>{}(s);
        }
    };

    std::int64_t burst_;
    double ratePerNs_;
    std::mutex mutex_;
    std::unordered_map<std::string, Bucket, Hash, std::equal_to<>> map_;
};

void BM_Baseline_MutexMap(benchmark::State& state) {
    const RowArgs args = rowArgs(state);
    auto& f = sharedFixture<MutexMapFixture>(fixtureId("mutex_map", args.keys, args.denied),
                                             args.keys, args.denied);
    runRow(state, f.keys, args, [&f](std::size_t, std::string_view key, std::int64_t cost) {
        return f.decide(key, cost, nowNs(f.clock));
    });
}

// ---------------------------------------------------------------------------------------------
// Registration. Arguments are ordered keys, denied, cost so that consecutive rows (cost varies
// fastest, then the thread count) share one populated fixture.

void fullMatrix(benchmark::internal::Benchmark* b) {
    b->ArgNames({"keys", "denied", "cost"})
        ->ArgsProduct({{1, 100'000, 1'000'000}, {0, 1}, {1, 10}})
        ->ThreadRange(1, 4)
        ->UseRealTime();
}

void givenNowMatrix(benchmark::internal::Benchmark* b) {
    b->ArgNames({"keys", "denied", "cost"})
        ->ArgsProduct({{1, 100'000}, {0}, {1}})
        ->Threads(1)
        ->UseRealTime();
}

void pairMatrix(benchmark::internal::Benchmark* b) {
    b->ArgNames({"keys", "denied", "cost"})
        ->ArgsProduct({{1, 100'000}, {0}, {1}})
        ->ThreadRange(1, 2)
        ->UseRealTime();
}

template <class Model>
void registerAlgorithm(const std::string& name) {
    benchmark::RegisterBenchmark(("BM_" + name + "_Memory").c_str(), &BM_Limiter<Model>)
        ->Apply(fullMatrix);
    benchmark::RegisterBenchmark(("BM_" + name + "_Memory_GivenNow").c_str(),
                                 &BM_LimiterGivenNow<Model>)
        ->Apply(givenNowMatrix);
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::RegisterBenchmark("BM_Baseline_ClockRead", &BM_Baseline_ClockRead)
        ->ThreadRange(1, 4)
        ->UseRealTime();
    benchmark::RegisterBenchmark("BM_Baseline_AtomicGcra", &BM_Baseline_AtomicGcra<OneWordTat>)
        ->Apply(fullMatrix);
    benchmark::RegisterBenchmark("BM_Baseline_AtomicGcra_GivenNow",
                                 &BM_Baseline_AtomicGcra_GivenNow<OneWordTat>)
        ->Apply(givenNowMatrix);
    // The floor with a bucket's 16-byte word pair: what one 64-bit word would save the buckets.
    benchmark::RegisterBenchmark("BM_Baseline_AtomicGcraPair", &BM_Baseline_AtomicGcra<TwoWordTat>)
        ->Apply(pairMatrix);
    benchmark::RegisterBenchmark("BM_Baseline_AtomicGcraPair_GivenNow",
                                 &BM_Baseline_AtomicGcra_GivenNow<TwoWordTat>)
        ->Apply(givenNowMatrix);
    // The floor with a keyed lookup: the library's hash, a probe and a key compare before the
    // same step.
    benchmark::RegisterBenchmark("BM_Baseline_KeyedGcra", &BM_Baseline_KeyedGcra)
        ->Apply(pairMatrix);
    benchmark::RegisterBenchmark("BM_Baseline_KeyedGcra_GivenNow", &BM_Baseline_KeyedGcra_GivenNow)
        ->Apply(givenNowMatrix);
    benchmark::RegisterBenchmark("BM_Baseline_MutexMap", &BM_Baseline_MutexMap)->Apply(fullMatrix);

    registerAlgorithm<ratelimit::TokenBucketModel>("TokenBucket");
    registerAlgorithm<ratelimit::LeakyBucketModel>("LeakyBucket");
    registerAlgorithm<ratelimit::FixedWindowModel>("FixedWindow");
    registerAlgorithm<ratelimit::SlidingCounterModel>("SlidingCounter");
    registerAlgorithm<ratelimit::SlidingLogModel>("SlidingLog");
    // A limit set of two members against its members alone (the rows above): what the set
    // costs per check.
    benchmark::RegisterBenchmark(
        "BM_Set_TokenBucket_FixedWindow_Memory",
        &BM_Limiter<ratelimit::LimitSet<ratelimit::TokenBucketModel, ratelimit::FixedWindowModel>>)
        ->Apply(givenNowMatrix);
    // A penalty no key meets, and tiers no key changes, against the token bucket alone: what
    // each decorator costs per check.
    benchmark::RegisterBenchmark(
        "BM_Penalized_TokenBucket_Memory",
        &BM_Limiter<ratelimit::PenalizedModel<ratelimit::TokenBucketModel>>)
        ->Apply(givenNowMatrix);
    benchmark::RegisterBenchmark("BM_Tiered_TokenBucket_Memory",
                                 &BM_Tiered<ratelimit::TokenBucketModel>)
        ->Apply(givenNowMatrix);
    benchmark::RegisterBenchmark("BM_TokenBucket_Memory_Hook",
                                 &BM_LimiterHook<ratelimit::TokenBucketModel>)
        ->Apply(givenNowMatrix);
    // A DecisionMetrics listener: an admission's count, and a refusal's summaries too.
    benchmark::RegisterBenchmark("BM_TokenBucket_Memory_Metrics",
                                 &BM_LimiterMetrics<ratelimit::TokenBucketModel>)
        ->ArgNames({"keys", "denied", "cost"})
        ->ArgsProduct({{1, 100'000}, {0, 1}, {1}})
        ->ThreadRange(1, 2)
        ->UseRealTime();

    benchmark::AddCustomContext("ratelimit_max_keys", "1000000 (MemoryStorage default)");
    benchmark::Initialize(&argc, argv);
    constexpr std::string_view kKeyOrderFlag = "--key_order=";
    const auto keyOrder = std::find_if(argv + 1, argv + argc, [&](const char* arg) {
        return std::string_view(arg).starts_with(kKeyOrderFlag);
    });
    if (keyOrder != argv + argc) {
        const std::string_view order = std::string_view(*keyOrder).substr(kKeyOrderFlag.size());
        if (order != "shuffled" && order != "sequential") {
            std::fprintf(stderr, "--key_order: 'sequential' or 'shuffled', not '%.*s'\n",
                         static_cast<int>(order.size()), order.data());
            return 1;
        }
        gShuffledNames = order == "shuffled";
        std::copy(keyOrder + 1, argv + argc + 1, keyOrder);  // argv[argc], null, with them
        --argc;
    }
    benchmark::AddCustomContext("key_order", gShuffledNames ? "shuffled" : "sequential");
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
        return 1;
    }
    benchmark::RunSpecifiedBenchmarks();
    releaseFixture();
    benchmark::Shutdown();
    return 0;
}
