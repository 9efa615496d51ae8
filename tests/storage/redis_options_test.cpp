// Tests of include/ratelimit/storage/redis.hpp: what a storage does with its options and its
// clock. Limiters over server time (the default) and SystemClock, the function library and the
// script cache (after FUNCTION FLUSH and SCRIPT FLUSH, hosts loading at once, a library's kept
// quotas), limits beyond Redis's exact range, invalid options, and a construction that does no
// I/O. Each test that needs a server starts its own redis-server.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <netinet/in.h>
#include <optional>
#include <poll.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/socket.h>
#include <thread>
#include <type_traits>
#include <unistd.h>
#include <vector>

#include <hiredis/hiredis.h>

#include <ratelimit/redis.hpp>

#include "support/catch.hpp"
#include "support/dry_run.hpp"
#include "support/redis_server.hpp"
#include "support/redis_storage_support.hpp"
#include "support/redis_test_server.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

namespace {

/// The server's TIME in µs.
std::int64_t serverTimeUs(redisContext* c) {
    const RedisReplyPtr r = command(c, {"TIME"});
    REQUIRE(r != nullptr);
    REQUIRE(r->type == REDIS_REPLY_ARRAY);
    REQUIRE(r->elements == 2);
    return std::stoll(std::string(r->element[0]->str, r->element[0]->len)) * 1'000'000 +
           std::stoll(std::string(r->element[1]->str, r->element[1]->len));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Clocks

TEST_CASE("RedisStorage: TokenBucket<RedisStorage> reads the server's TIME",
          "[redis_storage][redis]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-time"));
    ratelimit::TokenBucket<RedisStorage> bucket(Limit::perMinute(3), storage, {},
                                                limiterOptions("server-time"));
    static_assert(
        std::is_same_v<std::remove_cvref_t<decltype(bucket.clock())>, ratelimit::RedisServerClock>);
    const RedisContextPtr raw = connectTo(*server);

    const std::int64_t before = serverTimeUs(raw.get());
    Decision d = bucket.tryAcquire("user");
    const std::int64_t after = serverTimeUs(raw.get());
    CHECK(d.allowed);
    CHECK_FALSE(d.degraded);
    CHECK(d.limit == 3);
    CHECK(d.remaining == 2);
    CHECK(d.resetAfter == 20s);
    // The state was written at the server's time.
    const std::vector<std::int64_t> state = unpackedState(stringReply(command(
        raw.get(),
        {"GET", redisKeyOf<ratelimit::TokenBucketModel>("rl-time", "server-time", "user")})));
    REQUIRE(state.size() == 2 + 3);  // the state, then the limit it was written under
    const std::int64_t last = state.front();
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

TEST_CASE("RedisStorage: SystemClock times reach the script", "[redis_storage][redis]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-system"));
    ratelimit::TokenBucket<RedisStorage, ratelimit::SystemClock> bucket(
        Limit::perMinute(3), storage, {}, limiterOptions("system"));
    const RedisContextPtr raw = connectTo(*server);
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
    const std::vector<std::int64_t> state = unpackedState(stringReply(
        command(raw.get(),
                {"GET", redisKeyOf<ratelimit::TokenBucketModel>("rl-system", "system", "user")})));
    REQUIRE(state.size() == 2 + 3);  // the state, then the limit it was written under
    const std::int64_t last = state.front();
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

// ---------------------------------------------------------------------------------------------
// The script cache

namespace {

/// `cmdstat_<name>` -> its `calls` plus `rejected_calls` from INFO commandstats.
std::map<std::string, std::int64_t> commandCalls(redisContext* c) {
    const std::string info = stringReply(command(c, {"INFO", "commandstats"}));
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

TEMPLATE_TEST_CASE("RedisStorage: after FUNCTION FLUSH the library is loaded once more, once",
                   "[redis_storage][redis]", RATELIMIT_TEST_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-function"));
    ManualClock clock;
    clock.set(1h);
    RedisLimiter<TestType> limiter(Limit::perMinute(10), storage, clock, limiterOptions("fn"));
    const RedisContextPtr raw = connectTo(*server);

    ok(command(raw.get(), {"CONFIG", "RESETSTAT"}));
    CHECK(limiter.tryAcquire("k").remaining == 9);  // FCALL (not found), FUNCTION LOAD, FCALL
    const ratelimit::RedisStats first = storage.stats();
    CHECK(first.requests == 3);
    CHECK(first.scriptResends == 2);
    CHECK(first.functionLoads == 1);
    CHECK(limiter.tryAcquire("k").remaining == 8);
    const ratelimit::RedisStats before = storage.stats();
    CHECK(before.requests == first.requests + 1);  // FCALL alone
    std::map<std::string, std::int64_t> calls = commandCalls(raw.get());
    CHECK(calls["fcall"] == 3);
    CHECK(calls["function|load"] == 1);
    CHECK_FALSE(calls.contains("evalsha"));
    CHECK_FALSE(calls.contains("eval"));
    // The library on the server is the table's, by name.
    const RedisReplyPtr list = command(raw.get(), {"FUNCTION", "LIST"});
    REQUIRE(list != nullptr);
    REQUIRE(list->type == REDIS_REPLY_ARRAY);
    REQUIRE(list->elements == 1);
    const redisReply* const listed = list->element[0];
    REQUIRE(listed->type == REDIS_REPLY_ARRAY);
    REQUIRE(listed->elements >= 2);
    const std::string library =
        ratelimit::detail::scriptOf<TestType>(ratelimit::detail::ScriptForm::kLibrary);
    // As strings: clang's Catch main has no StringMaker for std::string_view.
    CHECK(std::string(listed->element[1]->str, listed->element[1]->len) ==
          std::string(ratelimit::detail::libraryName(library)));

    ok(command(raw.get(), {"FUNCTION", "FLUSH"}));
    ok(command(raw.get(), {"CONFIG", "RESETSTAT"}));
    const Decision d = limiter.tryAcquire("k");
    calls = commandCalls(raw.get());
    const ratelimit::RedisStats after = storage.stats();

    CHECK(d.allowed);
    CHECK_FALSE(d.degraded);
    CHECK(d.remaining == 7);  // the step ran exactly once
    CHECK(after.scriptResends == before.scriptResends + 2);
    CHECK(after.requests == before.requests + 3);
    CHECK(after.functionLoads == before.functionLoads + 1);
    CHECK(after.failures == 0);
    CHECK(after.connectsOpened == before.connectsOpened);
    CHECK(calls["fcall"] == 2);
    CHECK(calls["function|load"] == 1);
    CHECK_FALSE(calls.contains("evalsha"));
    CHECK(limiter.tryAcquire("k").remaining == 6);
    CHECK(storage.stats().requests == after.requests + 1);
}

TEST_CASE("RedisStorage: hosts that find the library missing at once load it once between them",
          "[redis_storage][redis][concurrency]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    // Eight hosts (a storage each), started together on a server that never ran the script:
    // each call's FCALL may find the function missing, then all but one FUNCTION LOAD find
    // the library already there, and every call still runs exactly once.
    constexpr int kHosts = 8;
    constexpr int kCalls = 20;
    std::vector<std::unique_ptr<RedisStorage>> storages;
    std::vector<std::unique_ptr<RedisLimiter<ratelimit::FixedWindowModel>>> limiters;
    storages.reserve(kHosts);
    limiters.reserve(kHosts);
    ManualClock clock;
    clock.set(1h);
    for (int h = 0; h < kHosts; ++h) {
        storages.push_back(std::make_unique<RedisStorage>(storageOptions(*server, "rl-race")));
        limiters.push_back(std::make_unique<RedisLimiter<ratelimit::FixedWindowModel>>(
            Limit::perHour(100), *storages.back(), clock, limiterOptions("race")));
    }
    std::atomic<bool> go{false};
    std::atomic<int> admitted{0};
    std::atomic<int> degraded{0};
    std::vector<std::thread> threads;
    threads.reserve(kHosts);
    for (int h = 0; h < kHosts; ++h) {
        threads.emplace_back([&, h] {
            while (!go.load()) {
                std::this_thread::yield();
            }
            for (int i = 0; i < kCalls; ++i) {
                const Decision d = limiters[static_cast<std::size_t>(h)]->tryAcquire("hot");
                admitted.fetch_add(d.allowed ? 1 : 0);
                degraded.fetch_add(d.degraded ? 1 : 0);
            }
        });
    }
    go.store(true);
    for (std::thread& t : threads) {
        t.join();
    }
    CHECK(degraded.load() == 0);
    CHECK(admitted.load() == 100);
    std::uint64_t loads = 0;
    for (const auto& storage : storages) {
        const ratelimit::RedisStats stats = storage->stats();
        INFO(describe(stats));
        CHECK(stats.requests - stats.scriptResends == std::uint64_t{kCalls});
        CHECK(stats.failures == 0);
        loads += stats.functionLoads;
    }
    CHECK(loads == 1);
}

TEST_CASE("RedisStorage: a library reads again a quota it no longer keeps",
          "[redis_storage][redis]") {
    const auto server = startServer();
    if (!server) {
        return;
    }
    // More limits than a library keeps quotas (detail::kQuotasKept), all of one script: every
    // call still steps under its own limit, before and after the library starts its quotas
    // again.
    const RedisStorage storage(storageOptions(*server, "rl-quotas"));
    ManualClock clock;
    clock.set(1h);
    constexpr int kLimits = ratelimit::detail::kQuotasKept + 6;
    std::vector<RedisLimiter<ratelimit::TokenBucketModel>> limiters;
    limiters.reserve(kLimits);
    for (int i = 0; i < kLimits; ++i) {
        limiters.emplace_back(Limit::perHour(10 + i), storage, clock,
                              limiterOptions("quota" + std::to_string(i)));
    }
    for (int round = 1; round <= 2; ++round) {
        for (int i = 0; i < kLimits; ++i) {
            const Decision d = limiters[static_cast<std::size_t>(i)].tryAcquire("k");
            INFO("limit " << 10 + i << ", round " << round << ": " << describe(d));
            CHECK((!d.degraded && d.allowed));
            CHECK(d.limit == 10 + i);
            CHECK(d.remaining == 10 + i - round);
        }
    }
    CHECK(storage.stats().functionLoads == 1);
}

TEMPLATE_TEST_CASE("RedisStorage: after SCRIPT FLUSH the script is sent once more, once",
                   "[redis_storage][redis]", RATELIMIT_TEST_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    ratelimit::RedisStorage::Options options = storageOptions(*server, "rl-script");
    options.functions = false;  // EVALSHA, as on Redis 6
    const RedisStorage storage(options);
    ManualClock clock;
    clock.set(1h);
    RedisLimiter<TestType> limiter(Limit::perMinute(10), storage, clock, limiterOptions("script"));
    const RedisContextPtr raw = connectTo(*server);

    CHECK(limiter.tryAcquire("k").remaining == 9);
    CHECK(limiter.tryAcquire("k").remaining == 8);
    const ratelimit::RedisStats before = storage.stats();

    ok(command(raw.get(), {"SCRIPT", "FLUSH"}));
    ok(command(raw.get(), {"CONFIG", "RESETSTAT"}));
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

// ---------------------------------------------------------------------------------------------
// Bad configuration, and construction without I/O

TEMPLATE_TEST_CASE("RedisStorage: limits beyond 2^53 µs are refused at construction",
                   "[redis_storage][redis]", RATELIMIT_TEST_MODELS) {
    const RedisStorage storage;  // never contacted: construction does no I/O
    ManualClock clock;
    const auto make = [&](const Limit& limit) {
        RedisLimiter<TestType>(limit, storage, clock, limiterOptions("bounds"));
    };
    // std::invalid_argument whose message `matcher` accepts.
    const auto refuses = [&](const Limit& limit, const auto& matcher) {
        INFO(describe(limit));
        CHECK_THROWS_AS(make(limit), std::invalid_argument);
        CHECK_THROWS_WITH(make(limit), matcher);
    };
    // count·period = 2^20 · 2^33 µs = 2^53: refused, naming the bound and the largest count.
    refuses(Limit::per(std::int64_t{1} << 20, std::chrono::microseconds{std::int64_t{1} << 33}),
            Contains("2^53") && Contains("count·period") &&
                Contains(std::to_string((std::int64_t{1} << 20) - 1)));
    // Just below: accepted.
    CHECK_NOTHROW(make(
        Limit::per((std::int64_t{1} << 20) - 1, std::chrono::microseconds{std::int64_t{1} << 33})));
    CHECK_NOTHROW(make(
        Limit::per(std::int64_t{1} << 20, std::chrono::microseconds{(std::int64_t{1} << 33) - 1})));
    // The largest count at all, 2^48: count·period reaches 2^53 at a period of 32 µs.
    refuses(Limit::per(Limit::kMaxCount, 32us), Contains("2^53"));
    CHECK_NOTHROW(make(Limit::per(Limit::kMaxCount, 31us)));

    // burst·period/gcd(count, period) = 2^20 · 2^33 / gcd(5, 2^33) = 2^53: the buckets refuse
    // it, the windows ignore burst. (count 5 keeps the refill span, burst·period/count, below
    // the 2^51 µs span bound, so that the value just below is accepted.)
    const auto period33 = std::chrono::microseconds{std::int64_t{1} << 33};
    const Limit wideBurst = Limit::per(5, period33).withBurst(std::int64_t{1} << 20);
    if constexpr (TestType::kBucket) {
        // Naming the largest accepted burst.
        refuses(wideBurst, Contains("2^53") && Contains("burst·period/gcd") &&
                               Contains(std::to_string((std::int64_t{1} << 20) - 1)));
        CHECK_NOTHROW(make(wideBurst.withBurst((std::int64_t{1} << 20) - 1)));
        // The bound is on the reduced units: with count 5·2^10, g = 2^10, so burst 2^30 gives
        // 2^30 · 2^33 / 2^10 = 2^53 (refused), while burst 2^30 - 1 passes although
        // burst·period is near 2^63.
        const Limit reduced = Limit::per(5 << 10, period33);
        refuses(reduced.withBurst(std::int64_t{1} << 30), Contains("burst·period/gcd"));
        CHECK_NOTHROW(make(reduced.withBurst((std::int64_t{1} << 30) - 1)));
    } else {
        CHECK_NOTHROW(make(wideBurst));
    }

    // A period that is not a whole number of microseconds (Redis counts µs) — accepted in memory.
    refuses(Limit::per(1, 1500ns), Contains("period") && Contains("1500"));
    CHECK_NOTHROW(MemoryLimiter<TestType>(Limit::per(1, 1500ns), MemoryStorage{}, clock));

    // Names with braces would break the hash tag.
    for (const std::string name : {"a{b", "a}b", "{}"}) {
        INFO("name " << name);
        const LimiterOptions o = limiterOptions(name);
        CHECK_THROWS_AS(RedisLimiter<TestType>(Limit::perSecond(1), storage, clock, o),
                        std::invalid_argument);
        CHECK_THROWS_WITH(RedisLimiter<TestType>(Limit::perSecond(1), storage, clock, o),
                          Contains("name"));
    }
}

TEMPLATE_TEST_CASE("RedisStorage: a dry-run admits every call and reports what enforcing decides",
                   "[redis_storage][redis]", RATELIMIT_TEST_MODELS) {
    const auto server = startServer();
    if (!server) {
        return;
    }
    const RedisStorage storage(storageOptions(*server, "rl-dry"));
    const Limit limit = Limit::per(5, 2s).withBurst(3);
    ManualClock clock;
    clock.set(1h + 250ms);
    RedisLimiter<TestType> enforcing(limit, storage, clock, limiterOptions("enforcing"));
    ratelimit::LimiterOptions shadow = limiterOptions("shadow");
    shadow.dryRun = true;
    RedisLimiter<TestType> dryRun(limit, storage, clock, shadow);
    Rng rng(43);
    const std::uint64_t refusals = replayBesideEnforcing(enforcing, dryRun, clock, rng, 600);
    CHECK(refusals > 60);
    CHECK(dryRun.dryRunRefusals() == refusals);
    CHECK(enforcing.dryRunRefusals() == 0);
}

TEST_CASE("RedisStorage: invalid options throw naming the field", "[redis_storage][redis]") {
    const auto with = [](auto change) {
        RedisStorage::Options o;
        change(o);
        return o;
    };
    // std::invalid_argument naming `field`.
    const auto refuses = [](const RedisStorage::Options& o, const std::string& field) {
        INFO(field);
        CHECK_THROWS_AS(RedisStorage{o}, std::invalid_argument);
        CHECK_THROWS_WITH(RedisStorage{o}, Contains(field));
    };
    refuses(with([](RedisStorage::Options& o) { o.port = 0; }), "port");
    refuses(with([](RedisStorage::Options& o) { o.port = 65536; }), "port");
    refuses(with([](RedisStorage::Options& o) { o.poolSize = 0; }), "poolSize");
    refuses(with([](RedisStorage::Options& o) { o.timeout = 0ms; }), "timeout");
    refuses(with([](RedisStorage::Options& o) { o.database = -1; }), "database");
    refuses(with([](RedisStorage::Options& o) { o.keyPrefix = "a{b"; }), "keyPrefix");
    refuses(with([](RedisStorage::Options& o) { o.keyPrefix = "a}b"; }), "keyPrefix");
    refuses(with([](RedisStorage::Options& o) { o.host.clear(); }), "host");
    refuses(with([](RedisStorage::Options& o) { o.unixSocket = std::string(108, 's'); }),
            "unixSocket");
    // A unix socket needs no port.
    CHECK_NOTHROW(RedisStorage{with([](RedisStorage::Options& o) {
        o.port = 0;
        o.unixSocket = "/nonexistent/redis.sock";
    })});
    CHECK_NOTHROW(RedisStorage{RedisStorage::Options{}});
}

namespace {

/// A loopback TCP socket that listens but never accepts: connections queue in its backlog.
class SilentListener {
public:
    SilentListener()
        : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)), port_(bindLoopback(fd_)) {
        REQUIRE(::listen(fd_, 8) == 0);
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

}  // namespace

TEST_CASE("RedisStorage: construction does no I/O; an unreachable server degrades the first call",
          "[redis_storage][redis]") {
    ManualClock clock;
    SECTION("a server that accepts but never answers is not contacted before the first call") {
        const SilentListener listener;
        RedisStorage::Options o;
        o.port = listener.port();
        o.timeout = 50ms;
        const RedisStorage storage(o);
        RedisLimiter<ratelimit::TokenBucketModel> limiter(Limit::perSecond(3), storage,
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
        RedisLimiter<ratelimit::FixedWindowModel> closed(Limit::perSecond(3), *storage, clock,
                                                         failClosed);
        const Decision d = closed.tryAcquire("k");
        CHECK(d.degraded);
        CHECK_FALSE(d.allowed);
        CHECK(d.retryAfter > 0ns);
        RedisLimiter<ratelimit::FixedWindowModel> throwing(Limit::perSecond(3), *storage, clock,
                                                           limiterOptions("unreachable"));
        CHECK(storage->stats().failures == 1);
        // The breaker is open now: the next call is answered without I/O.
        CHECK_THROWS_MATCHES(throwing.tryAcquire("k"), StoreException,
                             StoreErrorIs(StoreError::kCircuitOpen));
    }
    SECTION("a unix socket that does not exist") {
        RedisStorage::Options o;
        o.unixSocket = "/nonexistent-ratelimit-dir/redis.sock";
        std::optional<RedisStorage> storage;
        REQUIRE_NOTHROW(storage.emplace(o));
        RedisLimiter<ratelimit::SlidingLogModel> limiter(Limit::perSecond(3), *storage, clock,
                                                         limiterOptions("nosocket"));
        CHECK_THROWS_MATCHES(limiter.tryAcquire("k"), StoreException,
                             StoreErrorIs(StoreError::kUnreachable));
    }
}

}  // namespace ratelimit_test
