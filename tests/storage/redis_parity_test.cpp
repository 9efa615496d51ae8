// Tests of include/ratelimit/storage/redis.hpp: parity with the memory storage ("one behaviour,
// two stores" in docs/semantics.md). The worked scenarios replay on both storages at once, a
// randomized differential run feeds both the same sequences (clock steps back included), and
// spread window resets shift a key's windows alike. Each test starts its own redis-server
// (tests/support/redis_server.hpp).
//
// Simulated time against Redis's real-time TTLs. A ManualClock jumps seconds or hours in a
// microsecond and may step back, while Redis expires keys on its own wall clock. A key that
// Redis keeps longer than the simulation needs is harmless (every model reads a stale state as
// fresh); a key that Redis drops earlier is not: the memory limiter would still hold a state
// Redis forgot. The choices here:
//   - Worked scenarios: one fresh limiter name (so fresh keys) per scenario; the clock only
//     moves forward and every write's TTL is many seconds of real time, far longer than the
//     scenario runs, so Redis never drops a key the simulation still needs.
//   - Randomized differential run: time jumps and steps back, and a TTL can be 2 ms, so after
//     every step the test PERSISTs the key in a small script (PTTL, then PERSIST, atomically)
//     after checking the TTL the step set, and keeps the key's expiry in simulated time
//     instead: once the simulated clock passes `now + resetAfter` of the last write, the memory
//     state must be fresh (checked with a cost-0 peek), and the test either deletes the key on
//     both sides, as Redis would, or keeps it (stale states are tested too). The only window
//     left is between the script's PEXPIRE and the PERSIST (a fraction of a millisecond; the
//     TTL is at least 2 ms): a key lost there on a stalled machine is detected from the elapsed
//     time, the run moves on to a fresh key on both sides, and such stalls are counted and must
//     stay rare (none on an idle machine, a few dozen per 10^4 steps under a parallel build).

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <hiredis/hiredis.h>

#include <ratelimit/redis.hpp>

#include "support/catch.hpp"
#include "support/limiters.hpp"
#include "support/random_traffic.hpp"
#include "support/redis_server.hpp"
#include "support/redis_storage_support.hpp"
#include "support/redis_test_server.hpp"
#include "support/worked_scenarios.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

namespace {

/// Replays `batches` (cost 1 each) on a memory and a Redis limiter with one ManualClock and
/// returns the admissions per batch; every decision must agree between the two.
template <class Model>
std::vector<int> replayOnBoth(const RedisServer& server, const std::string& name,
                              const Limit& limit, const std::vector<Batch>& batches) {
    const RedisStorage storage(storageOptions(server, "rl-scenario"));
    ManualClock clock;
    MemoryLimiter<Model> memory(limit, MemoryStorage{}, clock, limiterOptions(name));
    RedisLimiter<Model> redis(limit, storage, clock, limiterOptions(name));
    const std::string key = "client 42";
    std::vector<int> admitted;
    for (std::size_t b = 0; b < batches.size(); ++b) {
        clock.set(batches[b].at);
        int n = 0;
        for (int i = 0; i < batches[b].requests; ++i) {
            const Decision m = memory.tryAcquire(key);
            const Decision r = redis.tryAcquire(key);
            INFO(Model::kName << " " << name << ": batch " << b << " at " << batches[b].at.count()
                              << "ns, request " << i);
            if (const std::string diff = parity(m, r); !diff.empty()) {
                FAIL(diff);
            }
            n += r.allowed ? 1 : 0;
        }
        admitted.push_back(n);
    }
    // The state was really kept in Redis: the key exists, with a TTL.
    const RedisContextPtr c = connectTo(server);
    CHECK(integerReply(command(c.get(), {"PTTL", redisKeyOf<Model>("rl-scenario", name, key)})) >
          0);
    return admitted;
}

}  // namespace

TEMPLATE_TEST_CASE("RedisStorage: the worked scenarios replay on Redis as in memory",
                   "[redis_storage][redis]", RATELIMIT_TEST_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    // Every decision agrees between the storages, and each algorithm admits per batch what the
    // contract suite's table says (tests/support/worked_scenarios.hpp).
    const std::array<std::string, 3> names = {"scenario-one", "scenario-two", "scenario-three"};
    const std::vector<WorkedScenario> scenarios = workedScenarios(std::chrono::microseconds{1});
    REQUIRE(scenarios.size() == names.size());
    for (std::size_t i = 0; i < scenarios.size(); ++i) {
        const WorkedScenario& scenario = scenarios[i];
        INFO(scenario.name);
        const std::vector<int> admitted =
            replayOnBoth<TestType>(*server, names.at(i), scenario.limit, scenario.batches);
        CHECK(admitted == scenario.outcomes.at(algorithmIndex<TestType>()).admitted);
    }
}

namespace {

struct Case {
    std::int64_t count;
    std::int64_t periodUs;
    std::int64_t burst;
};

/// What a differential run did, for the test's plausibility checks.
struct DiffCounts {
    std::int64_t steps = 0;
    std::int64_t admitted = 0;
    std::int64_t refused = 0;
    std::int64_t peeks = 0;
    std::int64_t writes = 0;
    std::int64_t expiries = 0;
    std::int64_t stepsBack = 0;
    std::int64_t resets = 0;
    std::int64_t stalls = 0;
    std::int64_t scenarios = 0;
};

/// One differential run: a memory and a Redis limiter over one ManualClock, fed the same
/// random sequence. See the file comment for how simulated time and Redis TTLs are kept apart.
template <class Model>
class Differential {
public:
    Differential(const RedisServer& server, Rng& rng)
        : storage_(storageOptions(server, kPrefix)), raw_(connectTo(server)), rng_(rng) {}

    [[nodiscard]] const DiffCounts& counts() const noexcept { return counts_; }

    /// Runs up to `stepCount` steps of one limit; false when a store does not accept the limit.
    bool run(const Case& cs, int index, int stepCount, bool spread) {
        const Limit limit =
            Limit::per(cs.count, std::chrono::microseconds{cs.periodUs}).withBurst(cs.burst);
        LimiterOptions options = limiterOptions("diff-" + std::to_string(index));
        options.maxRunsPerKey = std::vector<std::int64_t>{
            1, 2, 3, 5, 64}[static_cast<std::size_t>(uniform(rng_, 0, 4))];
        options.spreadWindowResets = spread;
        ManualClock clock;
        std::optional<MemoryLimiter<Model>> memory;
        std::optional<RedisLimiter<Model>> redis;
        try {
            memory.emplace(limit, MemoryStorage{MemoryStorage::Options{.maxKeys = 16}}, clock,
                           options);
            redis.emplace(limit, storage_, clock, options);
        } catch (const std::invalid_argument&) {
            return false;  // beyond one store's exact range: not a case for this test
        }
        ++counts_.scenarios;
        const std::int64_t lim = capacityOf<Model>(limit);
        const std::int64_t period = cs.periodUs;
        const std::int64_t interval = std::max<std::int64_t>(1, period / cs.count);

        int generation = 0;
        std::string key = "user:" + std::to_string(index) + ":0";
        std::string redisKey = redisKeyOf<Model>(kPrefix, options.name, key);
        // Around the real epoch in µs, or around the ManualClock's zero (negative times too).
        std::int64_t t = uniform(rng_, 0, 1) == 0
                             ? uniform(rng_, 1'700'000'000'000'000, 1'700'100'000'000'000)
                             : uniform(rng_, -3 * period, 3 * period);
        bool hasKey = false;         // the Redis key exists (persisted by the test)
        std::int64_t lastWrite = 0;  // simulated time of its last write
        std::int64_t expiry = 0;     // lastWrite + its resetAfter: fresh from then on
        std::int64_t lastRemaining = lim;

        for (int i = 0; i < stepCount; ++i) {
            const std::int64_t move = randomMove(rng_, period, interval);
            counts_.stepsBack += move < 0 ? 1 : 0;
            t += move;
            clock.set(std::chrono::microseconds{t});

            const std::int64_t cost = randomCost(rng_, lim, lastRemaining);
            const bool consume = uniform(rng_, 0, 99) < 85;

            std::ostringstream context;
            context << Model::kName << " case " << index << " (count " << cs.count << ", period "
                    << period << "us, burst " << cs.burst << ", maxRuns " << options.maxRunsPerKey
                    << ", spread " << options.spreadWindowResets << ") step " << i << ": now " << t
                    << "us, cost " << cost << (consume ? ", tryAcquire" : ", peek");

            // Redis would have dropped the key by now (in simulated time): the memory state
            // must be fresh, and half the time the key goes on both sides, as in Redis.
            if (hasKey && t >= expiry && t >= lastWrite && uniform(rng_, 0, 1) == 0) {
                const Decision fresh = memory->peek(key, 0);
                if (fresh.remaining != lim || fresh.resetAfter != 0ns) {
                    FAIL(context.str() << ": past the last write's resetAfter (" << expiry
                                       << "us) the memory state is not fresh: " << describe(fresh));
                }
                redis->reset(key);
                memory->reset(key);
                if (integerReply(command(raw_.get(), {"EXISTS", redisKey})) != 0) {
                    FAIL(context.str() << ": reset(key) left the Redis key in place");
                }
                hasKey = false;
                ++counts_.expiries;
            } else if (uniform(rng_, 0, 199) == 0) {
                redis->reset(key);
                memory->reset(key);
                hasKey = false;
                ++counts_.resets;
            }

            // A late call (at most the late-call tolerance before the key's last write) is
            // answered at that write: its resetAfter counts from its own time, the TTL from
            // the write.
            const std::int64_t lateUs =
                hasKey && t < lastWrite &&
                        lastWrite - t <= std::chrono::duration_cast<std::chrono::microseconds>(
                                             options.lateCallTolerance)
                                             .count()
                    ? lastWrite - t
                    : 0;
            const Decision m = consume ? memory->tryAcquire(key, cost) : memory->peek(key, cost);
            const auto started = std::chrono::steady_clock::now();
            const Decision d = consume ? redis->tryAcquire(key, cost) : redis->peek(key, cost);
            if (const std::string diff = parity(m, d); !diff.empty()) {
                FAIL(context.str() << ": " << diff);
            }
            const RedisReplyPtr probe = command(raw_.get(), {"EVAL", kProbe, "1", redisKey});
            const std::int64_t pttl = integerReply(probe);
            const auto elapsed = std::chrono::steady_clock::now() - started;
            const std::int64_t elapsedMs =
                std::chrono::ceil<std::chrono::milliseconds>(elapsed).count();

            const bool mustWrite = consume && cost > 0 && d.allowed;
            if (pttl >= 0) {
                // Written by this step: a TTL of resetAfter rounded up to 1 ms, plus 1 ms,
                // counted from a millisecond at most ~1 ms before the call.
                if (!consume || cost == 0) {
                    FAIL(context.str() << ": a peek wrote the key (PTTL " << pttl << ")");
                }
                const std::int64_t ttl = ceilMs(d.resetAfter - std::chrono::microseconds{lateUs} +
                                                options.lateCallTolerance) +
                                         1;
                // A fixed window shifted by a clock step is kept up to the next aligned edge,
                // less than a period more (ratelimit::FixedWindowModel::isFresh).
                const std::int64_t extraMs = std::is_same_v<Model, ratelimit::FixedWindowModel>
                                                 ? ceilMs(std::chrono::microseconds{period})
                                                 : 0;
                if (pttl > ttl + extraMs || pttl < ttl - elapsedMs - 2) {
                    FAIL(context.str() << ": PTTL " << pttl << "ms after a write with resetAfter "
                                       << d.resetAfter.count() << "ns (expected about " << ttl
                                       << "ms, " << elapsedMs << "ms elapsed)");
                }
                hasKey = true;
                lastWrite = t + lateUs;
                expiry = t + d.resetAfter.count() / 1000;
                ++counts_.writes;
            } else if (pttl == -1) {
                if (!hasKey || mustWrite) {
                    FAIL(context.str() << ": PTTL -1: "
                                       << (mustWrite ? "an admission did not write"
                                                     : "a key without TTL appeared"));
                }
            } else if (hasKey || mustWrite) {
                // The key is gone. Only a stall of the whole TTL (at least 2 ms, counted from a
                // millisecond that may be 1 ms old) between the script and the PERSIST explains
                // that; else it is a bug. After a stall both sides move to a fresh key.
                if (elapsedMs < 2) {
                    FAIL(context.str()
                         << ": the key vanished " << elapsedMs << "ms after the step ("
                         << (hasKey ? "it existed" : "the step admitted") << ")");
                }
                ++counts_.stalls;
                hasKey = false;
                key = "user:" + std::to_string(index) + ":" + std::to_string(++generation);
                redisKey = redisKeyOf<Model>(kPrefix, options.name, key);
            }
            lastRemaining = d.remaining;
            (d.allowed ? counts_.admitted : counts_.refused) += 1;
            counts_.peeks += consume ? 0 : 1;
            ++counts_.steps;
        }
        redis->reset(key);
        return true;
    }

private:
    DiffCounts counts_;
    static constexpr const char* kPrefix = "rl-diff";
    /// Reads the TTL the step set and keeps the key from expiring in real time, atomically.
    static constexpr const char* kProbe =
        "local t = redis.call('PTTL', KEYS[1])\n"
        "if t >= 0 then redis.call('PERSIST', KEYS[1]) end\n"
        "return t\n";

    RedisStorage storage_;
    RedisContextPtr raw_;
    Rng& rng_;
};

std::vector<Case> namedCases() {
    constexpr std::int64_t kSecond = 1'000'000;
    return {
        {7, kSecond, 7},                     // 7/s
        {3, 10 * kSecond, 3},                // 3 per 10 s
        {999'999, 3600 * kSecond, 999'999},  // 999,999/h
        {7, kSecond, 3},                     // burst below count
        {7, kSecond, 20},                    // burst above count
        {3, 10 * kSecond, 1},
        {100, 60 * kSecond, 250},
        {999'999, 3600 * kSecond, 2'500'000},
        {10, 60 * kSecond, 10},
        {5, 90 * kSecond, 2},
        {1, 1, 1},  // 1/µs
        {1000, 1000, 1000},
        {13, 7, 5},
    };
}

Case randomCase(Rng& rng) {
    Case c{};
    c.count = uniform(rng, 0, 1) == 0 ? uniform(rng, 1, 20) : logUniform(rng, 1, 1'000'000);
    c.periodUs = logUniform(rng, 1, 10'000'000'000);
    c.burst = uniform(rng, 0, 1) == 0 ? c.count : logUniform(rng, 1, 1'000'000);
    return c;
}

}  // namespace

TEMPLATE_TEST_CASE("RedisStorage: random sequences decide as the memory storage does",
                   "[redis_storage][redis]", RATELIMIT_TEST_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const std::uint64_t s = testSeed() ^ std::hash<std::string_view>{}(TestType::kName);
    INFO("seed " << testSeed() << " (RATELIMIT_TEST_SEED)");
    Rng rng(s);
    Differential<TestType> diff(*server, rng);
    const std::vector<Case> named = namedCases();
    int index = 0;
    while (diff.counts().steps < 10'000) {
        const Case c = static_cast<std::size_t>(index) < named.size()
                           ? named[static_cast<std::size_t>(index)]
                           : randomCase(rng);
        const bool accepted = diff.run(c, index, 250, false);  // spread: see the next test
        if (static_cast<std::size_t>(index) < named.size()) {
            INFO("named case " << index);
            REQUIRE(accepted);
        }
        ++index;
    }
    INFO("steps " << diff.counts().steps << ", scenarios " << diff.counts().scenarios
                  << ", admitted " << diff.counts().admitted << ", refused "
                  << diff.counts().refused << ", peeks " << diff.counts().peeks << ", writes "
                  << diff.counts().writes << ", simulated expiries " << diff.counts().expiries
                  << ", resets " << diff.counts().resets << ", steps back "
                  << diff.counts().stepsBack << ", stalls " << diff.counts().stalls);
    CHECK(diff.counts().steps >= 10'000);
    CHECK(diff.counts().admitted > diff.counts().steps / 10);
    CHECK(diff.counts().refused > diff.counts().steps / 10);
    CHECK(diff.counts().peeks > diff.counts().steps / 20);
    CHECK(diff.counts().writes > diff.counts().steps / 10);
    CHECK(diff.counts().expiries > 10);
    CHECK(diff.counts().stepsBack > diff.counts().steps / 20);
    // Stalls (a TTL of a few ms outlived by a descheduled test) need a loaded machine; they cost
    // coverage, not correctness, but must stay the exception.
    CHECK(diff.counts().stalls <= diff.counts().steps / 20);
}

TEMPLATE_TEST_CASE("RedisStorage: spread window resets shift a key's windows as in memory",
                   "[redis_storage][redis]", ratelimit::FixedWindowModel,
                   ratelimit::SlidingLogModel, ratelimit::SlidingCounterModel) {
    // The per-key phase of spreadWindowResets must not depend on the storage: "one behaviour,
    // two stores" holds for every option. (The phase is derived from the key alone, so that
    // every host agrees on it.)
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-spread"));
    LimiterOptions options = limiterOptions("spread");
    options.spreadWindowResets = true;
    ManualClock clock;
    clock.set(1'700'000'000'000'000us);
    MemoryLimiter<TestType> memory(Limit::perHour(10), MemoryStorage{}, clock, options);
    RedisLimiter<TestType> redis(Limit::perHour(10), storage, clock, options);
    for (const std::string key : {"user:1", "user:2", "user:3", ""}) {
        const Decision m = memory.tryAcquire(key);
        const Decision r = redis.tryAcquire(key);
        INFO("key '" << key << "'");
        CHECK(parity(m, r).empty());
    }

    // And a differential run with the spread on.
    Rng rng(testSeed() ^ 0x5eedU ^ std::hash<std::string_view>{}(TestType::kName));
    Differential<TestType> diff(*server, rng);
    const std::vector<Case> named = namedCases();
    for (int index = 0; index < 8; ++index) {
        const bool accepted =
            diff.run(named[static_cast<std::size_t>(index)], 100 + index, 250, true);
        REQUIRE(accepted);
    }
    CHECK(diff.counts().steps == 2000);
}

}  // namespace ratelimit_test
