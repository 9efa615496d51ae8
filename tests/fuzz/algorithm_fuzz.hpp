#pragma once

// The driver of the per-algorithm fuzz targets (tests/fuzz/<algorithm>_fuzz.cpp).
//
// An input is a quota (with its late-call tolerance) and a sequence of calls (time step, cost,
// key). The driver runs them on a real `Limiter<Model, MemoryStorage, ManualClock>` and aborts on
// the first violation of:
//   - the reference (tests/support/algorithm_references.hpp): every field of every decision,
//     exactly;
//   - docs/semantics.md's rules, checked through the limiter alone: `remaining` never negative and
//     "allowed exactly when cost <= remaining before"; `retryAfter` zero when allowed, `kNever`
//     exactly for a cost above the limit, and the smallest wait (a call at now + retryAfter
//     passes, one tick earlier does not); at now + resetAfter the key is fresh, one tick earlier
//     it is not; `peek` answers what `tryAcquire` then does; a negative cost throws
//     `std::invalid_argument`; waits stay within one period (two for the sliding counter) or
//     one refill from empty, plus a late call's lateness;
//   - the rolling bound: in the key's own time (which stands still while the clock is behind
//     the key's last write), never more admitted in any span than the algorithm allows (the
//     sliding log `count` per period, the buckets `burst` plus the refill, the fixed window
//     and sliding counter two windows' worth; see each reference's `admittedBound`);
//   - refusals consume nothing: the sequence without its plain refusals (and without its
//     zero and impossible costs) gives the same decisions on a fresh limiter;
//   - determinism: the same sequence on a fresh limiter gives the same decisions.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <ratelimit/clock.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/storage/memory.hpp>

#include "fuzz_support.hpp"
#include "support/algorithm_references.hpp"

namespace rlfuzz {

using ratelimit_test::Event;
using ratelimit_test::Expected;
using ratelimit_test::KeyRef;
using ratelimit_test::kNever;
using ratelimit_test::kUnchecked;
using ratelimit_test::Params;

inline constexpr Int128 kTimeMax = std::numeric_limits<std::int64_t>::max();
/// Generated clock values stay within ±(2^62 − 1) ticks, so the difference of any two fits
/// 64 bits and every epoch-aligned window start is representable: the domain where
/// docs/semantics.md's exact rules apply. The two ends of the clock's range are held by unit tests
/// instead (and by the regression tests in tests/fuzz_regression_test.cpp for what the fuzzers
/// found there).
inline constexpr Int128 kDomain = (Int128{1} << 62) - 1;
inline constexpr std::size_t kMaxCalls = 256;
/// Storage seed and size: fixed so that every run of an input is the same run, and large
/// enough that the sweeps of at most four insertions never reach these four keys' slots (the
/// driver checks this: a swept fresh key would forget its last write).
inline constexpr std::uint64_t kSeed = 0x5eed5eed5eed5eedULL;
inline constexpr std::size_t kMaxKeys = 4096;
/// The largest late-call tolerance a limiter accepts (1 h), in ticks.
inline constexpr std::int64_t kMaxLateTolerance = std::int64_t{3'600'000'000'000};

/// `t` moved into the fuzzed domain.
inline std::int64_t clampTime(Int128 t) {
    return static_cast<std::int64_t>(t > kDomain ? kDomain : (t < -kDomain ? -kDomain : t));
}

/// The keys: empty, short, inline, and one long enough to be stored as a digest (of a length
/// that is no multiple of 8, so hashing it reads a partial last block).
inline const std::array<std::string, 4>& fuzzKeys() {
    static const std::array<std::string, 4> keys{"", "a", "user:42",
                                                 "client/" + std::string(30, 'x')};  // 37 bytes
    return keys;
}

/// One call as it was made, for the replays.
struct Call {
    std::size_t index = 0;
    bool reset = false;
    std::size_t key = 0;
    std::int64_t time = 0;
    std::int64_t cost = 0;
    bool threw = false;
    bool plainRefusalOrNoOp =
        false;  ///< cost 0, a cost above the limit, or a refusal without rebase
    ratelimit::Decision decision{};
};

/// The limiter's own account of a key's time, derived from its decisions alone: used for the
/// rolling bound, so that bound does not depend on the reference.
struct KeyTime {
    bool written = false;
    Int128 lastReal = 0;
    Int128 lastKeyTime = 0;
    bool everSteppedBack = false;
    std::vector<Event> admitted;  ///< key time, cost

    /// How much earlier than the last write a late call at `t` is (0: not a late call).
    [[nodiscard]] Int128 lateness(Int128 t, Int128 tolerance) const {
        return written && t < lastReal && lastReal - t <= tolerance ? lastReal - t : 0;
    }
    [[nodiscard]] bool stepsBack(Int128 t, Int128 tolerance) const {
        return written && t < lastReal && lastReal - t > tolerance;
    }
    [[nodiscard]] Int128 keyTime(Int128 t) const {
        if (!written) {
            return t;
        }
        return t < lastReal ? lastKeyTime : lastKeyTime + (t - lastReal);
    }
};

template <class Model, class Ref>
class AlgorithmFuzzer {
public:
    using Lim = ratelimit::Limiter<Model, ratelimit::MemoryStorage, ratelimit::ManualClock>;
    using TimePoint = ratelimit::ManualClock::time_point;

    static int run(const std::uint8_t* data, std::size_t size) {
        ByteReader in(data, size);
        AlgorithmFuzzer f(in);
        if (!f.limiter_) {
            return 0;  // a quota memory cannot hold; its refusal was checked
        }
        f.explore(in);
        f.replay(f.calls_, "the same sequence on a fresh limiter");
        std::vector<Call> kept;
        for (const Call& c : f.calls_) {
            if (!c.plainRefusalOrNoOp) {
                kept.push_back(c);
            }
        }
        f.replay(kept, "the sequence without its refusals, zero and impossible costs");
        return 0;
    }

private:
    /// What the input's first six bytes say: the quota and the clock's start.
    struct Quota {
        std::int64_t count = 1;
        std::int64_t period = 1;
        std::int64_t burst = 1;
        std::int64_t maxRuns = 64;
        bool explicitTime = false;
        std::int64_t lateTolerance = 0;  ///< ns
        std::int64_t start = 0;
    };

    explicit AlgorithmFuzzer(ByteReader& in) : AlgorithmFuzzer(decodeQuota(in)) {}

    // makeLimiter reads the quota's members, which are declared (so initialized) before limiter_.
    explicit AlgorithmFuzzer(const Quota& q)
        : quota_(q),
          params_{q.count, q.period, q.burst, q.maxRuns, q.lateTolerance},
          limitValue_(Ref::kBucket ? params_.burst : params_.count),
          time_(q.start),
          limiter_(makeLimiter(clock_)) {}

    // -----------------------------------------------------------------------------------------
    // Decoding

    static std::int64_t pick(std::uint8_t b, std::int64_t smallMax,
                             const std::vector<std::int64_t>& large) {
        if (b < 224 || large.empty()) {
            return 1 + b % smallMax;
        }
        return large[static_cast<std::size_t>(b - 224) % large.size()];
    }

    static Quota decodeQuota(ByteReader& in) {
        constexpr std::int64_t k48 = std::int64_t{1} << 48;
        constexpr std::int64_t k61 = std::int64_t{1} << 61;
        const std::uint8_t countByte = in.byte();
        const std::uint8_t periodByte = in.byte();
        const std::uint8_t burstByte = in.byte();
        const std::uint8_t startByte = in.byte();
        const std::uint8_t runsByte = in.byte();
        const std::uint8_t flags = in.byte();
        Quota q;
        q.count = pick(countByte, 12, {100, 1000, 65537, std::int64_t{1} << 24, k48 - 1, k48});
        q.period = pick(periodByte, 40,
                        {1000, 1 << 20, std::int64_t{3} << 40, k61 - 1, k61, 2 * k61 - 1, 7});
        q.burst = burstByte < 32 ? q.count : pick(burstByte, 12, {100, 4097, k48, q.count * 2});
        if (q.burst > k48) {
            q.burst = k48;
        }
        static constexpr std::array<std::int64_t, 8> kRuns{1, 2, 3, 4, 8, 64, 64, 64};
        q.maxRuns = kRuns[runsByte % kRuns.size()];
        q.explicitTime = (flags & 1U) != 0;
        // Late-call tolerance: 0 (every step back rebases), the default, a few ticks, or half a
        // period; so steps back of every size meet both rules.
        const std::array<std::int64_t, 4> tolerances{
            0, std::chrono::nanoseconds{ratelimit::LimiterOptions{}.lateCallTolerance}.count(), 16,
            std::min<std::int64_t>(q.period / 2, kMaxLateTolerance)};
        q.lateTolerance = tolerances[(flags >> 1U) % tolerances.size()];
        const Int128 p = q.period;
        const std::array<Int128, 8> starts{
            0, -1, p * 3 - 1, -p * 5 + 2, -kDomain + 17, kDomain - 40, Int128{1} << 61, 1};
        q.start = clampTime(starts[startByte % starts.size()] + (startByte / 8));
        return q;
    }

    [[nodiscard]] std::optional<Lim> makeLimiter(const ratelimit::ManualClock& clock) const {
        const ratelimit::Limit limit =
            ratelimit::Limit::per(quota_.count, std::chrono::nanoseconds{quota_.period})
                .withBurst(quota_.burst);
        ratelimit::MemoryStorage::Options storage;
        storage.maxKeys = kMaxKeys;
        storage.spillEntries = 4;
        storage.seed = kSeed;
        ratelimit::LimiterOptions options;
        options.maxRunsPerKey = quota_.maxRuns;
        options.lateCallTolerance = std::chrono::nanoseconds{quota_.lateTolerance};
        try {
            return Lim{limit, ratelimit::MemoryStorage{storage}, clock, options};
        } catch (const std::invalid_argument&) {
            // Memory holds spans and bucket units below 2^62 (docs/semantics.md, "representable"):
            // a quota whose every magnitude is far below that must be accepted.
            const Int128 bound = Int128{1} << 61;
            const Int128 units = Int128{quota_.burst} * quota_.period;
            if (2 * Int128{quota_.period} < bound && units < bound) {
                fail("the limiter refused a representable quota: " + describeQuota());
            }
            return std::nullopt;
        }
    }

    [[nodiscard]] std::string describeQuota() const {
        return "count=" + std::to_string(quota_.count) +
               " period=" + std::to_string(quota_.period) +
               "ns burst=" + std::to_string(quota_.burst) +
               " maxRuns=" + std::to_string(quota_.maxRuns) +
               " lateTolerance=" + std::to_string(quota_.lateTolerance) + "ns" +
               (quota_.explicitTime ? " (explicit times)" : " (clock)");
    }

    /// The next call's time from one byte: mostly small steps, often none, sometimes a step
    /// back, a jump to the key's last retry or reset time, or a huge leap.
    [[nodiscard]] std::int64_t nextTime(std::uint8_t b, std::size_t key) const {
        const Int128 now = time_;
        const Int128 p = quota_.period;
        const Int128 small = p < 64 ? p : 64;
        if (b < 128) {
            return clampTime(now + b % (small + 2));
        }
        if (b < 160) {
            return time_;
        }
        if (b < 200) {
            return clampTime(now + (b - 159) * (p / 4 > 0 ? p / 4 : 1));
        }
        if (b < 240) {
            const Int128 step = b < 220 ? 1 + (b - 200) % (small + 1) : (b - 219) * (p / 8 + 1);
            return clampTime(now - step);
        }
        if (b < 248) {
            return retryAt_[key] ? clampTime(*retryAt_[key]) : time_;
        }
        if (b < 252) {
            return resetAt_[key] ? clampTime(*resetAt_[key]) : time_;
        }
        const Int128 leap = Int128{1} << (40 + 7 * (b - 252));
        return clampTime((b % 2 == 0) ? now + leap : now - leap);
    }

    [[nodiscard]] std::int64_t nextCost(std::uint8_t b) const {
        const auto limit = static_cast<std::int64_t>(limitValue_);
        if (b < 200) {
            return static_cast<std::int64_t>(b % (limitValue_ + 2));
        }
        if (b < 240) {
            return limit;
        }
        if (b < 250) {
            return 1;
        }
        switch (b) {
            case 250:
                return limit + 1;
            case 251:
                return std::numeric_limits<std::int64_t>::max();
            case 252:
                return (std::int64_t{1} << 48) + 1;
            case 253:
                return -1;
            case 254:
                return std::numeric_limits<std::int64_t>::min();
            default:
                return 0;
        }
    }

    // -----------------------------------------------------------------------------------------
    // The exploring run: reference, rules and bounds checked on every call

    void explore(ByteReader& in) {
        while (in.left() >= 3 && calls_.size() < kMaxCalls) {
            const std::uint8_t timeByte = in.byte();
            const std::uint8_t costByte = in.byte();
            const std::uint8_t keyByte = in.byte();
            const std::size_t key = keyByte % 4U;
            time_ = nextTime(timeByte, key);
            Call c;
            c.index = calls_.size();
            c.key = key;
            c.time = time_;
            if (keyByte >= 252) {
                c.reset = true;
                limiter_->reset(fuzzKeys()[key]);
                refs_[key] = KeyRef<Ref>{};
                keyTimes_[key] = KeyTime{};
                retryAt_[key].reset();
                resetAt_[key].reset();
            } else {
                c.cost = nextCost(costByte);
                check(c);
            }
            calls_.push_back(c);
            checkTrackedKeys();
        }
    }

    /// `tryAcquire` at `t`: passed explicitly, or set on the limiter's clock and read by it.
    ratelimit::Decision acquire(Lim& limiter, ratelimit::ManualClock& clock, std::size_t key,
                                std::int64_t cost, std::int64_t t) const {
        if (quota_.explicitTime) {
            return limiter.tryAcquire(fuzzKeys()[key], cost,
                                      TimePoint{std::chrono::nanoseconds{t}});
        }
        clock.set(std::chrono::nanoseconds{t});
        return limiter.tryAcquire(fuzzKeys()[key], cost);
    }

    ratelimit::Decision peekAt(std::size_t key, std::int64_t cost, Int128 t) {
        return limiter_->peek(fuzzKeys()[key], cost,
                              TimePoint{std::chrono::nanoseconds{static_cast<std::int64_t>(t)}});
    }

    void check(Call& c) {
        const std::size_t key = c.key;
        const Int128 t = c.time;
        const Int128 cost = c.cost;
        if (c.cost < 0) {
            c.threw =
                throwsInvalidArgument([&] { acquire(*limiter_, clock_, key, c.cost, c.time); }) &&
                throwsInvalidArgument([&] { peekAt(key, c.cost, t); });
            c.plainRefusalOrNoOp = true;
            expect(c.threw, c, "a negative cost throws std::invalid_argument");
            return;
        }
        const ratelimit::Decision before = peekAt(key, 0, t);
        const ratelimit::Decision peeked = peekAt(key, c.cost, t);
        const typename KeyRef<Ref>::Call ref = refs_[key].call(params_, t, cost);
        const ratelimit::Decision d = acquire(*limiter_, clock_, key, c.cost, c.time);
        c.decision = d;
        if (trace()) {
            // A trace line lost to a failing stderr changes nothing the run checks.
            (void)std::fprintf(stderr, "%s -> %s\n", describeCall(c).c_str(), describe(d).c_str());
        }
        KeyTime& kt = keyTimes_[key];
        const Int128 late = kt.lateness(t, quota_.lateTolerance);
        const bool steppedBack = kt.stepsBack(t, quota_.lateTolerance);
        const bool writes =
            (d.allowed && cost > 0) || (steppedBack && cost >= 1 && cost <= limitValue_);
        c.plainRefusalOrNoOp = !writes;

        // The reference, field by field. The GCRA may differ from the token bucket in its waits
        // (never in admissions) once its key has stepped back.
        const bool exactWaits = !(isGcra() && (kt.everSteppedBack || steppedBack));
        const Expected& e = ref.expected;
        expect(d.allowed == e.allowed, c, "allowed as the reference", e);
        expect(d.limit == e.limit, c, "limit as the reference", e);
        expect(d.remaining == e.remaining, c, "remaining as the reference", e);
        if (exactWaits) {
            expect(ticksOf(d.retryAfter) == e.retry, c, "retryAfter as the reference", e);
            expect(ticksOf(d.resetAfter) == e.reset, c, "resetAfter as the reference", e);
        }
        expect(ref.steppedBack == steppedBack, c, "the reference and the limiter agree on steps");
        expect(ref.lateness == late, c, "the reference and the limiter agree on late calls");

        // docs/semantics.md's rules, from the limiter alone.
        expect(peeked == d, c, "peek answers what tryAcquire then does");
        expect(d.remaining >= 0, c, "remaining is never negative");
        expect(d.limit == limitValue_, c, "limit is count (windows) or burst (buckets)");
        expect(!d.degraded && d.policy == 0, c,
               "memory never degrades; a single limit is policy 0");
        expect((cost > limitValue_) == d.never(), c, "kNever exactly for a cost above the limit");
        expect(!d.never() || !d.allowed, c, "a cost that can never pass is refused");
        expect(d.allowed == (d.retryAfter.count() == 0), c, "retryAfter is zero when allowed");
        if (cost <= limitValue_) {
            expect(d.allowed == (cost <= before.remaining), c,
                   "allowed exactly when cost <= remaining before the call");
        }
        expect(d.remaining == (d.allowed ? before.remaining - cost : before.remaining), c,
               "an admission spends its cost from remaining; a refusal leaves remaining");
        // A late call's waits count from its own time: longer by its lateness.
        expect(d.never() || ticksOf(d.retryAfter) <= Ref::maxWait(params_) + late, c,
               "retryAfter within one period (two for the sliding counter) or one refill");
        expect(d.resetAfter.count() >= 0 && ticksOf(d.resetAfter) <= Ref::maxWait(params_) + late,
               c, "resetAfter within one period (two for the sliding counter) or one refill");
        if (d.allowed && cost > 0) {
            expect(d.resetAfter.count() > 0, c, "an admission leaves the key not fresh");
        }
        checkWaits(c, d, steppedBack && !writes);

        // The limiter's own key time, and the rolling bound over it.
        const Int128 keyTime = kt.keyTime(t);
        kt.everSteppedBack = kt.everSteppedBack || steppedBack;
        if (d.allowed && cost > 0) {
            kt.admitted.push_back({keyTime, cost});
            checkRollingBound(kt, keyTime, c);
        }
        if (writes) {
            kt.written = true;
            kt.lastReal = t + late;  // a late call writes at the last write
            kt.lastKeyTime = keyTime;
        }
        if (!d.allowed && !d.never()) {
            retryAt_[key] = t + ticksOf(d.retryAfter);
        }
        resetAt_[key] = t + ticksOf(d.resetAfter);
    }

    /// A call at now + retryAfter passes and one a tick earlier does not; at now + resetAfter the
    /// key is fresh and a tick earlier it is not. (A call that stepped back and wrote nothing
    /// reports as if rebased, so its times are measured from a rebase that did not happen.)
    void checkWaits(const Call& c, const ratelimit::Decision& d, bool unrebased) {
        if (unrebased) {
            return;
        }
        const Int128 t = c.time;
        if (!d.allowed && !d.never()) {
            const Int128 retry = ticksOf(d.retryAfter);
            expect(retry > 0, c, "a refusal waits at least one tick");
            if (t + retry <= kTimeMax) {
                expect(peekAt(c.key, c.cost, t + retry).allowed, c,
                       "a call at now + retryAfter passes");
                expect(!peekAt(c.key, c.cost, t + retry - 1).allowed, c,
                       "retryAfter is the smallest wait: a tick earlier is refused");
            }
        }
        const Int128 reset = ticksOf(d.resetAfter);
        if (t + reset <= kTimeMax) {
            const ratelimit::Decision later = peekAt(c.key, 0, t + reset);
            expect(later.remaining == limitValue_ && later.resetAfter.count() == 0, c,
                   "at now + resetAfter the key is fresh");
            if (reset > 0) {
                expect(peekAt(c.key, 0, t + reset - 1).resetAfter.count() > 0, c,
                       "resetAfter is the smallest: a tick earlier the key is not yet fresh");
            }
        }
    }

    /// No span of key time holds more admissions than the algorithm allows: the sliding log
    /// `count` in any `(x − W, x]`; the fixed window and sliding counter `2·count` there; the
    /// buckets `burst + span·count/period` in any `[a, b]`.
    void checkRollingBound(const KeyTime& kt, Int128 now, const Call& c) const {
        if constexpr (Ref::kBucket) {
            Int128 sum = 0;
            for (std::size_t i = kt.admitted.size(); i-- > 0;) {
                sum += kt.admitted[i].cost;
                const Int128 span = now - kt.admitted[i].time;
                expect(
                    sum * params_.period <= params_.burst * params_.period + span * params_.count,
                    c, "a bucket admits at most burst + span·count/period in any span");
            }
        } else {
            Int128 sum = 0;
            for (const Event& e : kt.admitted) {
                if (now - e.time < params_.period) {
                    sum += e.cost;
                }
            }
            const Int128 bound = Ref::admittedBound(params_, kt.everSteppedBack);
            expect(bound == kUnchecked || sum <= bound, c,
                   "never more admitted in a period than the rolling bound allows");
        }
    }

    /// The storage holds exactly the keys that were ever written: no sweep reached one of them
    /// (a harness assumption; see kSeed).
    void checkTrackedKeys() {
        std::size_t written = 0;
        for (std::size_t k = 0; k < 4; ++k) {
            for (const Call& c : calls_) {
                if (c.key == k && !c.reset && c.cost >= 1 && c.cost <= limitValue_) {
                    ++written;
                    break;
                }
            }
        }
        if (limiter_->storage().stats().trackedKeys != written) {
            fail("harness assumption: a sweep freed one of the fuzzed keys; change kSeed");
        }
    }

    // -----------------------------------------------------------------------------------------
    // Replays

    void replay(const std::vector<Call>& calls, const std::string& what) const {
        ratelimit::ManualClock clock;
        std::optional<Lim> limiter = makeLimiter(clock);
        if (!limiter) {
            fail("a quota accepted once is refused on replay");
        }
        for (const Call& c : calls) {
            if (c.reset) {
                limiter->reset(fuzzKeys()[c.key]);
                continue;
            }
            if (c.cost < 0) {
                const bool threw =
                    throwsInvalidArgument([&] { acquire(*limiter, clock, c.key, c.cost, c.time); });
                expect(threw, c, what + ": a negative cost throws again");
                continue;
            }
            const ratelimit::Decision d = acquire(*limiter, clock, c.key, c.cost, c.time);
            if (!(d == c.decision)) {
                fail(what + " decided differently: " + describeCall(c) +
                     "\n  first run: " + describe(c.decision) + "\n  replay:    " + describe(d));
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Reporting

    template <class F>
    static bool throwsInvalidArgument(F&& f) {
        try {
            f();
        } catch (const std::invalid_argument&) {
            return true;
        }
        return false;
    }

    /// RLFUZZ_TRACE=1 prints every call (to read a crash input's sequence).
    static bool trace() {
        // NOLINTNEXTLINE(concurrency-mt-unsafe): libFuzzer runs inputs on one thread; no setenv
        static const bool on = std::getenv("RLFUZZ_TRACE") != nullptr;
        return on;
    }

    static bool isGcra() { return std::is_same_v<Model, ratelimit::LeakyBucketModel>; }

    static Int128 ticksOf(std::chrono::nanoseconds d) {
        return d == ratelimit::Decision::kNever ? kNever : Int128{d.count()};
    }

    static std::string describe(const ratelimit::Decision& d) {
        return std::string(d.allowed ? "allowed" : "refused") +
               " limit=" + std::to_string(d.limit) + " remaining=" + std::to_string(d.remaining) +
               " retryAfter=" + (d.never() ? "never" : std::to_string(d.retryAfter.count())) +
               " resetAfter=" + std::to_string(d.resetAfter.count()) +
               (d.degraded ? " degraded" : "") + " policy=" + std::to_string(d.policy);
    }

    static std::string describe(const Expected& e) {
        return std::string(e.allowed ? "allowed" : "refused") + " limit=" + toString(e.limit) +
               " remaining=" + toString(e.remaining) +
               " retryAfter=" + (e.retry == kNever ? "never" : toString(e.retry)) +
               " resetAfter=" + toString(e.reset);
    }

    [[nodiscard]] std::string describeCall(const Call& c) const {
        return "call #" + std::to_string(c.index) + " key=" + std::to_string(c.key) +
               " t=" + std::to_string(c.time) + " cost=" + std::to_string(c.cost) + " [" +
               std::string(Model::kName) + " " + describeQuota() + "]";
    }

    void expect(bool ok, const Call& c, const std::string& rule) const {
        if (!ok) {
            fail(rule + "\n  " + describeCall(c) +
                 (c.cost >= 0 ? "\n  decision: " + describe(c.decision) : std::string()));
        }
    }

    void expect(bool ok, const Call& c, const std::string& rule, const Expected& e) const {
        if (!ok) {
            fail(rule + "\n  " + describeCall(c) + "\n  decision:  " + describe(c.decision) +
                 "\n  reference: " + describe(e));
        }
    }

    Quota quota_;
    Params params_{};
    Int128 limitValue_ = 1;
    std::int64_t time_ = 0;
    ratelimit::ManualClock clock_;
    std::optional<Lim> limiter_;
    std::array<KeyRef<Ref>, 4> refs_{};
    std::array<KeyTime, 4> keyTimes_{};
    std::array<std::optional<Int128>, 4> retryAt_{};
    std::array<std::optional<Int128>, 4> resetAt_{};
    std::vector<Call> calls_;
};

}  // namespace rlfuzz
