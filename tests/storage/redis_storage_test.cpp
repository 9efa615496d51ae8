// Tests of include/ratelimit/storage/redis.hpp through the public Limiter, against real
// redis-servers the tests start themselves (tests/support/redis_server.hpp): parity with the
// memory storage (worked scenarios and a randomized differential run), exactness under
// contention (threads and processes), hostile keys, expiry hygiene, server time and
// authentication, the script cache, and bad configuration.
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
//   - Everything else freezes a ManualClock (never advanced, so every TTL far outlasts the
//     test) or uses server time (real time on both sides); no test waits for an expiry.

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <netinet/in.h>
#include <optional>
#include <poll.h>
#include <random>
#include <set>
#include <spawn.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/socket.h>
#include <sys/wait.h>
#include <system_error>
#include <thread>
#include <type_traits>
#include <unistd.h>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>

#include <ratelimit/redis.hpp>

#include "support/catch.hpp"
#include "support/random_traffic.hpp"
#include "support/redis_server.hpp"
#include "support/redis_test_server.hpp"

using namespace std::chrono_literals;

namespace {

namespace rt = ratelimit_test;
using ratelimit::Decision;
using ratelimit::FailurePolicy;
using ratelimit::FixedWindowModel;
using ratelimit::LeakyBucketModel;
using ratelimit::Limit;
using ratelimit::LimiterOptions;
using ratelimit::ManualClock;
using ratelimit::MemoryStorage;
using ratelimit::RedisStorage;
using ratelimit::SlidingCounterModel;
using ratelimit::SlidingLogModel;
using ratelimit::StoreError;
using ratelimit::StoreException;
using ratelimit::TokenBucketModel;

template <class Model>
using MemoryLimiter = ratelimit::Limiter<Model, MemoryStorage, ManualClock>;
template <class Model>
using RedisLimiter = ratelimit::Limiter<Model, RedisStorage, ManualClock>;

using rt::logUniform;
using rt::Rng;
using rt::uniform;

std::uint64_t seed() {
    // Read while the test case is single-threaded; nothing in the tests calls setenv.
    // NOLINTNEXTLINE(concurrency-mt-unsafe)
    if (const char* s = std::getenv("RATELIMIT_TEST_SEED"); s != nullptr) {
        return std::strtoull(s, nullptr, 10);
    }
    return 20240917;
}

// ---- servers and connections ----------------------------------------------------------------

using ratelimit_test::startServer;

rt::RedisContextPtr connectTo(const rt::RedisServer& server) {
    rt::RedisContextPtr c{server.connect()};
    REQUIRE(c != nullptr);
    REQUIRE(c->err == 0);
    return c;
}

/// Storage options for `server`: its socket (or TCP port), a deadline generous enough for a
/// loaded Debug run, and the test's own key prefix.
RedisStorage::Options storageOptions(const rt::RedisServer& server, const std::string& keyPrefix) {
    RedisStorage::Options o;
    if (server.unixSocket().empty()) {
        o.host = "127.0.0.1";
        o.port = server.port();
    } else {
        o.unixSocket = server.unixSocket();
    }
    o.timeout = 5000ms;
    o.keyPrefix = keyPrefix;
    return o;
}

/// Limiter options: the test's own name, and failures thrown rather than answered by a
/// policy, so that a store failure can never pass for a decision.
LimiterOptions limiterOptions(const std::string& name) {
    LimiterOptions o;
    o.name = name;
    o.failurePolicy = FailurePolicy::kThrow;
    return o;
}

/// The Redis key of `key`, spelled out independently of RedisStorage::Table::redisKey:
/// `<prefix>:<name>:<model>:v1{<len>:<key>}`.
std::string redisKeyOf(const std::string& prefix, const std::string& name, std::string_view model,
                       std::string_view key) {
    std::string k =
        prefix + ":" + name + ":" + std::string(model) + ":v1{" + std::to_string(key.size()) + ":";
    k.append(key);
    k.push_back('}');
    return k;
}

std::int64_t integerReply(const rt::RedisReplyPtr& r) {
    REQUIRE(r != nullptr);
    if (r->type == REDIS_REPLY_ERROR) {
        FAIL("Redis error: " << std::string(r->str, r->len));
    }
    REQUIRE(r->type == REDIS_REPLY_INTEGER);
    return r->integer;
}

std::string stringReply(const rt::RedisReplyPtr& r) {
    REQUIRE(r != nullptr);
    if (r->type == REDIS_REPLY_ERROR) {
        FAIL("Redis error: " << std::string(r->str, r->len));
    }
    REQUIRE((r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS));
    return {r->str, r->len};
}

void ok(const rt::RedisReplyPtr& r) {
    REQUIRE(r != nullptr);
    if (r->type == REDIS_REPLY_ERROR) {
        FAIL("Redis error: " << std::string(r->str, r->len));
    }
}

/// Every key of the current database (SCAN, not KEYS).
std::vector<std::string> scanAll(redisContext* c) {
    std::vector<std::string> out;
    std::string cursor = "0";
    do {
        const rt::RedisReplyPtr r = rt::command(c, {"SCAN", cursor, "COUNT", "1000"});
        REQUIRE(r != nullptr);
        REQUIRE(r->type == REDIS_REPLY_ARRAY);
        REQUIRE(r->elements == 2);
        cursor.assign(r->element[0]->str, r->element[0]->len);
        const redisReply* keys = r->element[1];
        for (std::size_t i = 0; i < keys->elements; ++i) {
            out.emplace_back(keys->element[i]->str, keys->element[i]->len);
        }
    } while (cursor != "0");
    return out;
}

/// The server's TIME in µs.
std::int64_t serverTimeUs(redisContext* c) {
    const rt::RedisReplyPtr r = rt::command(c, {"TIME"});
    REQUIRE(r != nullptr);
    REQUIRE(r->type == REDIS_REPLY_ARRAY);
    REQUIRE(r->elements == 2);
    return std::stoll(std::string(r->element[0]->str, r->element[0]->len)) * 1'000'000 +
           std::stoll(std::string(r->element[1]->str, r->element[1]->len));
}

/// `d` in whole milliseconds, rounded up (as the script's `ceildiv(reset, 1000)` on µs).
std::int64_t ceilMs(std::chrono::nanoseconds d) {
    return std::chrono::ceil<std::chrono::milliseconds>(d).count();
}

/// The message of the std::invalid_argument `f` throws; "<no exception>" when it does not.
template <class F>
std::string invalidArgument(F&& f) {
    try {
        std::forward<F>(f)();
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "<no exception>";
}

bool contains(const std::string& text, std::string_view part) {
    return text.find(part) != std::string::npos;
}

// ---- decisions ---------------------------------------------------------------------------

template <class Model>
constexpr std::int64_t capacityOf(const Limit& limit) {
    return Model::kBucket ? limit.burst : limit.count;
}

std::string describe(const Decision& d) {
    std::ostringstream out;
    out << "{allowed " << d.allowed << ", limit " << d.limit << ", remaining " << d.remaining
        << ", retry "
        << (d.never() ? std::string("never") : std::to_string(d.retryAfter.count()) + "ns")
        << ", reset " << d.resetAfter.count() << "ns" << (d.degraded ? ", degraded" : "") << "}";
    return out.str();
}

/// Empty when `redis` equals `memory` as the design promises: equal `allowed`, `remaining` and
/// `limit`, durations within 1 µs (kNever on both sides together), not degraded.
std::string parity(const Decision& memory, const Decision& redis) {
    std::ostringstream out;
    if (memory.allowed != redis.allowed) {
        out << "allowed differs; ";
    }
    if (memory.remaining != redis.remaining) {
        out << "remaining differs; ";
    }
    if (memory.limit != redis.limit) {
        out << "limit differs; ";
    }
    if (memory.never() != redis.never()) {
        out << "kNever on one side only; ";
    } else if (!memory.never() && std::chrono::abs(memory.retryAfter - redis.retryAfter) > 1us) {
        out << "retryAfter differs by more than 1us; ";
    }
    if (std::chrono::abs(memory.resetAfter - redis.resetAfter) > 1us) {
        out << "resetAfter differs by more than 1us; ";
    }
    if (redis.degraded || memory.degraded) {
        out << "degraded; ";
    }
    if (out.tellp() == 0) {
        return {};
    }
    out << "memory " << describe(memory) << ", redis " << describe(redis);
    return out.str();
}

#define RATELIMIT_MODELS \
    FixedWindowModel, SlidingLogModel, SlidingCounterModel, TokenBucketModel, LeakyBucketModel

}  // namespace

// =============================================================================================
// 1. Parity with the memory storage
// =============================================================================================

namespace {

struct Batch {
    std::chrono::seconds at;
    int requests;
};

/// Replays `batches` (cost 1 each) on a memory and a Redis limiter with one ManualClock and
/// returns the admissions per batch; every decision must agree between the two.
template <class Model>
std::vector<int> replayOnBoth(const rt::RedisServer& server, const std::string& name,
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
                              << "s, request " << i);
            if (const std::string diff = parity(m, r); !diff.empty()) {
                FAIL(diff);
            }
            n += r.allowed ? 1 : 0;
        }
        admitted.push_back(n);
    }
    // The state was really kept in Redis: the key exists, with a TTL.
    const rt::RedisContextPtr c = connectTo(server);
    CHECK(integerReply(rt::command(
              c.get(), {"PTTL", redisKeyOf("rl-scenario", name, Model::kName, key)})) > 0);
    return admitted;
}

}  // namespace

TEMPLATE_TEST_CASE("Redis storage: the worked scenarios replay on Redis as in memory", "[redis]",
                   RATELIMIT_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    constexpr bool kFixed = std::is_same_v<TestType, FixedWindowModel>;
    constexpr bool kLog = std::is_same_v<TestType, SlidingLogModel>;
    constexpr bool kCounter = std::is_same_v<TestType, SlidingCounterModel>;
    constexpr bool kToken = std::is_same_v<TestType, TokenBucketModel>;

    // 10/min: 10 at 00:00, 5 at 00:30, 5 at 01:10.
    const std::vector<int> first = replayOnBoth<TestType>(
        *server, "scenario-one", Limit::perMinute(10), {{0s, 10}, {30s, 5}, {70s, 5}});
    if constexpr (kFixed || kLog) {
        CHECK(first == std::vector<int>{10, 0, 5});
    }
    if constexpr (kToken) {
        CHECK(first == std::vector<int>{10, 5, 5});
    }

    // 10/min: 5 at 00:00, 5 at 00:30, 5 at 00:40.
    const std::vector<int> second = replayOnBoth<TestType>(
        *server, "scenario-two", Limit::perMinute(10), {{0s, 5}, {30s, 5}, {40s, 5}});
    if constexpr (kFixed || kLog) {
        CHECK(second == std::vector<int>{5, 5, 0});
    }

    // 100/min: 100 at 00:59, 100 at 01:00 (the boundary burst).
    const std::vector<int> third = replayOnBoth<TestType>(
        *server, "scenario-three", Limit::perMinute(100), {{59s, 100}, {60s, 100}});
    if constexpr (kFixed) {
        CHECK(third == std::vector<int>{100, 100});
    }
    if constexpr (kLog || kCounter) {
        CHECK(third == std::vector<int>{100, 0});
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
    Differential(const rt::RedisServer& server, Rng& rng)
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
        std::string redisKey = redisKeyOf(kPrefix, options.name, Model::kName, key);
        // Around the real epoch in µs, or around the ManualClock's zero (negative times too).
        std::int64_t t = uniform(rng_, 0, 1) == 0
                             ? uniform(rng_, 1'700'000'000'000'000, 1'700'100'000'000'000)
                             : uniform(rng_, -3 * period, 3 * period);
        bool hasKey = false;         // the Redis key exists (persisted by the test)
        std::int64_t lastWrite = 0;  // simulated time of its last write
        std::int64_t expiry = 0;     // lastWrite + its resetAfter: fresh from then on
        std::int64_t lastRemaining = lim;

        for (int i = 0; i < stepCount; ++i) {
            const std::int64_t r = uniform(rng_, 0, 99);
            std::int64_t move = 0;
            if (r < 10) {
                move = 0;
            } else if (r < 50) {
                move = uniform(rng_, 0, 3 * interval);
            } else if (r < 75) {
                move = uniform(rng_, 0, period);
            } else if (r < 88) {
                move = uniform(rng_, 0, 3 * period);
            } else {
                move = -uniform(rng_, 1, 2 * period);
                ++counts_.stepsBack;
            }
            t += move;
            clock.set(std::chrono::microseconds{t});

            const std::int64_t cost = rt::randomCost(rng_, lim, lastRemaining);
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
                if (integerReply(rt::command(raw_.get(), {"EXISTS", redisKey})) != 0) {
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

            const Decision m = consume ? memory->tryAcquire(key, cost) : memory->peek(key, cost);
            const auto started = std::chrono::steady_clock::now();
            const Decision d = consume ? redis->tryAcquire(key, cost) : redis->peek(key, cost);
            if (const std::string diff = parity(m, d); !diff.empty()) {
                FAIL(context.str() << ": " << diff);
            }
            const rt::RedisReplyPtr probe =
                rt::command(raw_.get(), {"EVAL", kProbe, "1", redisKey});
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
                const std::int64_t ttl = ceilMs(d.resetAfter) + 1;
                // A fixed window shifted by a clock step is kept up to the next aligned edge,
                // less than a period more (FixedWindowModel::isFresh).
                const std::int64_t extraMs = std::is_same_v<Model, FixedWindowModel>
                                                 ? ceilMs(std::chrono::microseconds{period})
                                                 : 0;
                if (pttl > ttl + extraMs || pttl < ttl - elapsedMs - 2) {
                    FAIL(context.str() << ": PTTL " << pttl << "ms after a write with resetAfter "
                                       << d.resetAfter.count() << "ns (expected about " << ttl
                                       << "ms, " << elapsedMs << "ms elapsed)");
                }
                hasKey = true;
                lastWrite = t;
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
                redisKey = redisKeyOf(kPrefix, options.name, Model::kName, key);
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
    rt::RedisContextPtr raw_;
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

TEMPLATE_TEST_CASE("Redis storage: random sequences decide as the memory storage does", "[redis]",
                   RATELIMIT_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const std::uint64_t s = seed() ^ std::hash<std::string_view>{}(TestType::kName);
    INFO("seed " << seed() << " (RATELIMIT_TEST_SEED)");
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

TEMPLATE_TEST_CASE("Redis storage: spread window resets shift a key's windows as in memory",
                   "[redis]", FixedWindowModel, SlidingLogModel, SlidingCounterModel) {
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
    Rng rng(seed() ^ 0x5eedU ^ std::hash<std::string_view>{}(TestType::kName));
    Differential<TestType> diff(*server, rng);
    const std::vector<Case> named = namedCases();
    for (int index = 0; index < 8; ++index) {
        const bool accepted =
            diff.run(named[static_cast<std::size_t>(index)], 100 + index, 250, true);
        REQUIRE(accepted);
    }
    CHECK(diff.counts().steps == 2000);
}

// =============================================================================================
// 2. Exactness under contention
// =============================================================================================

namespace {

/// A limit whose capacity differs between windows (count) and buckets (burst), so that each
/// model must enforce its own.
const Limit kContended = Limit::perMinute(40).withBurst(27);
constexpr std::int64_t kFrozenUs = 1'726'000'000'123'456;  // one instant for every participant

/// Runs `threads` threads of `attempts` cost-1 requests on `key` once `start` opens; returns
/// the admissions (or throws what a thread caught). No Catch assertion runs off the main thread.
template <class Model>
class Contenders {
public:
    Contenders(RedisLimiter<Model>& limiter, std::string key, int threads, int attempts,
               std::latch& start)
        : limiter_(limiter), key_(std::move(key)) {
        for (int i = 0; i < threads; ++i) {
            threads_.emplace_back([this, attempts, &start] {
                try {
                    start.wait();
                    for (int a = 0; a < attempts; ++a) {
                        const Decision d = limiter_.tryAcquire(key_, 1);
                        if (d.degraded || d.limit != capacityOf<Model>(kContended)) {
                            wrong_.fetch_add(1);
                        }
                        if (d.allowed) {
                            admitted_.fetch_add(1);
                        }
                    }
                } catch (...) {
                    const std::lock_guard<std::mutex> lock(mutex_);
                    error_ = std::current_exception();
                }
            });
        }
    }
    Contenders(const Contenders&) = delete;
    Contenders& operator=(const Contenders&) = delete;
    Contenders(Contenders&&) = delete;
    Contenders& operator=(Contenders&&) = delete;
    ~Contenders() { join(); }

    void join() {
        for (std::thread& t : threads_) {
            if (t.joinable()) {
                t.join();
            }
        }
    }

    /// Joins and returns the admissions; rethrows a thread's exception.
    std::int64_t admitted() {
        join();
        if (error_) {
            std::rethrow_exception(error_);
        }
        return admitted_.load();
    }
    [[nodiscard]] std::int64_t wrong() const { return wrong_.load(); }

private:
    RedisLimiter<Model>& limiter_;
    std::string key_;
    std::vector<std::thread> threads_;
    std::atomic<std::int64_t> admitted_{0};
    std::atomic<std::int64_t> wrong_{0};
    std::mutex mutex_;
    std::exception_ptr error_;
};

}  // namespace

TEMPLATE_TEST_CASE("Redis storage: 8 threads on one key admit exactly the limit",
                   "[redis][concurrency]", RATELIMIT_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-threads"));
    ManualClock clock;  // never advanced: time is frozen for every thread
    clock.set(std::chrono::microseconds{kFrozenUs});
    RedisLimiter<TestType> limiter(kContended, storage, clock, limiterOptions("threads"));
    const std::int64_t lim = capacityOf<TestType>(kContended);

    std::latch start(1);
    Contenders<TestType> contenders(limiter, "one key", 8, 15, start);  // 120 attempts
    start.count_down();
    CHECK(contenders.admitted() == lim);
    CHECK(contenders.wrong() == 0);
    // Nothing is left: the next request is refused and says when it may pass.
    const Decision after = limiter.tryAcquire("one key");
    CHECK_FALSE(after.allowed);
    CHECK(after.remaining == 0);
    CHECK(after.retryAfter > 0ns);
    CHECK_FALSE(after.never());
    CHECK(storage.stats().failures == 0);
}

namespace {

#ifdef RATELIMIT_REDIS_WORKER
constexpr const char* kWorker = RATELIMIT_REDIS_WORKER;
#else
constexpr const char* kWorker = "";
#endif

/// A spawned ratelimit_redis_worker: stdin is a pipe (the start signal), stdout and stderr
/// files in the server's directory. posix_spawn, never fork, so the threaded test is safe.
class WorkerProcess {
public:
    WorkerProcess(const std::vector<std::string>& arguments, const std::string& outputPath)
        : out_(outputPath + ".out"), err_(outputPath + ".err") {
        std::array<int, 2> fds{-1, -1};
        if (::pipe2(fds.data(), O_CLOEXEC) != 0) {
            throw std::system_error(errno, std::generic_category(), "pipe2");
        }
        start_ = fds[1];
        std::vector<std::string> args = arguments;
        std::vector<char*> argv;
        argv.reserve(args.size() + 1);
        for (std::string& a : args) {
            argv.push_back(a.data());
        }
        argv.push_back(nullptr);
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);  // clears CLOEXEC
        posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_.c_str(),
                                         O_WRONLY | O_CREAT | O_TRUNC, 0600);
        posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_.c_str(),
                                         O_WRONLY | O_CREAT | O_TRUNC, 0600);
        posix_spawnattr_t attr;
        posix_spawnattr_init(&attr);
        sigset_t none;
        sigemptyset(&none);
        sigset_t defaults;
        sigemptyset(&defaults);
        sigaddset(&defaults, SIGPIPE);
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setsigdefault(&attr, &defaults);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        const int rc = ::posix_spawn(&pid_, argv[0], &actions, &attr, argv.data(), environ);
        posix_spawnattr_destroy(&attr);
        posix_spawn_file_actions_destroy(&actions);
        ::close(fds[0]);
        if (rc != 0) {
            ::close(start_);
            throw std::system_error(rc, std::generic_category(), "posix_spawn " + arguments[0]);
        }
    }
    WorkerProcess(const WorkerProcess&) = delete;
    WorkerProcess& operator=(const WorkerProcess&) = delete;
    WorkerProcess(WorkerProcess&&) = delete;
    WorkerProcess& operator=(WorkerProcess&&) = delete;
    ~WorkerProcess() {
        go();
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            int status = 0;
            ::waitpid(pid_, &status, 0);
        }
    }

    /// Sends the start signal (a byte, then end of file).
    void go() {
        if (start_ >= 0) {
            const char g = 'g';
            (void)::write(start_, &g, 1);
            ::close(start_);
            start_ = -1;
        }
    }

    /// Waits (at most 30 s, then kills) and returns the exit status, stdout and stderr.
    struct Result {
        int status;
        std::string out;
        std::string err;
    };
    Result wait() {
        int status = 0;
        const auto deadline = std::chrono::steady_clock::now() + 30s;
        while (::waitpid(pid_, &status, WNOHANG) == 0) {
            if (std::chrono::steady_clock::now() > deadline) {
                ::kill(pid_, SIGKILL);
                ::waitpid(pid_, &status, 0);
                break;
            }
            std::this_thread::sleep_for(1ms);
        }
        pid_ = -1;
        return {status, read(out_), read(err_)};
    }

private:
    static std::string read(const std::string& path) {
        std::ifstream in(path, std::ios::binary);
        std::ostringstream s;
        s << in.rdbuf();
        return s.str();
    }

    pid_t pid_ = -1;
    int start_ = -1;
    std::string out_;
    std::string err_;
};

}  // namespace

TEMPLATE_TEST_CASE("Redis storage: 4 processes and 4 threads on one key admit exactly the limit",
                   "[redis][concurrency]", RATELIMIT_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    REQUIRE(std::strlen(kWorker) > 0);  // tests/CMakeLists.txt defines RATELIMIT_REDIS_WORKER
    REQUIRE(::access(kWorker, X_OK) == 0);
    const std::string prefix = "rl-procs";
    const std::string name = "processes";
    const std::string key = "shared key {with} braces";
    const RedisStorage storage(storageOptions(*server, prefix));
    ManualClock clock;  // the workers freeze theirs at the same instant
    clock.set(std::chrono::microseconds{kFrozenUs});
    RedisLimiter<TestType> limiter(kContended, storage, clock, limiterOptions(name));
    const std::int64_t lim = capacityOf<TestType>(kContended);
    const std::int64_t periodUs =
        std::chrono::duration_cast<std::chrono::microseconds>(kContended.period).count();

    std::vector<std::unique_ptr<WorkerProcess>> workers;
    workers.reserve(4);
    for (int i = 0; i < 4; ++i) {
        workers.push_back(std::make_unique<WorkerProcess>(
            std::vector<std::string>{kWorker, server->unixSocket(), prefix, name,
                                     std::string(TestType::kName), std::to_string(kContended.count),
                                     std::to_string(periodUs), std::to_string(kContended.burst),
                                     std::to_string(kFrozenUs), "15", key},
            server->directory() + "/worker" + std::to_string(i)));
    }
    std::latch start(1);
    Contenders<TestType> threads(limiter, key, 4, 15, start);  // 4 × 15 + 4 × 15 = 120 attempts
    for (auto& w : workers) {
        w->go();
    }
    start.count_down();

    std::int64_t total = threads.admitted();
    CHECK(threads.wrong() == 0);
    for (std::size_t i = 0; i < workers.size(); ++i) {
        const WorkerProcess::Result r = workers[i]->wait();
        INFO("worker " << i << " stderr: " << r.err);
        REQUIRE(WIFEXITED(r.status));
        REQUIRE(WEXITSTATUS(r.status) == 0);
        const std::int64_t n = std::stoll(r.out);
        CHECK(n >= 0);
        CHECK(n <= lim);
        total += n;
    }
    CHECK(total == lim);
    CHECK_FALSE(limiter.peek(key, 1).allowed);
    CHECK(limiter.peek(key, 0).remaining == 0);
}

// =============================================================================================
// 3. Hostile keys
// =============================================================================================

TEMPLATE_TEST_CASE("Redis storage: any byte string is a key, stored as given", "[redis]",
                   RATELIMIT_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const std::string prefix = "rl-keys";
    const std::string name = "hostile";
    const RedisStorage storage(storageOptions(*server, prefix));
    ManualClock clock;
    clock.set(5s);
    RedisLimiter<TestType> limiter(Limit::perMinute(3), storage, clock, limiterOptions(name));
    const rt::RedisContextPtr raw = connectTo(*server);

    std::string big;
    while (big.size() < std::size_t{64} * 1024) {
        big.push_back(static_cast<char>(big.size() % 251));
    }
    const std::vector<std::string> keys = {
        "with spaces in it",
        "cr\r\nlf",
        "\r\n",
        "*1\r\n$4\r\nPING\r\n",  // a RESP command, should it ever be sent raw
        std::string("nul\0byte", 8),
        std::string("\0", 1),
        std::string("\0\0{\0}", 5),
        "{",
        "}",
        "{}",
        "a{b}c",
        "1:a}",  // looks like the length prefix
        "%s%n%d",
        "",
        big,
    };
    // Each key, the same key with one byte changed (or, for "", one byte added), and a
    // normal key right after: all distinct.
    std::set<std::string> all;
    std::vector<std::string> twins;
    for (const std::string& k : keys) {
        std::string twin = k.empty() ? std::string("\x7f") : k;
        if (!k.empty()) {
            twin[twin.size() / 2] = static_cast<char>(twin[twin.size() / 2] ^ 0x40);
        }
        twins.push_back(twin);
        all.insert(k);
        all.insert(twin);
    }
    for (std::size_t i = 0; i < keys.size(); ++i) {
        all.insert("plain-" + std::to_string(i));
    }
    REQUIRE(all.size() == 3 * keys.size());

    for (std::size_t i = 0; i < keys.size(); ++i) {
        const std::string& k = keys[i];
        INFO("key #" << i << " (" << k.size() << " bytes)");
        Decision d = limiter.tryAcquire(k, 2);
        CHECK(d.allowed);
        CHECK(d.remaining == 1);
        d = limiter.tryAcquire(k, 1);
        CHECK(d.allowed);
        CHECK(d.remaining == 0);
        d = limiter.tryAcquire(k, 1);
        CHECK_FALSE(d.allowed);
        CHECK(d.retryAfter > 0ns);
        CHECK(limiter.tryAcquire(k, 4).never());
        // Its twin is another key, untouched so far.
        d = limiter.tryAcquire(twins[i], 1);
        CHECK(d.allowed);
        CHECK(d.remaining == 2);
        // No protocol desync: a normal key right after gets a normal answer.
        d = limiter.tryAcquire("plain-" + std::to_string(i), 1);
        CHECK(d.allowed);
        CHECK(d.remaining == 2);
        CHECK_FALSE(d.degraded);
        // And the first key still holds its state.
        CHECK(limiter.peek(k, 0).remaining == 0);
        // Stored under exactly <prefix>:<name>:<model>:v1{<len>:<key>}, with a TTL.
        const std::string stored = redisKeyOf(prefix, name, TestType::kName, k);
        CHECK(integerReply(rt::command(raw.get(), {"EXISTS", stored})) == 1);
        CHECK(integerReply(rt::command(
                  raw.get(), {"EXISTS", redisKeyOf(prefix, name, TestType::kName, twins[i])})) ==
              1);
        CHECK(integerReply(rt::command(raw.get(), {"PTTL", stored})) > 0);
    }
    // Nothing else was written: exactly one Redis key per key used.
    std::set<std::string> expected;
    for (const std::string& k : all) {
        expected.insert(redisKeyOf(prefix, name, TestType::kName, k));
    }
    const std::vector<std::string> found = scanAll(raw.get());
    CHECK(std::set<std::string>(found.begin(), found.end()) == expected);
    CHECK(found.size() == expected.size());
    // reset(key) deletes exactly that key.
    limiter.reset(keys[4]);
    CHECK(integerReply(rt::command(
              raw.get(), {"EXISTS", redisKeyOf(prefix, name, TestType::kName, keys[4])})) == 0);
    CHECK(integerReply(rt::command(
              raw.get(), {"EXISTS", redisKeyOf(prefix, name, TestType::kName, twins[4])})) == 1);
    CHECK(limiter.tryAcquire(keys[4], 3).allowed);
    CHECK(storage.stats().failures == 0);
}

// =============================================================================================
// 4. Expiry hygiene
// =============================================================================================

TEMPLATE_TEST_CASE("Redis storage: every key has a TTL no longer than its reset", "[redis]",
                   RATELIMIT_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const bool spread = GENERATE(false, true);
    INFO("spreadWindowResets " << spread);
    const std::string prefix = "rl-ttl";
    const RedisStorage storage(storageOptions(*server, prefix));
    LimiterOptions options = limiterOptions("hygiene");
    options.spreadWindowResets = spread;
    // Server time (the default clock): times are real, so TTLs and resets count alike.
    ratelimit::Limiter<TestType, RedisStorage> limiter(Limit::perSecond(4).withBurst(6), storage,
                                                       {}, options);
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(limiter.clock())>,
                                 ratelimit::RedisServerClock>);
    const std::int64_t lim = capacityOf<TestType>(Limit::perSecond(4).withBurst(6));
    const rt::RedisContextPtr raw = connectTo(*server);
    Rng rng(seed() ^ std::hash<std::string_view>{}(TestType::kName) ^ (spread ? 1U : 0U));

    const std::vector<std::string> keys = {"k0", "k1", "k2", std::string("\r\n{\0}", 5), ""};
    struct Written {
        std::chrono::nanoseconds reset{};             // resetAfter of the last write
        std::chrono::steady_clock::time_point start;  // when that call started
    };
    std::map<std::string, Written> written;  // Redis key -> last write
    int writes = 0;
    int checked = 0;
    for (int step = 0; step < 200; ++step) {
        const std::string& key = keys[static_cast<std::size_t>(uniform(rng, 0, 4))];
        const std::string redisKey = redisKeyOf(prefix, "hygiene", TestType::kName, key);
        const std::int64_t cost =
            uniform(rng, 0, 9) < 7 ? uniform(rng, 1, 2) : uniform(rng, 0, lim + 1);
        const std::int64_t action = uniform(rng, 0, 99);
        const auto started = std::chrono::steady_clock::now();
        std::ostringstream context;
        context << "step " << step << ", key of " << key.size() << " bytes, cost " << cost;
        if (action < 4) {
            limiter.reset(key);
            written.erase(redisKey);
            context << ", reset";
        } else if (action < 20) {
            const Decision d = limiter.peek(key, cost);
            REQUIRE_FALSE(d.degraded);
            context << ", peek " << describe(d);
        } else {
            const Decision d = limiter.tryAcquire(key, cost);
            REQUIRE_FALSE(d.degraded);
            context << ", tryAcquire " << describe(d);
            if (d.allowed && cost > 0) {
                written[redisKey] = {d.resetAfter, started};
                ++writes;
            }
        }
        INFO(context.str());
        // Every key in the database has a TTL, and none longer than the last write's
        // resetAfter rounded up to 1 ms, plus 1 ms.
        const std::vector<std::string> found = scanAll(raw.get());
        for (const std::string& k : found) {
            rt::appendCommand(raw.get(), {"PTTL", k});
        }
        std::set<std::string> present;
        for (const std::string& k : found) {
            const rt::RedisReplyPtr r = rt::reply(raw.get());
            const std::int64_t pttl = integerReply(r);
            const auto w = written.find(k);
            if (w == written.end()) {
                FAIL("a key the test never wrote (or reset): " << k.size() << " bytes, PTTL "
                                                               << pttl);
            }
            if (pttl == -1) {
                FAIL("a key without TTL");
            }
            if (pttl == -2) {
                continue;  // expired between SCAN and PTTL
            }
            present.insert(k);
            const std::int64_t elapsedMs = std::chrono::ceil<std::chrono::milliseconds>(
                                               std::chrono::steady_clock::now() - w->second.start)
                                               .count();
            const std::int64_t ttl = ceilMs(w->second.reset) + 1;
            CHECK(pttl >= 0);  // 0: less than 1 ms left, about to expire
            CHECK(pttl <= ttl);
            CHECK(pttl >= ttl - elapsedMs - 2);  // and not shorter than the reset
            ++checked;
        }
        // A key whose reset is still well ahead has not gone.
        for (const auto& [k, w] : written) {
            const auto sinceMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - w.start);
            if (sinceMs + 3ms < w.reset) {
                CHECK(present.count(k) == 1);
            }
        }
    }
    CHECK(writes > 15);
    CHECK(checked > 100);
    CHECK(storage.stats().failures == 0);
}

// =============================================================================================
// 5. Server time, TCP, AUTH, ACL users, databases
// =============================================================================================

TEST_CASE("Redis storage: TokenBucket<RedisStorage> reads the server's TIME", "[redis]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-time"));
    ratelimit::TokenBucket<RedisStorage> bucket(Limit::perMinute(3), storage, {},
                                                limiterOptions("server-time"));
    static_assert(
        std::is_same_v<std::remove_cvref_t<decltype(bucket.clock())>, ratelimit::RedisServerClock>);
    const rt::RedisContextPtr raw = connectTo(*server);

    const std::int64_t before = serverTimeUs(raw.get());
    Decision d = bucket.tryAcquire("user");
    const std::int64_t after = serverTimeUs(raw.get());
    CHECK(d.allowed);
    CHECK_FALSE(d.degraded);
    CHECK(d.limit == 3);
    CHECK(d.remaining == 2);
    CHECK(d.resetAfter == 20s);
    // The state was written at the server's time.
    const std::int64_t last = std::stoll(stringReply(rt::command(
        raw.get(),
        {"HGET", redisKeyOf("rl-time", "server-time", "token_bucket", "user"), "last"})));
    CHECK(last >= before);
    CHECK(last <= after);

    CHECK(bucket.tryAcquire("user").remaining == 1);
    CHECK(bucket.tryAcquire("user").remaining == 0);
    d = bucket.tryAcquire("user");
    CHECK_FALSE(d.allowed);
    CHECK(d.retryAfter > 0ns);
    CHECK(d.retryAfter <= 20s);
    CHECK(d.resetAfter > 40s);
    CHECK(d.resetAfter <= 60s);
    CHECK(bucket.peek("user", 4).never());
    CHECK(bucket.peek("someone else", 3).allowed);
    CHECK(storage.stats().failures == 0);
}

TEST_CASE("Redis storage: SystemClock times reach the script", "[redis]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-system"));
    ratelimit::TokenBucket<RedisStorage, ratelimit::SystemClock> bucket(
        Limit::perMinute(3), storage, {}, limiterOptions("system"));
    const rt::RedisContextPtr raw = connectTo(*server);
    const auto localUs = [] {
        return std::chrono::duration_cast<std::chrono::microseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
            .count();
    };
    const std::int64_t before = localUs();
    const Decision d = bucket.tryAcquire("user", 2);
    const std::int64_t after = localUs();
    CHECK(d.allowed);
    CHECK_FALSE(d.degraded);
    CHECK(d.remaining == 1);
    CHECK(d.resetAfter == 40s);
    const std::int64_t last = std::stoll(stringReply(rt::command(
        raw.get(), {"HGET", redisKeyOf("rl-system", "system", "token_bucket", "user"), "last"})));
    CHECK(last >= before);
    CHECK(last <= after);
    CHECK(bucket.tryAcquire("user", 1).remaining == 0);
    CHECK_FALSE(bucket.tryAcquire("user", 1).allowed);
    // Window algorithms align on the wall clock too.
    ratelimit::FixedWindow<RedisStorage, ratelimit::SystemClock> window(
        Limit::per(2, 24h), storage, {}, limiterOptions("system"));
    const Decision w = window.tryAcquire("user");
    CHECK(w.allowed);
    const auto sinceMidnight =
        std::chrono::microseconds{localUs()} % std::chrono::microseconds{24h};
    CHECK(std::chrono::abs(w.resetAfter - (std::chrono::microseconds{24h} - sinceMidnight)) < 1s);
}

TEST_CASE("Redis storage: a TCP server", "[redis]") {
    const auto server = startServer({.tcp = true});
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-tcp"));
    ManualClock clock;
    RedisLimiter<SlidingLogModel> limiter(Limit::perSecond(5), storage, clock,
                                          limiterOptions("tcp"));
    for (int i = 0; i < 5; ++i) {
        const Decision d = limiter.tryAcquire("client");
        CHECK(d.allowed);
        CHECK_FALSE(d.degraded);
        CHECK(d.remaining == 4 - i);
    }
    CHECK_FALSE(limiter.tryAcquire("client").allowed);
    CHECK(storage.stats().connectsOpened == 1);  // one pooled connection, reused
    const rt::RedisContextPtr raw = connectTo(*server);
    CHECK(integerReply(rt::command(
              raw.get(), {"EXISTS", redisKeyOf("rl-tcp", "tcp", "sliding_log", "client")})) == 1);
}

TEST_CASE("Redis storage: AUTH with a password", "[redis]") {
    const auto server = startServer({.extraArgs = {"--requirepass", "s3cret pass"}});
    if (!server) {
        return;
    }
    ManualClock clock;
    RedisStorage::Options options = storageOptions(*server, "rl-auth");
    options.password = "s3cret pass";
    const RedisStorage storage(options);
    RedisLimiter<FixedWindowModel> limiter(Limit::perMinute(2), storage, clock,
                                           limiterOptions("auth"));
    CHECK(limiter.tryAcquire("k").remaining == 1);
    CHECK(limiter.tryAcquire("k").remaining == 0);
    CHECK_FALSE(limiter.tryAcquire("k").allowed);
    CHECK(storage.stats().failures == 0);

    // Without the password, or with a wrong one: an authentication error, not a decision.
    options.password = "wrong";
    RedisLimiter<FixedWindowModel> wrong(Limit::perMinute(2), RedisStorage(options), clock,
                                         limiterOptions("auth"));
    try {
        (void)wrong.tryAcquire("k");
        FAIL("a wrong password was accepted");
    } catch (const StoreException& e) {
        CHECK(e.code() == StoreError::kAuth);
    }
    // Without a password Redis 7 does not even answer NOAUTH: it refuses the unauthenticated
    // 16-argument EVALSHA with "ERR Protocol error: unauthenticated multibulk length" and
    // closes the connection. That is an authentication failure, and the connection is dead.
    options.password.clear();
    const RedisStorage noPassword(options);
    RedisLimiter<FixedWindowModel> none(Limit::perMinute(2), noPassword, clock,
                                        limiterOptions("auth"));
    try {
        (void)none.tryAcquire("k");
        FAIL("a call without the password was accepted");
    } catch (const StoreException& e) {
        INFO(e.what());
        CHECK(e.code() == StoreError::kAuth);
    }
    // The next call must not be sent on the connection the server closed (which fails as
    // "closed" or "outcome unknown"): it meets the same refusal, or the open breaker.
    try {
        (void)none.tryAcquire("k");
        FAIL("a call without the password was accepted");
    } catch (const StoreException& e) {
        INFO(e.what());
        CHECK(e.code() != StoreError::kClosed);
        CHECK(e.code() != StoreError::kOutcomeUnknown);
    }
}

TEST_CASE("Redis storage: AUTH as an ACL user", "[redis]") {
    const auto server = startServer({.extraArgs = {"--requirepass", "admin-pw"}});
    if (!server) {
        return;
    }
    const rt::RedisContextPtr raw = connectTo(*server);
    ok(rt::command(raw.get(), {"AUTH", "admin-pw"}));
    // A user that may touch only its own keys: proof that the storage authenticates as it.
    ok(rt::command(raw.get(),
                   {"ACL", "SETUSER", "limiter", "on", ">user-pw", "~rlacl:*", "+@all"}));

    ManualClock clock;
    RedisStorage::Options options = storageOptions(*server, "rlacl");
    options.user = "limiter";
    options.password = "user-pw";
    const RedisStorage storage(options);
    RedisLimiter<TokenBucketModel> limiter(Limit::perMinute(2), storage, clock,
                                           limiterOptions("acl"));
    CHECK(limiter.tryAcquire("k").remaining == 1);
    CHECK(limiter.tryAcquire("k").remaining == 0);
    CHECK_FALSE(limiter.tryAcquire("k").allowed);
    CHECK(storage.stats().failures == 0);
    CHECK(integerReply(rt::command(
              raw.get(), {"EXISTS", redisKeyOf("rlacl", "acl", "token_bucket", "k")})) == 1);

    // The same user outside its key pattern is refused (NOPERM): the ACL user is in force.
    options.keyPrefix = "other";
    RedisLimiter<TokenBucketModel> outside(Limit::perMinute(2), RedisStorage(options), clock,
                                           limiterOptions("acl"));
    try {
        (void)outside.tryAcquire("k");
        FAIL("an ACL user wrote outside its key pattern");
    } catch (const StoreException& e) {
        CHECK(e.code() == StoreError::kAuth);
    }
    // A wrong password for the user.
    options.keyPrefix = "rlacl";
    options.password = "admin-pw";
    RedisLimiter<TokenBucketModel> wrong(Limit::perMinute(2), RedisStorage(options), clock,
                                         limiterOptions("acl"));
    try {
        (void)wrong.tryAcquire("k");
        FAIL("a wrong user password was accepted");
    } catch (const StoreException& e) {
        CHECK(e.code() == StoreError::kAuth);
    }
}

TEST_CASE("Redis storage: the database option selects the database", "[redis]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    ManualClock clock;
    RedisStorage::Options options = storageOptions(*server, "rl-db");
    options.database = 3;
    const RedisStorage storage(options);
    RedisLimiter<LeakyBucketModel> limiter(Limit::perMinute(2), storage, clock,
                                           limiterOptions("db"));
    CHECK(limiter.tryAcquire("k").remaining == 1);
    CHECK(limiter.tryAcquire("k").remaining == 0);  // the second call, on a pooled connection
    const std::string stored = redisKeyOf("rl-db", "db", "leaky_bucket", "k");
    const rt::RedisContextPtr raw = connectTo(*server);
    CHECK(integerReply(rt::command(raw.get(), {"EXISTS", stored})) == 0);
    CHECK(integerReply(rt::command(raw.get(), {"DBSIZE"})) == 0);
    ok(rt::command(raw.get(), {"SELECT", "3"}));
    CHECK(integerReply(rt::command(raw.get(), {"EXISTS", stored})) == 1);
    CHECK(integerReply(rt::command(raw.get(), {"DBSIZE"})) == 1);

    // A database the server does not have is an error of the handshake.
    options.database = 99;
    RedisLimiter<LeakyBucketModel> missing(Limit::perMinute(2), RedisStorage(options), clock,
                                           limiterOptions("db"));
    try {
        (void)missing.tryAcquire("k");
        FAIL("SELECT 99 passed");
    } catch (const StoreException& e) {
        CHECK(e.code() == StoreError::kAuth);
    }
}

// =============================================================================================
// 6. Script cache
// =============================================================================================

namespace {

/// `cmdstat_<name>` -> its `calls` plus `rejected_calls` from INFO commandstats.
std::map<std::string, std::int64_t> commandCalls(redisContext* c) {
    const std::string info = stringReply(rt::command(c, {"INFO", "commandstats"}));
    std::map<std::string, std::int64_t> out;
    std::istringstream lines(info);
    std::string line;
    while (std::getline(lines, line)) {
        if (line.rfind("cmdstat_", 0) != 0) {
            continue;
        }
        const std::string name = line.substr(8, line.find(':') - 8);
        std::int64_t total = 0;
        // `calls` counts failed calls too; rejected ones (e.g. NOAUTH) only `rejected_calls`.
        for (const std::string_view field : {"calls=", "rejected_calls="}) {
            const std::size_t at = line.find(field);
            if (at != std::string::npos &&
                (at == 0 || line[at - 1] == ':' || line[at - 1] == ',')) {
                total += std::stoll(line.substr(at + field.size()));
            }
        }
        out[name] = total;
    }
    return out;
}

}  // namespace

TEMPLATE_TEST_CASE("Redis storage: after SCRIPT FLUSH the script is sent once more, once",
                   "[redis]", RATELIMIT_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-script"));
    ManualClock clock;
    clock.set(1h);
    RedisLimiter<TestType> limiter(Limit::perMinute(10), storage, clock, limiterOptions("script"));
    const rt::RedisContextPtr raw = connectTo(*server);

    CHECK(limiter.tryAcquire("k").remaining == 9);
    CHECK(limiter.tryAcquire("k").remaining == 8);
    const ratelimit::RedisStats before = storage.stats();

    ok(rt::command(raw.get(), {"SCRIPT", "FLUSH"}));
    ok(rt::command(raw.get(), {"CONFIG", "RESETSTAT"}));
    const Decision d = limiter.tryAcquire("k");
    const std::map<std::string, std::int64_t> calls = commandCalls(raw.get());
    const ratelimit::RedisStats after = storage.stats();

    CHECK(d.allowed);
    CHECK_FALSE(d.degraded);
    CHECK(d.remaining == 7);  // the step ran exactly once
    CHECK(after.scriptResends == before.scriptResends + 1);
    CHECK(after.requests == before.requests + 2);  // EVALSHA (NOSCRIPT), then EVAL
    CHECK(after.failures == 0);
    CHECK(after.connectsOpened == before.connectsOpened);
    // INFO commandstats: one EVALSHA, one EVAL, and nothing at all sent twice.
    REQUIRE(calls.count("evalsha") == 1);
    REQUIRE(calls.count("eval") == 1);
    CHECK(calls.at("evalsha") == 1);
    CHECK(calls.at("eval") == 1);
    for (const auto& [command, n] : calls) {
        INFO("cmdstat_" << command);
        CHECK(n == 1);
    }
    // The script is cached again: the next call is one EVALSHA.
    CHECK(limiter.tryAcquire("k").remaining == 6);
    CHECK(storage.stats().scriptResends == after.scriptResends);
    CHECK(storage.stats().requests == after.requests + 1);
}

// =============================================================================================
// 7. Bad configuration
// =============================================================================================

TEMPLATE_TEST_CASE("Redis storage: limits beyond 2^53 µs are refused at construction", "[redis]",
                   RATELIMIT_MODELS) {
    const RedisStorage storage;  // never contacted: construction does no I/O
    ManualClock clock;
    const auto make = [&](const Limit& limit) {
        return invalidArgument(
            [&] { RedisLimiter<TestType>(limit, storage, clock, limiterOptions("bounds")); });
    };
    // count·period = 2^20 · 2^33 µs = 2^53: refused, naming the bound and the largest count.
    const std::string atBound =
        make(Limit::per(std::int64_t{1} << 20, std::chrono::microseconds{std::int64_t{1} << 33}));
    INFO(atBound);
    CHECK(contains(atBound, "2^53"));
    CHECK(contains(atBound, "count·period"));
    CHECK(contains(atBound,
                   std::to_string((std::int64_t{1} << 20) - 1)));  // the largest accepted count
    // Just below: accepted.
    CHECK(make(Limit::per((std::int64_t{1} << 20) - 1,
                          std::chrono::microseconds{std::int64_t{1} << 33})) == "<no exception>");
    CHECK(make(Limit::per(std::int64_t{1} << 20,
                          std::chrono::microseconds{(std::int64_t{1} << 33) - 1})) ==
          "<no exception>");
    // The largest count at all, 2^48: count·period reaches 2^53 at a period of 32 µs.
    CHECK(contains(make(Limit::per(Limit::kMaxCount, 32us)), "2^53"));
    CHECK(make(Limit::per(Limit::kMaxCount, 31us)) == "<no exception>");

    // burst·period/gcd(count, period) = 2^20 · 2^33 / gcd(5, 2^33) = 2^53: the buckets refuse
    // it, the windows ignore burst. (count 5 keeps the refill span, burst·period/count, below
    // the 2^51 µs span bound, so that the value just below is accepted.)
    const auto period33 = std::chrono::microseconds{std::int64_t{1} << 33};
    const Limit wideBurst = Limit::per(5, period33).withBurst(std::int64_t{1} << 20);
    const std::string burst = make(wideBurst);
    INFO(burst);
    if constexpr (TestType::kBucket) {
        CHECK(contains(burst, "2^53"));
        CHECK(contains(burst, "burst·period/gcd"));
        CHECK(contains(burst,
                       std::to_string((std::int64_t{1} << 20) - 1)));  // the largest accepted burst
        CHECK(make(wideBurst.withBurst((std::int64_t{1} << 20) - 1)) == "<no exception>");
        // The bound is on the reduced units: with count 5·2^10, g = 2^10, so burst 2^30 gives
        // 2^30 · 2^33 / 2^10 = 2^53 (refused), while burst 2^30 - 1 passes although
        // burst·period is near 2^63.
        const Limit reduced = Limit::per(5 << 10, period33);
        CHECK(contains(make(reduced.withBurst(std::int64_t{1} << 30)), "burst·period/gcd"));
        CHECK(make(reduced.withBurst((std::int64_t{1} << 30) - 1)) == "<no exception>");
    } else {
        CHECK(burst == "<no exception>");
    }

    // A period that is not a whole number of microseconds (Redis counts µs) — accepted in memory.
    const std::string fraction = make(Limit::per(1, 1500ns));
    INFO(fraction);
    CHECK(contains(fraction, "period"));
    CHECK(contains(fraction, "1500"));
    CHECK_NOTHROW(MemoryLimiter<TestType>(Limit::per(1, 1500ns), MemoryStorage{}, clock));

    // Names with braces would break the hash tag.
    for (const std::string name : {"a{b", "a}b", "{}"}) {
        LimiterOptions o = limiterOptions(name);
        const std::string m = invalidArgument(
            [&] { RedisLimiter<TestType>(Limit::perSecond(1), storage, clock, o); });
        INFO(m);
        CHECK(contains(m, "name"));
    }
}

TEST_CASE("Redis storage: invalid options throw naming the field", "[redis]") {
    const auto with = [](auto change) {
        RedisStorage::Options o;
        change(o);
        return invalidArgument([&] { RedisStorage{o}; });
    };
    const std::string port = with([](RedisStorage::Options& o) { o.port = 0; });
    CHECK(contains(port, "port"));
    CHECK(contains(with([](RedisStorage::Options& o) { o.port = 65536; }), "port"));
    CHECK(contains(with([](RedisStorage::Options& o) { o.poolSize = 0; }), "poolSize"));
    CHECK(contains(with([](RedisStorage::Options& o) { o.timeout = 0ms; }), "timeout"));
    CHECK(contains(with([](RedisStorage::Options& o) { o.database = -1; }), "database"));
    CHECK(contains(with([](RedisStorage::Options& o) { o.keyPrefix = "a{b"; }), "keyPrefix"));
    CHECK(contains(with([](RedisStorage::Options& o) { o.keyPrefix = "a}b"; }), "keyPrefix"));
    CHECK(contains(with([](RedisStorage::Options& o) { o.host.clear(); }), "host"));
    // A unix socket needs no port.
    CHECK(with([](RedisStorage::Options& o) {
              o.port = 0;
              o.unixSocket = "/nonexistent/redis.sock";
          }) == "<no exception>");
    CHECK(with([](RedisStorage::Options&) {}) == "<no exception>");
}

namespace {

/// A loopback TCP socket that listens but never accepts: connections queue in its backlog.
class SilentListener {
public:
    SilentListener() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
        REQUIRE(fd_ >= 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof addr;
        // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
        auto* sa = reinterpret_cast<sockaddr*>(&addr);
        REQUIRE(::bind(fd_, sa, sizeof addr) == 0);
        REQUIRE(::getsockname(fd_, sa, &len) == 0);
        REQUIRE(::listen(fd_, 8) == 0);
        port_ = ntohs(addr.sin_port);
    }
    SilentListener(const SilentListener&) = delete;
    SilentListener& operator=(const SilentListener&) = delete;
    SilentListener(SilentListener&&) = delete;
    SilentListener& operator=(SilentListener&&) = delete;
    ~SilentListener() { ::close(fd_); }

    [[nodiscard]] int port() const { return port_; }
    /// Whether a connection is waiting to be accepted.
    [[nodiscard]] bool pending() const {
        pollfd p{fd_, POLLIN, 0};
        return ::poll(&p, 1, 0) == 1;
    }

private:
    int fd_ = -1;
    int port_ = 0;
};

/// A loopback port nothing listens on.
int closedPort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
    auto* sa = reinterpret_cast<sockaddr*>(&addr);
    REQUIRE(::bind(fd, sa, sizeof addr) == 0);
    REQUIRE(::getsockname(fd, sa, &len) == 0);
    ::close(fd);
    return ntohs(addr.sin_port);
}

}  // namespace

TEST_CASE("Redis storage: construction does no I/O; an unreachable server degrades the first call",
          "[redis]") {
    ManualClock clock;
    SECTION("a server that accepts but never answers is not contacted before the first call") {
        const SilentListener listener;
        RedisStorage::Options o;
        o.port = listener.port();
        o.timeout = 50ms;
        const RedisStorage storage(o);
        RedisLimiter<TokenBucketModel> limiter(Limit::perSecond(3), storage,
                                               clock);  // fall back to memory
        CHECK_FALSE(listener.pending());
        CHECK(storage.stats().connectsOpened == 0);
        CHECK(storage.stats().requests == 0);
        const auto started = std::chrono::steady_clock::now();
        const Decision d = limiter.tryAcquire("k");
        CHECK(std::chrono::steady_clock::now() - started < 2s);  // the deadline held
        CHECK(d.degraded);
        CHECK(d.allowed);  // the memory fallback admits
        CHECK(d.remaining == 2);
        CHECK(listener.pending());
        CHECK(storage.stats().failures == 1);
    }
    SECTION("nothing listens on the port") {
        RedisStorage::Options o;
        o.port = closedPort();
        std::optional<RedisStorage> storage;
        REQUIRE_NOTHROW(storage.emplace(o));
        LimiterOptions failClosed = limiterOptions("unreachable");
        failClosed.failurePolicy = FailurePolicy::kFailClosed;
        RedisLimiter<FixedWindowModel> closed(Limit::perSecond(3), *storage, clock, failClosed);
        const Decision d = closed.tryAcquire("k");
        CHECK(d.degraded);
        CHECK_FALSE(d.allowed);
        CHECK(d.retryAfter > 0ns);
        RedisLimiter<FixedWindowModel> throwing(Limit::perSecond(3), *storage, clock,
                                                limiterOptions("unreachable"));
        CHECK(storage->stats().failures == 1);
        // The breaker is open now: the next call is answered without I/O.
        try {
            (void)throwing.tryAcquire("k");
            FAIL("no exception");
        } catch (const StoreException& e) {
            CHECK(e.code() == StoreError::kCircuitOpen);
        }
    }
    SECTION("a unix socket that does not exist") {
        RedisStorage::Options o;
        o.unixSocket = "/nonexistent-ratelimit-dir/redis.sock";
        std::optional<RedisStorage> storage;
        REQUIRE_NOTHROW(storage.emplace(o));
        RedisLimiter<SlidingLogModel> limiter(Limit::perSecond(3), *storage, clock,
                                              limiterOptions("nosocket"));
        try {
            (void)limiter.tryAcquire("k");
            FAIL("no exception");
        } catch (const StoreException& e) {
            CHECK(e.code() == StoreError::kUnreachable);
        }
    }
}
