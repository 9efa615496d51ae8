// RedisStorage with pipelining (the default): many callers' requests share few connections,
// written together by whichever caller finds a connection idle. Against real redis-servers
// the tests start, pause and keep busy themselves.
//
// What can go wrong here and would show: a reply handed to the wrong caller (each thread has
// its own limit and cost pattern and checks every `remaining` it gets), a lost or doubled
// request (one key admits exactly its limit), a call held past its deadline behind a stalled
// batch, a request queued behind a stalled one failed with it.
//
// Only the main thread uses Catch2 macros: workers record what they saw, the main thread
// checks after join. Every wait is bounded.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>

#include <ratelimit/redis.hpp>

#include "support/catch.hpp"
#include "support/redis_server.hpp"
#include "support/redis_storage_support.hpp"
#include "support/redis_test_server.hpp"

namespace {

namespace rt = ratelimit_test;
using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::FailurePolicy;
using ratelimit::Limit;
using ratelimit::RedisServerClock;
using ratelimit::RedisStats;
using ratelimit::RedisStorage;
using ratelimit::StoreException;
using SteadyTime = std::chrono::steady_clock;

using Bucket = ratelimit::TokenBucket<RedisStorage>;
using Window = ratelimit::FixedWindow<RedisStorage>;

using ratelimit_test::startServer;

using ratelimit_test::describe;
using ratelimit_test::limiterOptions;

/// Releases every worker at once.
class StartLine {
public:
    void wait() const {
        while (!go_.load()) {
            std::this_thread::yield();
        }
    }
    void open() { go_.store(true); }

private:
    std::atomic<bool> go_{false};
};

/// A worker's first mismatch, if any (workers never call Catch2).
class Mismatches {
public:
    void add(std::string what) {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (first_.empty()) {
            first_ = std::move(what);
        }
        ++count_;
    }
    [[nodiscard]] std::string first() const {
        const std::lock_guard<std::mutex> lock(mutex_);
        return first_;
    }
    [[nodiscard]] int count() const {
        const std::lock_guard<std::mutex> lock(mutex_);
        return count_;
    }

private:
    mutable std::mutex mutex_;
    std::string first_;
    int count_ = 0;
};

/// Keeps `server` busy for `busy` from another client of its own with a script, so it reads
/// no request and sends no reply meanwhile; joins on destruction.
class BusyServer {
public:
    BusyServer(const rt::RedisServer& server, std::chrono::milliseconds busy)
        : raw_(server.connect()) {
        REQUIRE(raw_ != nullptr);
        REQUIRE(raw_->err == 0);
        constexpr const char* kBusy = R"lua(
local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
while true do
    local n = redis.call('TIME')
    if n[1] * 1000000 + n[2] - start > tonumber(ARGV[1]) then return 1 end
end)lua";
        const std::string micros =
            std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(busy).count());
        thread_ = std::thread([this, micros] {
            rt::command(raw_.get(), {"EVAL", kBusy, "0", micros});
        });
        std::this_thread::sleep_for(50ms);  // the script runs
    }
    BusyServer(const BusyServer&) = delete;
    BusyServer& operator=(const BusyServer&) = delete;
    BusyServer(BusyServer&&) = delete;
    BusyServer& operator=(BusyServer&&) = delete;
    ~BusyServer() { thread_.join(); }

private:
    rt::RedisContextPtr raw_;
    std::thread thread_;
};

}  // namespace

TEST_CASE("Redis pipeline: 8 threads x 300 calls on one key admit exactly the limit",
          "[redis_pipeline][redis][concurrency]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage{{.unixSocket = server->unixSocket(), .timeout = 5000ms}};
    Window limiter{Limit::perHour(1000), storage, RedisServerClock{},
                   limiterOptions("atomic", FailurePolicy::kThrow)};
    constexpr int kThreads = 8;
    constexpr int kCalls = 300;
    StartLine start;
    std::atomic<int> admitted{0};
    std::atomic<int> degraded{0};
    Mismatches errors;
    std::vector<std::thread> threads;
    threads.reserve(kThreads);
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&] {
            Window mine = limiter;
            start.wait();
            for (int i = 0; i < kCalls; ++i) {
                try {
                    const Decision d = mine.tryAcquire("hot", 1);
                    admitted.fetch_add(d.allowed ? 1 : 0);
                    degraded.fetch_add(d.degraded ? 1 : 0);
                    if (d.limit != 1000) {
                        errors.add("a decision of another limit: " + describe(d));
                    }
                } catch (const StoreException& e) {
                    errors.add(std::string("threw: ") + e.what());
                }
            }
        });
    }
    start.open();
    for (std::thread& t : threads) {
        t.join();
    }
    const RedisStats stats = storage.stats();
    INFO(describe(stats));
    INFO(errors.first());
    CHECK(errors.count() == 0);
    CHECK(degraded.load() == 0);
    CHECK(admitted.load() == 1000);
    CHECK(stats.requests - stats.scriptResends == std::uint64_t{kThreads} * kCalls);
    // Requests shared writes, over at most the two default pipeline connections.
    CHECK(stats.writes < stats.requests);
    CHECK(stats.connectsOpened <= 2);
}

TEST_CASE("Redis pipeline: every caller gets its own reply (own limit, own remaining sequence)",
          "[redis_pipeline][redis][concurrency]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    // One connection: every thread's requests go through the same pipeline.
    const RedisStorage storage{
        {.unixSocket = server->unixSocket(), .timeout = 5000ms, .pipelineConnections = 1}};
    constexpr int kThreads = 8;
    constexpr int kCalls = 250;
    StartLine start;
    Mismatches errors;
    std::vector<std::thread> threads;
    threads.reserve(kThreads);
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            // Limits 97, 104, ... per hour: a token comes back every 37 s or more, far longer
            // than the test, so `remaining` follows the costs exactly.
            const std::int64_t limit = 97 + 7 * t;
            Bucket mine{Limit::perHour(limit), storage, RedisServerClock{},
                        limiterOptions("own" + std::to_string(t), FailurePolicy::kThrow)};
            std::int64_t remaining = limit;
            start.wait();
            for (int i = 0; i < kCalls; ++i) {
                const std::int64_t cost = 1 + (i * (t + 1)) % 4;  // its own cost pattern
                const bool expectAllowed = cost <= remaining;
                try {
                    const Decision d = mine.tryAcquire("k", cost);
                    if (expectAllowed) {
                        remaining -= cost;
                    }
                    if (d.degraded || d.limit != limit || d.allowed != expectAllowed ||
                        d.remaining != remaining) {
                        errors.add("thread " + std::to_string(t) + " call " + std::to_string(i) +
                                   " cost " + std::to_string(cost) + ": expected limit " +
                                   std::to_string(limit) + " remaining " +
                                   std::to_string(remaining) + ", got " + describe(d));
                        return;
                    }
                } catch (const StoreException& e) {
                    errors.add(std::string("threw: ") + e.what());
                    return;
                }
            }
        });
    }
    start.open();
    for (std::thread& t : threads) {
        t.join();
    }
    const RedisStats stats = storage.stats();
    INFO(describe(stats));
    INFO(errors.first());
    CHECK(errors.count() == 0);
    CHECK(stats.connectsOpened == 1);
    CHECK(stats.writes < stats.requests);
}

TEST_CASE("Redis pipeline: a server paused under 8 threads: deadlines kept, no stray reply",
          "[redis_pipeline][redis][faults]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    constexpr auto kTimeout = 100ms;
    const RedisStorage storage{{.unixSocket = server->unixSocket(),
                                .timeout = kTimeout,
                                .breakerBackoff = 20ms,
                                .breakerMaxBackoff = 40ms,
                                .pipelineConnections = 1}};
    constexpr int kThreads = 8;
    StartLine start;
    std::atomic<bool> stop{false};
    std::atomic<std::int64_t> slowestUs{0};
    std::atomic<int> answeredAfterResume{0};
    std::atomic<bool> resumed{false};
    Mismatches errors;
    std::vector<std::thread> threads;
    threads.reserve(kThreads);
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            // Never refuses, refills 10 an hour; the limit (the burst) names the caller.
            const std::int64_t limit = 1'000'000 + t;
            Bucket mine{Limit::perHour(10).withBurst(limit), storage, RedisServerClock{},
                        limiterOptions("pause" + std::to_string(t), FailurePolicy::kFailOpen)};
            const std::string key = "k" + std::to_string(t);
            std::int64_t lastRemaining = limit;
            start.wait();
            while (!stop.load()) {
                const std::int64_t cost = 1 + t;
                const auto t0 = SteadyTime::now();
                const Decision d = mine.tryAcquire(key, cost);
                const auto took =
                    std::chrono::duration_cast<std::chrono::microseconds>(SteadyTime::now() - t0)
                        .count();
                std::int64_t seen = slowestUs.load();
                while (took > seen && !slowestUs.compare_exchange_weak(seen, took)) {
                }
                if (d.limit != limit) {
                    errors.add("thread " + std::to_string(t) + " got " + describe(d));
                }
                if (!d.degraded) {
                    // A request that timed out may have run: remaining can drop by more than
                    // this call's cost, never by less, and never rise.
                    if (d.remaining > lastRemaining - cost) {
                        errors.add("thread " + std::to_string(t) + ": remaining " +
                                   std::to_string(d.remaining) + " after " +
                                   std::to_string(lastRemaining) + " and cost " +
                                   std::to_string(cost));
                    }
                    lastRemaining = d.remaining;
                    if (resumed.load()) {
                        answeredAfterResume.fetch_add(1);
                    }
                }
            }
        });
    }
    start.open();
    std::this_thread::sleep_for(200ms);  // pipelines in flight
    const RedisStats before = storage.stats();
    server->pause();
    std::this_thread::sleep_for(400ms);
    server->resume();
    const RedisStats duringPause = storage.stats();
    resumed.store(true);
    const bool back = [&] {
        const auto until = SteadyTime::now() + 10s;
        while (SteadyTime::now() < until) {
            if (answeredAfterResume.load() >= 200) {
                return true;
            }
            std::this_thread::sleep_for(5ms);
        }
        return false;
    }();
    stop.store(true);
    for (std::thread& t : threads) {
        t.join();
    }
    INFO(describe(before) << " " << describe(duringPause) << " " << describe(storage.stats()));
    INFO(errors.first());
    CHECK(errors.count() == 0);
    CHECK(duringPause.failures > before.failures);  // the pause caught requests in flight
    CHECK(back);
    // Every call returned within its deadline, plus scheduling slack.
    CHECK(slowestUs.load() < std::chrono::microseconds(kTimeout + 150ms).count());
}

TEST_CASE(
    "Redis pipeline: a caller whose deadline passes fails alone; one written behind it goes on",
    "[redis_pipeline][redis][faults]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    constexpr auto kTimeout = 600ms;
    const RedisStorage storage{
        {.unixSocket = server->unixSocket(), .timeout = kTimeout, .pipelineConnections = 1}};
    Bucket first{Limit::perHour(10), storage, RedisServerClock{},
                 limiterOptions("first", FailurePolicy::kThrow)};
    Bucket second{Limit::perHour(7), storage, RedisServerClock{},
                  limiterOptions("second", FailurePolicy::kThrow)};
    REQUIRE(second.tryAcquire("warm", 1).remaining == 6);  // the connection is open

    std::optional<BusyServer> busy;
    busy.emplace(*server, 800ms);

    // A: sent at once, answered only after the script, past A's deadline.
    std::string firstError;
    SteadyTime::duration firstTook{};
    std::thread callerA([&] {
        const auto t0 = SteadyTime::now();
        try {
            const Decision d = first.tryAcquire("a", 3);
            firstError = "no exception: " + describe(d);
        } catch (const StoreException& e) {
            firstError = std::string(ratelimit::toString(e.code()));
        }
        firstTook = SteadyTime::now() - t0;
    });
    std::this_thread::sleep_for(250ms);
    // B: written behind A on the one connection (no one is writing); its deadline is 250 ms
    // after A's. A's reply, read after A gave up, goes to no one; B's comes after it.
    std::optional<Decision> secondDecision;
    std::string secondError;
    std::thread callerB([&] {
        try {
            secondDecision = second.tryAcquire("warm", 2);
        } catch (const StoreException& e) {
            secondError = std::string(ratelimit::toString(e.code())) + ": " + e.what();
        }
    });
    callerA.join();
    callerB.join();
    busy.reset();

    INFO("first took " << std::chrono::duration_cast<std::chrono::milliseconds>(firstTook).count()
                       << " ms: " << firstError);
    CHECK(firstError == "outcome_unknown");
    CHECK(firstTook >= kTimeout - 5ms);
    CHECK(firstTook < kTimeout + 200ms);
    INFO(secondError);
    REQUIRE(secondDecision.has_value());
    INFO(describe(*secondDecision));
    CHECK((!secondDecision->degraded && secondDecision->allowed && secondDecision->limit == 7 &&
           secondDecision->remaining == 4));
    // A's request went out once: it ran once or not at all, never twice. (A's timeout opened
    // the breaker: retry until its probe gets through.)
    std::optional<Decision> a;
    const auto until = SteadyTime::now() + 5s;
    while (!a && SteadyTime::now() < until) {
        try {
            a = first.peek("a", 0);
        } catch (const StoreException&) {
            std::this_thread::sleep_for(10ms);
        }
    }
    REQUIRE(a.has_value());
    INFO(describe(*a));
    CHECK((a->remaining == 10 || a->remaining == 7));
}

TEST_CASE("Redis pipeline: writes do not wait for the replies of earlier writes",
          "[redis_pipeline][redis]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage{
        {.unixSocket = server->unixSocket(), .timeout = 5s, .pipelineConnections = 1}};
    Bucket limiter{Limit::perHour(10), storage, RedisServerClock{},
                   limiterOptions("early", FailurePolicy::kThrow)};
    REQUIRE(limiter.tryAcquire("warm", 1).remaining == 9);  // the connection is open

    std::optional<BusyServer> busy;  // no reply comes meanwhile
    busy.emplace(*server, 1000ms);
    const auto busySince = SteadyTime::now();
    const RedisStats before = storage.stats();
    const auto writesSince = [&] { return storage.stats().writes - before.writes; };
    const auto waitForWrites = [&](std::uint64_t n) {
        const auto until = SteadyTime::now() + 400ms;
        while (writesSince() < n && SteadyTime::now() < until) {
            std::this_thread::sleep_for(1ms);
        }
    };

    // The first caller, then three more once its request is written, each with a key and a
    // cost of its own: their requests are written while the first waits for its reply.
    constexpr std::size_t kCallers = 4;
    const auto cost = [](std::size_t c) { return static_cast<std::int64_t>(c) + 1; };
    std::array<std::optional<Decision>, kCallers> decisions{};
    std::array<std::string, kCallers> errors{};
    std::vector<std::thread> callers;
    callers.reserve(kCallers);
    for (std::size_t c = 0; c < kCallers; ++c) {
        callers.emplace_back([&, c] {
            try {
                decisions[c] = limiter.tryAcquire("k" + std::to_string(c), cost(c));
            } catch (const StoreException& e) {
                errors[c] = e.what();
            }
        });
        if (c == 0) {
            waitForWrites(1);
        }
    }
    waitForWrites(2);
    const RedisStats whileBusy = storage.stats();
    const bool stillBusy = SteadyTime::now() - busySince < 900ms;
    for (std::thread& t : callers) {
        t.join();
    }
    busy.reset();

    INFO(describe(before) << " " << describe(whileBusy) << " " << describe(storage.stats()));
    // Waiting for the first reply before the next write would have made one write by now.
    REQUIRE(stillBusy);
    CHECK(whileBusy.writes - before.writes >= 2);
    for (std::size_t c = 0; c < kCallers; ++c) {
        INFO("caller " << c << ": " << errors[c]);
        REQUIRE(decisions[c].has_value());
        CHECK((decisions[c]->allowed && decisions[c]->remaining == 10 - cost(c)));
    }
}
